"""What a claim instance does between SIGTERM and SIGKILL: it hands its jobs back.

Cloud Run ends an instance the same way whatever the cause (scale-in, a revision
rollout, host maintenance): SIGTERM, then SIGKILL 10 s later
(https://cloud.google.com/run/docs/container-contract#instance-shutdown). A job
still running at the SIGKILL waits out the stale time before another instance may
take it. So from the SIGTERM on (shared.claim.runner does each step):

- a running stage whose expected remaining time (from the stage's recorded durations,
  shared.claim.stage_times) fits well inside the grace (FINISH_FITS_S) finishes: its
  check() does not stop it, and its job is handed back at the boundary that follows,
  the stage's checkpoint in the hand-back's write (or ends done, if it was the last).
  Stopping it threw away work the grace had time to keep: in bench/handback.py the
  reclaimed instance's four jobs each lost 3 s of a 6 s stage;
- any other job is handed back at its next stage boundary, or when its stage calls
  check() (job_queue.handback_fields: queued and due now, the attempt not spent, the
  checkpoint kept), its doorbell rung, and its push answered;
- HAND_BACK_WAIT_S after the SIGTERM (FINISH_BY_S for a stage let finish), the jobs
  whose stage reached neither (a long call that never checks, a stage slower than its
  record) are handed back from here. Python cannot stop a thread, so such a stage runs
  on until the SIGKILL, but its owner's writes are refused from then on: it commits
  nothing;
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
"""SIGTERM to SIGKILL on Cloud Run (the container contract above); another platform's
(the local cloud's) comes from RECLAIM_SHUTDOWN_GRACE_SECONDS (Shutdown.use_grace)."""
HAND_BACK_SHARE = 0.5
"""Stages get the first half of the grace to reach a boundary or check(); the jobs still
running then are handed back from outside, which leaves the other half for those writes."""
FINISH_FITS_SHARE = 0.5
"""A stage expected to end within this share of the grace after the SIGTERM finishes
before its job is handed back: half, with the expectation the longest of the stage's
recent runs, so it fits with room."""
FINISH_BY_SHARE = 0.7
"""A stage let finish that has not by then (slower than its record) is handed back from
outside: 3 s of Cloud Run's grace stay for the hand-back's writes (a CAS write, a marker
patch, the due hint, a publish: well under a second each)."""


def shares(grace_s: float) -> tuple[float, float, float]:
    """(the hand-back wait, what may finish, when a stage let finish goes back) of a grace."""
    return grace_s * HAND_BACK_SHARE, grace_s * FINISH_FITS_SHARE, grace_s * FINISH_BY_SHARE


HAND_BACK_WAIT_S, FINISH_FITS_S, FINISH_BY_S = shares(CLOUD_RUN_GRACE_S)
WATCH_S = 0.05
"""How often the watcher looks at gunicorn's worker (the hand-back starts this much late
at worst)."""

HandBack = Callable[[], None]
Remaining = Callable[[], float | None]
"""A running job's expected seconds until its stage ends (None: no stage, or no record)."""


def _unknown() -> float | None:
    return None


class Running:
    """A job registered with the shutdown: how to hand it back from outside, how long its
    stage has left, and (once the shutdown began) whether its stage may finish."""

    def __init__(self, hand_back: HandBack, remaining: Remaining) -> None:
        self.hand_back = hand_back
        self.remaining = remaining
        self.finishing = False
        """Its stage finishes before the job is handed back (decided at begin())."""
        self.deadline_s = 0.0
        """Seconds after begin() at which it is handed back from outside if still running."""


class Shutdown:
    """A process's shutdown: whether it began, and the jobs to hand back when it does."""

    def __init__(
        self,
        hand_back_wait_s: float = HAND_BACK_WAIT_S,
        *,
        finish_fits_s: float = FINISH_FITS_S,
        finish_by_s: float = FINISH_BY_S,
    ) -> None:
        self.grace_s = CLOUD_RUN_GRACE_S
        """SIGTERM to SIGKILL (use_grace sets another platform's)."""
        self.hand_back_wait_s = hand_back_wait_s
        self.finish_fits_s = finish_fits_s
        self.finish_by_s = max(finish_by_s, hand_back_wait_s)
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._jobs: dict[int, Running] = {}
        self._ids = itertools.count()
        self._watching_pid: int | None = None
        self.began_at: float | None = None
        """time.monotonic() of begin(), for the logs and the tests."""
        self.forced = 0
        """Jobs to hand back from outside (their stage reached neither a boundary nor
        check() in time)."""

    def use_grace(self, grace_s: float) -> None:
        """The platform's grace (RECLAIM_SHUTDOWN_GRACE_SECONDS): the hand-back wait and
        what may finish are its shares. A shorter grace than Cloud Run's (the local cloud's
        2 s in tests) must not let a stage finish past the SIGKILL."""
        with self._lock:
            if grace_s == self.grace_s:
                return
            self.grace_s = grace_s
            self.hand_back_wait_s, self.finish_fits_s, self.finish_by_s = shares(grace_s)

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
            finishing = sum(self._decide(job) for job in self._jobs.values())
            self._event.set()  # after the decisions: a stage let finish never sees a stop
            self.began_at = time.monotonic()
            running = len(self._jobs)
        log.warning(
            "shutting down: running jobs are handed back",
            why=why,
            running=running,
            finishing=finishing,
        )
        threading.Thread(target=self._force_later, name="reclaim-hand-back", daemon=True).start()
        return True

    def _decide(self, job: Running) -> bool:
        """Let the job's stage finish when its expected remaining time fits (lock held)."""
        try:
            left = job.remaining()
        except Exception:  # an estimate is a bonus: without one the job goes back at once
            log.exception("could not tell how long a stage has left")
            left = None
        job.finishing = left is not None and 0 <= left <= self.finish_fits_s
        job.deadline_s = self.finish_by_s if job.finishing else self.hand_back_wait_s
        return job.finishing

    @contextlib.contextmanager
    def running(self, hand_back: HandBack, remaining: Remaining = _unknown) -> Iterator[Running]:
        """Register a running job for the whole block: when the shutdown begins, its stage
        finishes if `remaining` fits (the block's Running says so: `finishing`), and
        `hand_back` is called from outside if the job is still running HAND_BACK_WAIT_S
        (FINISH_BY_S when finishing) after the shutdown began."""
        job = Running(hand_back, remaining)
        job.deadline_s = self.hand_back_wait_s  # registered late: handed back with the rest
        with self._lock:
            key = next(self._ids)
            self._jobs[key] = job
        try:
            yield job
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
        """At each deadline, hand back from outside the jobs still running with it."""
        with self._lock:
            own = {j.deadline_s for j in self._jobs.values()}
            deadlines = sorted({self.hand_back_wait_s, *own})
        began = self.began_at or time.monotonic()
        for deadline in deadlines:
            time.sleep(max(0.0, began + deadline - time.monotonic()))
            with self._lock:
                left = [j for j in self._jobs.values() if j.deadline_s == deadline]
                self.forced += len(left)
            if not left:
                continue
            log.warning("handing back jobs whose stage did not stop in time", jobs=len(left))
            for job in left:  # in parallel: the grace is short, each is a write and a ring
                threading.Thread(target=_quietly, args=(job.hand_back,), daemon=True).start()


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
