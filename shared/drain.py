"""The drain: when a slot frees, the claim instance takes overdue jobs from the
pending index itself, so a lost or held-back doorbell does not leave work idle.

Normally rate-limited per process (one listing per drain interval, markers too
young to be overdue skipped without a read; Settings documents both timings).
While doorbells are being refused (a backlog, the instance answered 429
recently) every freed slot takes due queued jobs at once, one per fresh
listing, reading its own shuffled order of the page.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import datetime

from shared import job_queue
from shared.clock import Clock
from shared.config import Settings
from shared.errors import CorruptRecord, InvalidInput, NotFound, StorageError
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.storage import PendingEntry, Store, Stored

log = get_logger(__name__)

Take = Callable[[str, Stored], Outcome]  # claim and run this job (the runner's attempt)


class DrainGate:
    """Per-process drain state: rate-limits listings (the pending list is not read after
    every job), and remembers the last refused doorbell, the sign of a backlog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None
        self._refused: float | None = None

    def note_refusal(self, now_s: float | None = None) -> None:
        """A doorbell was refused for want of a slot: Pub/Sub holds it back for a while."""
        with self._lock:
            self._refused = time.monotonic() if now_s is None else now_s

    def clear_backlog(self) -> None:
        """A drain found nothing due: the backlog is over until the next refusal."""
        with self._lock:
            self._refused = None

    def backlogged(self, window_s: float, now_s: float | None = None) -> bool:
        """True while a refusal is recent: queued jobs wait on Pub/Sub's backoff, so a
        freed slot should fetch one itself instead of idling."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            return self._refused is not None and now_s - self._refused < window_s

    def try_enter(self, interval_s: float, now_s: float | None = None) -> bool:
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            if self._last is not None and now_s - self._last < interval_s:
                return False
            self._last = now_s
            return True


GATE = DrainGate()  # this process's
BACKLOG_LISTING = 50  # markers one backlog drain lists (one page)
BACKLOG_READS = 4  # records one backlog pass may read to find a due job
_SHUFFLE = random.Random()


def overdue(job: JobRecord, now: datetime, settings: Settings, *, backlogged: bool = False) -> bool:
    """Worth taking from the pending index: claimable, and either a running job whose
    owner went silent or a queued job that has been due for settings.overdue_after_seconds
    (a fresh doorbell is probably on its way for anything younger). In a backlog
    every due queued job qualifies: its doorbell is being held back by Pub/Sub."""
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

    def __init__(self, store: Store, settings: Settings, clock: Clock, take: Take) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.take = take

    def _drain_one(self, job_id: str, backlogged: bool) -> Outcome | None:
        """Run job_id if it is overdue; None if it is not (or is the sweep's business)."""
        try:
            stored = self.store.read(job_id)
        except (NotFound, CorruptRecord, InvalidInput):
            return None  # the sweep repairs and reports these (a foreign name too)
        if not overdue(stored.record, self.clock(), self.settings, backlogged=backlogged):
            return None
        log.info(
            "draining an overdue job",
            job_id=job_id,
            traceparent=stored.record.get("traceparent"),
        )
        return self.take(job_id, stored)

    def drain(self, gate: DrainGate, *, skip: str | None = None) -> list[Outcome]:
        """Run up to drain_max_jobs overdue jobs from the pending index in this slot.

        Normally rate-limited per process, one listing for all. While doorbells are
        being refused (a backlog) every freed slot drains at once, one job per fresh
        listing (a listing is stale once a job has run), so no slot idles on
        Pub/Sub's backoff.
        """
        s = self.settings
        outcomes: list[Outcome] = []
        while len(outcomes) < s.drain_max_jobs:
            backlogged = gate.backlogged(s.backlog_window_seconds)
            if not (backlogged or gate.try_enter(s.drain_interval_seconds)):
                break
            want = 1 if backlogged else s.drain_max_jobs - len(outcomes)
            found, whole_index = self._drain_pass(backlogged, want, skip)
            outcomes += found
            if backlogged and not found and whole_index:
                gate.clear_backlog()  # the whole index holds nothing due: stop looking
            if not (found and backlogged):
                break
        return outcomes

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
            if len(outcomes) >= want or reads <= 0:
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
            if outcome is not None and outcome.kind != OutcomeKind.RACED:
                outcomes.append(outcome)
        return outcomes, whole_index


def drain(
    store: Store,
    settings: Settings,
    clock: Clock,
    take: Take,
    gate: DrainGate | None = None,
    *,
    skip: str | None = None,
) -> list[Outcome]:
    """Run up to drain_max_jobs overdue jobs from the pending index (see the module doc)."""
    return _Drain(store, settings, clock, take).drain(gate or GATE, skip=skip)


def _too_young(entry: PendingEntry, now: datetime, settings: Settings) -> bool:
    """A marker younger than settings.overdue_after_seconds cannot be overdue (its record
    was written after it), so the drain skips it without paying for a read."""
    if entry.created is None:
        return False
    return (now - entry.created).total_seconds() < settings.overdue_after_seconds
