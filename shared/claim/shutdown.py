"""What a claim instance does between SIGTERM and SIGKILL: it hands its jobs back.

Cloud Run ends an instance the same way whatever the cause (scale-in, a revision
rollout, host maintenance): SIGTERM, then SIGKILL 10 s later
(https://cloud.google.com/run/docs/container-contract#instance-shutdown). A job
still running at the SIGKILL waits out the stale time before another instance may
take it. So from the SIGTERM on (shared.claim.runner does each step):

- at its next stage boundary, or when its stage calls check(), a job is handed
  back (job_queue.handback_fields: queued and due now, the attempt not spent, the
  checkpoint kept), its doorbell rung, and its push answered;
- HAND_BACK_WAIT_S after the SIGTERM, the jobs whose stage reached neither (a long
  call that never checks) are handed back from here. Python cannot stop a thread,
  so such a stage runs on until the SIGKILL, but its owner's writes are refused
  from then on: it commits nothing;
- a delivery that arrives meanwhile rings its doorbell again and is acked, and the
  drain takes nothing new.

A SIGKILL without SIGTERM (a host failure), or hand-back writes that fail, leave
the job to the staleness rescue (sweep, drain, status reads), as before.

How the SIGTERM is noticed. functions-framework 3.10's CLI imports the function in
gunicorn's master process, before the arbiter forks the worker that serves the
requests; the worker's init_signals() then resets every handler and installs its
own (gunicorn/workers/base.py: SIGTERM -> handle_exit, which stops accepting and
lets in-flight requests finish within graceful_timeout). A handler installed at
import is therefore lost, and only a process's main thread may install one, while
the worker's main thread runs gunicorn's loop and never our code. So reclaim keeps
gunicorn's handler as it is and watches its effect: the first request starts a
thread that finds the worker through signal.getsignal(SIGTERM) (gunicorn's bound
handler) and begins the shutdown once the worker's `alive` flag drops. Outside
gunicorn (functions-framework --debug, a test calling the library) nothing
watches; call Shutdown.begin() yourself.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from shared.logs import get_logger

log = get_logger(__name__)

CLOUD_RUN_GRACE_S = 10.0
"""SIGTERM to SIGKILL on Cloud Run (the container contract above)."""
HAND_BACK_WAIT_S = CLOUD_RUN_GRACE_S / 2
"""Stages get the first half of the grace to reach a boundary or check(); the jobs still
running then are handed back from outside, which leaves the other half for those writes."""
WATCH_S = 0.05
"""How often the watcher looks at gunicorn's worker (the hand-back starts this much late
at worst)."""

HandBack = Callable[[], None]


class Shutdown:
    """A process's shutdown: whether it began, and the jobs to hand back when it does."""

    def __init__(self, hand_back_wait_s: float = HAND_BACK_WAIT_S) -> None:
        self.hand_back_wait_s = hand_back_wait_s
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._jobs: dict[int, HandBack] = {}
        self._ids = itertools.count()
        self._watching_pid: int | None = None
        self.began_at: float | None = None
        """time.monotonic() of begin(), for the logs and the tests."""
        self.forced = 0
        """Jobs to hand back from outside (their stage reached neither a boundary nor
        check() in time)."""

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`, cut short when the shutdown begins; True if it began (a
        doorbell waiting for its job's backoff then passes the delivery on:
        shared.claim.due_wait)."""
        return self._event.wait(max(seconds, 0.0))

    def begin(self, why: str = "SIGTERM") -> bool:
        """Start the shutdown (once); False if it had begun already."""
        with self._lock:
            if self._event.is_set():
                return False
            self._event.set()
            self.began_at = time.monotonic()
            running = len(self._jobs)
        log.warning("shutting down: running jobs are handed back", why=why, running=running)
        threading.Thread(target=self._force_later, name="reclaim-hand-back", daemon=True).start()
        return True

    @contextlib.contextmanager
    def running(self, hand_back: HandBack) -> Iterator[None]:
        """Register a running job for the whole block: `hand_back` is called from outside
        if the job is still running HAND_BACK_WAIT_S after the shutdown began."""
        with self._lock:
            key = next(self._ids)
            self._jobs[key] = hand_back
        try:
            yield
        finally:
            with self._lock:
                self._jobs.pop(key, None)

    def watch_gunicorn(self) -> bool:
        """Start, once per process, the thread that begins the shutdown when gunicorn's
        worker stops (see the module doc). False outside a gunicorn worker."""
        with self._lock:
            if self._watching_pid == os.getpid():
                return True
            worker = _gunicorn_worker()
            if worker is None:
                return False
            self._watching_pid = os.getpid()
        threading.Thread(
            target=self._watch, args=(worker,), name="reclaim-sigterm-watch", daemon=True
        ).start()
        return True

    # --- internals

    def _watch(self, worker: Any) -> None:
        while getattr(worker, "alive", False):
            if self._event.wait(WATCH_S):
                return  # begun by someone else
        self.begin("SIGTERM (gunicorn's worker is stopping)")

    def _force_later(self) -> None:
        time.sleep(self.hand_back_wait_s)
        with self._lock:
            left = list(self._jobs.values())
            self.forced += len(left)
        if not left:
            return
        log.warning("handing back jobs whose stage did not stop in time", jobs=len(left))
        for fn in left:  # in parallel: the grace is short, each hand-back is a write and a ring
            threading.Thread(target=_quietly, args=(fn,), daemon=True).start()


def _quietly(hand_back: HandBack) -> None:
    try:
        hand_back()
    except Exception:  # a failed hand-back leaves the job to the staleness rescue
        log.exception("hand-back failed; the staleness rescue will take the job")


def _gunicorn_worker() -> Any | None:
    """The gunicorn worker serving this process, found through its SIGTERM handler."""
    worker = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if worker is None or not type(worker).__module__.startswith("gunicorn."):
        return None
    return worker if hasattr(worker, "alive") else None


SHUTDOWN = Shutdown()
"""This process's."""
