"""One instance: a process group, its states, and how the platform ends it.

An instance is a function process (functions-framework's gunicorn master and its
worker) in its own process group; signals go to the whole group, as Cloud Run's
go to a whole container. Shutting down follows the container runtime contract
(https://cloud.google.com/run/docs/container-contract#instance-shutdown): SIGTERM,
then SIGKILL if anything of the group is still alive after the grace period.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reclaim.local.cloudrun.billing import Meter
from reclaim.local.cloudrun.revision import Revision, RevisionState
from reclaim.local.procs import group_pids, reap, signal_group, wait_group_stopped

_POLL_S = 0.02


class State(StrEnum):
    """Where an instance is in its life; only SERVING instances get requests."""

    STARTING = "starting"  # process started, not listening yet (a cold start)
    SERVING = "serving"  # listening; gets requests while routed
    STOPPING = "stopping"  # unrouted; SIGTERM sent (or about to be), waiting out the grace
    GONE = "gone"  # no process left


class Outcome(StrEnum):
    """How an instance's shutdown ended."""

    EXITED = "exited"  # the group exited within the grace after SIGTERM
    KILLED_AFTER_GRACE = "killed after grace"  # still alive at the end of the grace: SIGKILL
    KILLED = "killed"  # SIGKILL at once (a hard reclaim, a crash clean-up)
    NEVER_STARTED = "never started"  # the process could not even be spawned


@dataclass
class Shutdown:
    """Why and how an instance was taken away (for /stats and the tests)."""

    reason: str  # "idle", "reclaim", "rollout", "crashed", "start failed", "platform stop"
    graceful: bool
    began: float
    ended: float | None = None
    outcome: Outcome | None = None

    def view(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "graceful": self.graceful,
            "outcome": None if self.outcome is None else str(self.outcome),
            "seconds": None if self.ended is None else round(self.ended - self.began, 3),
        }


class Instance:
    """State of one instance; the service's lock guards every field but `proc`'s signals."""

    def __init__(
        self, id: int, label: str, host: str, port: int, now: float, revision: Revision
    ) -> None:
        self.id = id
        self.label = label
        self.revision = revision
        self.host = host
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned = threading.Event()
        """Set once the spawn attempt is over (proc set, or it failed)."""
        self.state = State.STARTING
        self.routed = True
        self.paused = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0
        self.launched_at = now
        self.ready_at: float | None = None
        self.idle_since: float | None = None
        self.meter = Meter()
        self.shutdown: Shutdown | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def startup_s(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.launched_at

    def draining(self) -> bool:
        """Serving what it has in flight for a retired revision, with no new request."""
        return self.state is State.SERVING and self.revision.state is RevisionState.RETIRED

    def exited(self) -> bool:
        """The group leader (the gunicorn master) is gone."""
        return self.proc is not None and self.proc.poll() is not None

    def view(self, now: float) -> dict[str, Any]:
        startup = self.startup_s
        return {
            "id": self.id,
            "label": self.label,
            "revision": self.revision.name,
            "pid": self.pid,
            "port": self.port,
            "state": str(self.state),
            "routed": self.routed,
            "draining": self.draining(),
            "paused": self.paused,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "served": self.served,
            "startup_s": None if startup is None else round(startup, 3),
            "billed_s": self.meter.billed_s(now),
            "shutdown": None if self.shutdown is None else self.shutdown.view(),
        }


# ----------------------------------------------------------------------------- signals
# These run outside the service's lock: they block for up to the grace period.


def pause(proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP the group and wait until it is really stopped (a hung instance)."""
    if signal_group(proc, signal.SIGSTOP):
        wait_group_stopped(proc.pid, True)


def resume(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT the group and wait until it runs again."""
    if signal_group(proc, signal.SIGCONT):
        wait_group_stopped(proc.pid, False)


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> Outcome:
    """SIGTERM the group, wait up to grace_s for every member to exit, then SIGKILL."""
    signal_group(proc, signal.SIGTERM)
    signal_group(proc, signal.SIGCONT)  # a paused instance must run to see its SIGTERM
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader as soon as it exits (a zombie is not a member)
        if not group_pids(proc.pid):
            reap(proc)
            return Outcome.EXITED
        time.sleep(_POLL_S)
    outcome = Outcome.EXITED if not group_pids(proc.pid) else Outcome.KILLED_AFTER_GRACE
    reap(proc)
    return outcome


def kill(proc: subprocess.Popen[bytes]) -> Outcome:
    """SIGKILL the group at once (a host failure, a hard reclaim)."""
    reap(proc)
    return Outcome.KILLED


# ----------------------------------------------------------------------------- spawning


class Spawner:
    """Starts every instance process from one long-lived thread.

    The kernel's parent-death signal (which stops instances if the launcher itself
    is killed -9) is tied to the thread that spawned the child, so instances are
    spawned by this thread, which lives as long as the platform, never by a
    short-lived request or boot thread.
    """

    def __init__(self, name: str = "cloudrun-spawner") -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the spawner thread; its result, or its exception raised here."""
        future: Future[Any] = Future()
        self._jobs.put((fn, future))
        return future.result()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, who decides
                future.set_exception(exc)
