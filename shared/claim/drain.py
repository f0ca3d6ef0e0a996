"""The drain: when a slot frees, the claim instance takes due jobs from the pending
index itself, so work whose doorbell is lost or held back does not wait while a
slot idles.

Outside a backlog it is a safety net, rate-limited per process (one listing per
drain interval, markers too young to be overdue skipped without a read; Settings
documents both timings).

In a backlog, doorbells wait: Cloud Run holds pushes in its pending queue at
max instances and then refuses them with 429
(https://cloud.google.com/run/docs/about-instance-autoscaling), after which
Pub/Sub backs off per message, 10 to 600 s with terraform's retry policy
(https://cloud.google.com/pubsub/docs/handling-failures). The instance never
sees those refusals: the platform answers them. What it does see is the pushes
that do arrive, and each one says how long its doorbell waited: its publishTime,
and deliveryAttempt, which Pub/Sub sets because the subscription has a
dead-letter policy (https://cloud.google.com/pubsub/docs/dead-letter-topics).
A push whose doorbell waited longer than BACKLOG_WAIT_S, or was delivered before,
marks the process backlogged (backlog_sign); while it is, every freed slot keeps
taking due queued jobs, one per fresh listing, reading its own shuffled order of
the page, until the index holds nothing due, the push's time budget
(shared.claim.budget) has no room for another job, or the instance is shutting down.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared import job_queue
from shared.claim.budget import PushBudget, unlimited
from shared.claim.shutdown import Shutdown
from shared.clock import Clock
from shared.config import Settings
from shared.errors import CorruptRecord, InvalidInput, NotFound, StorageError
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.storage import PendingEntry, Store, Stored

log = get_logger(__name__)

Take = Callable[[str, Stored], Outcome]  # claim and run this job (the runner's attempt)

BACKLOG_WAIT_S = 5.0
"""A doorbell that reached the instance later than this after it was published waited
for a slot: in Pub/Sub (a push window narrowed by refusals, a retry backoff) or in
Cloud Run's pending queue (up to 10 s before the 429). Half that queue's limit: above
any start-up the local cloud sees, so a cold start alone rarely counts."""
BACKLOG_LISTING = 50  # markers one backlog drain lists (one page)
BACKLOG_READS = 4  # records one backlog pass may read to find a due job
_SHUFFLE = random.Random()


@dataclass(frozen=True)
class Arrival:
    """What a push says about its doorbell: how often Pub/Sub delivered it (with a
    dead-letter policy) and when it was published."""

    delivery_attempt: int | None = None
    published_at: datetime | None = None

    def waited_s(self, now: datetime) -> float | None:
        if self.published_at is None:
            return None
        return (now - self.published_at).total_seconds()


def backlog_sign(arrival: Arrival, now: datetime, wait_s: float = BACKLOG_WAIT_S) -> str | None:
    """Why this push shows that doorbells are being held back, or None."""
    attempt = arrival.delivery_attempt
    if attempt is not None and attempt > 1:
        return f"delivery attempt {attempt}"
    waited = arrival.waited_s(now)
    if waited is not None and waited > wait_s:
        return f"the doorbell waited {waited:.1f} s"
    return None


class DrainGate:
    """Per-process drain state: rate-limits listings (the pending list is not read after
    every job) and remembers the last sign of a backlog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None
        self._backlog: float | None = None

    def note_backlog(self, now_s: float | None = None) -> None:
        """A push showed that doorbells are being held back (backlog_sign)."""
        with self._lock:
            self._backlog = time.monotonic() if now_s is None else now_s

    def clear_backlog(self) -> None:
        """A drain found nothing due: the backlog is over until the next sign."""
        with self._lock:
            self._backlog = None

    def backlogged(self, window_s: float, now_s: float | None = None) -> bool:
        """True while a sign is recent: due jobs wait on held-back doorbells, so a freed
        slot fetches them itself instead of idling."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            return self._backlog is not None and now_s - self._backlog < window_s

    def try_enter(self, interval_s: float, now_s: float | None = None) -> bool:
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            if self._last is not None and now_s - self._last < interval_s:
                return False
            self._last = now_s
            return True


GATE = DrainGate()  # this process's


def overdue(job: JobRecord, now: datetime, settings: Settings, *, backlogged: bool = False) -> bool:
    """Worth taking from the pending index: claimable, and either a running job whose
    owner went silent or a queued job that has been due for settings.overdue_after_seconds
    (a fresh doorbell is probably on its way for anything younger). In a backlog
    every due queued job qualifies: its doorbell is being held back."""
    max_attempts = job_queue.max_attempts_of(job, settings.max_attempts)
    skew = settings.clock_skew_seconds
    if not job_queue.claimable(job, now, settings.stale_seconds, max_attempts, skew_s=skew):
        return False
    if job.get("status") == JobStatus.RUNNING or backlogged:
        return True
    grace = settings.overdue_after_seconds
    return job_queue.stale_action(job, now, grace, max_attempts, skew_s=skew) == "requeue"


class _Drain:
    """One drain, run in the slot of the request that just finished its own job."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        clock: Clock,
        take: Take,
        budget: PushBudget,
        shutdown: Shutdown | None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.take = take
        self.budget = budget
        self.shutdown = shutdown

    def may_take(self) -> bool:
        """Another job fits: the instance is not shutting down and the push has time."""
        if self.shutdown is not None and self.shutdown.requested:
            return False
        return self.budget.allows(self.settings.drain_job_seconds)

    def drain(self, gate: DrainGate, *, skip: str | None = None) -> list[Outcome]:
        """Due jobs from the pending index, run in this slot (see the module doc).

        Outside a backlog: up to drain_max_jobs overdue ones, one listing for all,
        rate-limited per process. In a backlog: one job per fresh listing (a listing
        is stale once a job has run) for as long as one is found and may_take().
        drain_max_jobs 0 turns the drain off.
        """
        s = self.settings
        outcomes: list[Outcome] = []
        if s.drain_max_jobs <= 0:
            return outcomes
        while self.may_take():
            if gate.backlogged(s.backlog_window_seconds):
                found, whole_index = self._drain_pass(True, 1, skip)
                outcomes += found
                if found:
                    continue
                if whole_index:
                    gate.clear_backlog()  # the whole index holds nothing due: stop looking
                break
            if outcomes or not gate.try_enter(s.drain_interval_seconds):
                break
            found, _ = self._drain_pass(False, s.drain_max_jobs, skip)
            outcomes += found
            break
        return outcomes

    def _drain_one(self, job_id: str, backlogged: bool) -> Outcome | None:
        """Run job_id if it is overdue; None if it is not (or is the sweep's business)."""
        try:
            stored = self.store.read(job_id)
        except (NotFound, CorruptRecord, InvalidInput):
            return None  # the sweep repairs and reports these (a foreign name too)
        if not overdue(stored.record, self.clock(), self.settings, backlogged=backlogged):
            return None
        log.info(
            "draining a due job",
            job_id=job_id,
            backlog=backlogged,
            traceparent=stored.record.get("traceparent"),
        )
        return self.take(job_id, stored)

    def _drain_pass(
        self, backlogged: bool, want: int, skip: str | None
    ) -> tuple[list[Outcome], bool]:
        """One listing; up to `want` overdue jobs from it, with bounded reads. Also
        says whether the listing was the whole pending index."""
        s = self.settings
        try:
            limit = BACKLOG_LISTING if backlogged else s.drain_max_jobs * 5
            entries = self.store.list_pending(limit=limit)
        except StorageError as exc:  # the drain is a bonus; the sweep covers the rest
            log.warning("drain could not list pending jobs", error=str(exc))
            return [], False
        whole_index = len(entries) < limit
        reads = len(entries)
        if backlogged:
            # every freed slot lists the same first page: reading it in its own random
            # order keeps slots from racing for the same job, and reads stay bounded;
            # a small index is read whole, so "nothing due" is known, not guessed
            _SHUFFLE.shuffle(entries)
            reads = len(entries) if whole_index else BACKLOG_READS
        outcomes: list[Outcome] = []
        now = self.clock()
        for entry in entries:
            if len(outcomes) >= want or reads <= 0 or not self.may_take():
                break
            if entry.job_id == skip or (not backlogged and _too_young(entry, now, s)):
                continue
            reads -= 1
            try:
                outcome = self._drain_one(entry.job_id, backlogged)
            except Exception:  # the request's own job is already settled and its outcome
                # must reach Pub/Sub; whatever stopped this bonus job, the record decides
                # and the sweep recovers it
                log.exception("drain stopped on an error", job_id=entry.job_id)
                break
            # a job a gate held back (flow control: paused, waiting, deferred) is not taken:
            # counting it would keep a backlogged drain listing the same held jobs
            # (and so is one this revision lacks the code of: rollout skew)
            if outcome is not None and outcome.kind not in _NOT_TAKEN:
                outcomes.append(outcome)
        return outcomes, whole_index


_NOT_TAKEN = (OutcomeKind.RACED, OutcomeKind.SKIPPED, OutcomeKind.DEFERRED)


def drain(
    store: Store,
    settings: Settings,
    clock: Clock,
    take: Take,
    gate: DrainGate | None = None,
    *,
    skip: str | None = None,
    budget: PushBudget | None = None,
    shutdown: Shutdown | None = None,
) -> list[Outcome]:
    """Run due jobs from the pending index in this slot (see the module doc). `budget` is
    the push's time budget (none: unlimited); nothing new starts once `shutdown` began."""
    run = _Drain(store, settings, clock, take, budget or unlimited(), shutdown)
    return run.drain(gate or GATE, skip=skip)


def _too_young(entry: PendingEntry, now: datetime, settings: Settings) -> bool:
    """A marker younger than settings.overdue_after_seconds cannot be overdue (its record
    was written after it), so the drain skips it without paying for a read."""
    if entry.created is None:
        return False
    return (now - entry.created).total_seconds() < settings.overdue_after_seconds
