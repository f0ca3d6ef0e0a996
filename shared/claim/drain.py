"""The drain: when a slot frees, the claim instance takes due jobs from the pending
index itself, so work whose doorbell is pending, backing off or lost does not wait
while a slot idles.

Jobs marked due. A job sent back to the queue due (a hand-back on SIGTERM, the
watchdog's requeue) gets its pending marker marked (mark_due: custom metadata, one
patch), because its doorbell cannot be counted on: with every slot busy, Cloud Run
holds the push up to 10 s in its pending queue and then refuses it with 429
(https://cloud.google.com/run/docs/about-instance-autoscaling); Pub/Sub then backs
the message off, 10 to 600 s with terraform's retry policy
(https://cloud.google.com/pubsub/docs/handling-failures), "on a best effort basis"
(https://cloud.google.com/python/docs/reference/pubsub/1.5.0/google.cloud.pubsub_v1.types.RetryPolicy),
and narrows the push window on failures (https://cloud.google.com/pubsub/docs/push),
so even a re-ring may sit in Pub/Sub; a connection a dying instance drops is such a
failure too. Every
freed slot lists the pending index (one list call; the listing carries the marks)
and takes the oldest job marked due, reading only marked markers, then lists again
after each job it ran. So a freed slot takes a handed-back job within a listing and
a read, wherever its doorbell is.

Overdue by age (the safety net for doorbells lost without a mark, e.g. a submit's):
rate-limited per process (one listing per drain interval reads markers old enough;
those too young to be overdue are skipped without a read; Settings documents both),
and not while pushes show doorbells held back: then every queued job is old only
because it waits its turn.

In a backlog, doorbells wait: what the instance sees of it is the pushes that do
arrive, and each one says how long its doorbell waited: its publishTime, and
deliveryAttempt, which Pub/Sub sets because the subscription has a dead-letter
policy (https://cloud.google.com/pubsub/docs/dead-letter-topics). A push whose
doorbell waited longer than BACKLOG_WAIT_S, or was delivered before, marks the
process backlogged (backlog_sign). A wait alone does not say the doorbells are held
back: a backlog Pub/Sub delivers as fast as slots free shows it too, and there the
next push fills a freed slot at once. So while backlogged, and while freed slots wait
for pushes (PUSH_GAP_S, shared.claim.slots.Slots.push_gap), every freed slot keeps
taking due queued jobs, one per fresh listing from a random point of the index
(listing_window: the markers' hash segment spreads them), reading its own shuffled
order of the page, until the index holds nothing due, the push's time budget
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
from shared.hints.due_hint import HINT_READ_S, DueHint
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.shards import NAME_HASH_CHARS
from shared.storage import PENDING_PREFIX, PendingEntry, Store, Stored, pending_listing

log = get_logger(__name__)

Take = Callable[[str, Stored], Outcome]  # claim and run this job (the runner's attempt)

PUSH_GAP_S = 2.0
"""A freed slot that waits this long for a push shows that pushes are not keeping up
(refused and backed off, or lost): only then does a backlog's drain take jobs from the
index. A backlog Pub/Sub delivers fills a freed slot within milliseconds; the drain
then only doubled each job it took, whose doorbell still came, to be read and acked
(bench/big_backlog.py, 2,000 jobs on 8x4 slots: 13.3 Cloud Storage calls and 1.08
pushes a job with it, 9.9 and 1.00 with the drain off, and 24.8 jobs/s against 19.0)."""

BACKLOG_WAIT_S = 20.0
"""A doorbell that reached the instance later than this after it was published waited
for a slot in Pub/Sub (a push window narrowed by refusals). A cold start alone must not
count: `python -m bench.coldstart` measured publish-to-claim on an instance started from
zero at 1.9-9.3 s (median 5.1 s, 7 rounds, local cloud on a shared 2-core machine), and
Cloud Run may hold a push in its pending queue up to 10 s on top
(https://cloud.google.com/run/docs/about-instance-autoscaling). 20 s is above both
together; a doorbell the platform refused (429) comes back with deliveryAttempt > 1,
which is a sign whatever its wait."""
BACKLOG_LISTING = 200
"""Markers one drain lists (one list call, whatever the size up to 1,000). When every
freed slot listed the same first names, the jobs running were among them: with a page
of 50, 32 slots (8x4) kept most of it running, and a freed slot read 2 to 4 records per
job it found (bench big_backlog). 200 keeps the running a small part of any page."""
BACKLOG_WHOLE = 50
"""An index smaller than this is read whole in a backlog, so "nothing due" is known, not
guessed (a larger one is sampled: BACKLOG_READS)."""
BACKLOG_READS = 4  # records one backlog pass may read to find a due job
TAKEN_REMEMBERED = 1000  # marks a process remembers it found taken (shared.claim.drain.DrainGate)
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

    def __init__(self, hint_read_s: float = HINT_READ_S) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None
        self._backlog: float | None = None
        self._taken: dict[str, datetime] = {}
        self.index_fits = True
        """The last listing was the pool's whole index (so is a first one, until a full
        page says otherwise): list it from the first marker, one call, rather than from
        a random point (listing_window: two when it wraps round)."""
        self.due_hint = DueHint(hint_read_s)
        """The pool's due hint as this process last read it (shared.hints.due_hint)."""
        self._marked_left = False

    def note_marked(self, left: bool = True) -> None:
        """This process knows of jobs marked due that no listing of it has taken yet: its
        last listing left some (or it marked one itself), so the next freed slot lists."""
        with self._lock:
            self._marked_left = left

    def marked_left(self) -> bool:
        with self._lock:
            return self._marked_left

    def note_taken(self, job_id: str, due: datetime) -> None:
        """A job marked due at `due` was found taken (running or finished): this
        process's listings skip that mark without a read (a new mark is a new due)."""
        with self._lock:
            self._taken.pop(job_id, None)
            self._taken[job_id] = due
            while len(self._taken) > TAKEN_REMEMBERED:
                del self._taken[next(iter(self._taken))]

    def taken(self, job_id: str, due: datetime) -> bool:
        with self._lock:
            return self._taken.get(job_id) == due

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
    stale = settings.stale_seconds_of(job)
    if not job_queue.claimable(job, now, stale, max_attempts, skew_s=skew):
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
        push_gap: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.take = take
        self.budget = budget
        self.shutdown = shutdown
        self.push_gap = push_gap

    def pushes_scarce(self, at_least_s: float = PUSH_GAP_S) -> bool:
        """Pushes leave freed slots free (at least PUSH_GAP_S); unknown (no slots given):
        yes."""
        return self.push_gap is None or self.push_gap() >= max(PUSH_GAP_S, at_least_s)

    def may_take(self) -> bool:
        """Another job fits: the instance is not shutting down and the push has time."""
        if self.shutdown is not None and self.shutdown.requested:
            return False
        return self.budget.allows(self.settings.drain_job_seconds)

    def drain(self, gate: DrainGate, *, skip: str | None = None) -> list[Outcome]:
        """Due jobs from the pending index, run in this slot (see the module doc).

        Lists only on a hint: a job marked due (this process's last listing left one, or
        the pool's due hint moved: shared.hints.due_hint), a backlog sign while freed
        slots wait for pushes, or, while they wait, the safety net's interval. Then one
        job per fresh listing (a listing is stale once a job has run), for as long as one
        is found and may_take(), up to drain_max_jobs outside a backlog. A listing reads
        the markers marked due, oldest due first; it also reads markers overdue by age in
        a backlog or on the safety net's turn. drain_max_jobs 0 turns the drain off.
        """
        s = self.settings
        outcomes: list[Outcome] = []
        if s.drain_max_jobs <= 0:
            return outcomes
        entered = False  # this drain passed the safety net's rate limit once: it keeps it
        while self.may_take():
            # a backlog Pub/Sub is still delivering fills every freed slot with a push:
            # taking its jobs from the index here only doubles them (each one's doorbell
            # still comes, to be answered with a read)
            signs = gate.backlogged(s.backlog_window_seconds)
            scarce = self.pushes_scarce()
            backlogged = signs and scarce
            if not backlogged and len(outcomes) >= s.drain_max_jobs:
                break
            # the safety net takes a queued job as lost when it is overdue by age, and only
            # while a freed slot has waited for pushes that long (a slot pushes refill, or
            # one free since the end of a batch, needs no lost doorbell: the sweep rings
            # it); while doorbells are held back (signs), age says only that a job waits
            # its turn: taking those doubled them too, every process the oldest first
            # (bench/big_backlog.py: at 4,000 jobs, 1,197 drained while pushes kept up,
            # 902 claim races lost)
            idle = self.pushes_scarce(s.overdue_after_seconds)
            entered = entered or (not signs and idle and gate.try_enter(s.drain_interval_seconds))
            aged = backlogged or entered
            if not aged and not self._marked_hint(gate):
                break  # nothing says a job waits that no push will bring: no listing
            log.debug("drain lists the pending index", backlog=backlogged, safety_net=entered)
            found, whole_index = self._drain_pass(gate, backlogged, aged, skip)
            outcomes += found
            if found:
                continue
            if backlogged and whole_index:
                gate.clear_backlog()  # the whole index holds nothing due: stop looking
            break
        return outcomes

    def _marked_hint(self, gate: DrainGate) -> bool:
        """A job may be marked due: this process knows of one, or the pool's due hint
        moved since its last listing (a read at most once a second per process)."""
        return gate.marked_left() or gate.due_hint.moved(self.store, self.settings.pool)

    def _listing(self, gate: DrainGate, backlogged: bool) -> tuple[list[PendingEntry], bool]:
        """A page of this pool's markers, and whether it was the whole index. In a backlog,
        from a random point (listing_window) unless the last listing showed the index
        fits one page: from the first marker, every freed slot listed the same page and
        raced for its jobs. Outside one, from the first marker: one call (a window wraps
        round with a second call whenever its start is within a page of the end)."""
        pool = self.settings.pool
        if gate.index_fits or not backlogged:
            entries = self.store.list_pending(limit=BACKLOG_LISTING, pool=pool)
            whole = len(entries) < BACKLOG_LISTING
        else:
            entries, whole = listing_window(self.store, pool, random_start(pool))
        gate.index_fits = whole  # the next listings take it whole, in one call
        return entries, whole

    def _drain_one(
        self, gate: DrainGate, entry: PendingEntry, backlogged: bool, marked: bool
    ) -> Outcome | None:
        """Run the entry's job if it is overdue; None if it is not (or is the sweep's
        business). A job marked due is taken as in a backlog: its doorbell may be stuck;
        one found taken already is remembered (DrainGate.note_taken)."""
        job_id = entry.job_id
        try:
            stored = self.store.read(job_id)
        except (NotFound, CorruptRecord, InvalidInput):
            return None  # the sweep repairs and reports these (a foreign name too)
        now = self.clock()
        if not overdue(stored.record, now, self.settings, backlogged=backlogged or marked):
            if marked and entry.due is not None and stored.record.get("status") != JobStatus.QUEUED:
                gate.note_taken(job_id, entry.due)
            return None
        log.info(
            "draining a due job",
            job_id=job_id,
            backlog=backlogged,
            marked_due=marked,
            traceparent=stored.record.get("traceparent"),
        )
        return self.take(job_id, stored)

    def _drain_pass(
        self, gate: DrainGate, backlogged: bool, aged: bool, skip: str | None
    ) -> tuple[list[Outcome], bool]:
        """One listing; the first due job from it, with bounded reads. Also says whether
        the listing was the whole pending index."""
        s = self.settings
        try:
            # this pool's markers only: another pool's jobs are its own claim's to drain
            entries, whole = self._listing(gate, backlogged)
        except StorageError as exc:  # the drain is a bonus; the sweep covers the rest
            log.warning("drain could not list pending jobs", error=str(exc))
            return [], False
        gate.due_hint.listed()  # the marks announced before the last read are in it
        whole_index = whole and len(entries) < BACKLOG_WHOLE  # in a backlog, read whole
        now = self.clock()
        fresh = [e for e in entries if e.due is None or not gate.taken(e.job_id, e.due)]
        order = candidates(fresh, now, s, backlogged=backlogged, aged=aged, skip=skip)
        by_id = {e.job_id: e for e in fresh}
        # set before a job is taken (this slot runs it to its end): the next freed slot
        # lists again while this listing showed more marks than the one this slot takes
        gate.note_marked(sum(m for _j, m in order) > 1)
        for job_id, marked in order:
            if not self.may_take():
                break
            try:
                outcome = self._drain_one(gate, by_id[job_id], backlogged, marked)
            except Exception:  # the request's own job is already settled and its outcome
                # must reach Pub/Sub; whatever stopped this bonus job, the record decides
                # and the sweep recovers it
                log.exception("drain stopped on an error", job_id=job_id)
                break
            # a job a gate held back (flow control: paused, waiting, deferred) is not taken:
            # counting it would keep a backlogged drain listing the same held jobs
            # (and so is one this revision lacks the code of: rollout skew, or one of
            # another pool's pipeline: sent on to its pool)
            if outcome is not None and outcome.kind not in _NOT_TAKEN:
                return [outcome], whole_index
        return [], whole_index


_NOT_TAKEN = (OutcomeKind.RACED, OutcomeKind.SKIPPED, OutcomeKind.DEFERRED, OutcomeKind.REROUTED)


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
    push_gap: Callable[[], float] | None = None,
) -> list[Outcome]:
    """Run due jobs from the pending index in this slot (see the module doc). `budget` is
    the push's time budget (none: unlimited); nothing new starts once `shutdown` began;
    `push_gap` says how long pushes leave the process's freed slots free (Slots.push_gap;
    none: as if they did)."""
    run = _Drain(store, settings, clock, take, budget or unlimited(), shutdown, push_gap)
    return run.drain(gate or GATE, skip=skip)


def candidates(
    entries: list[PendingEntry],
    now: datetime,
    settings: Settings,
    *,
    backlogged: bool,
    aged: bool,
    skip: str | None = None,
) -> list[tuple[str, bool]]:
    """Which markers of one listing a freed slot reads, in order: (job id, marked due).

    First the markers marked due by now (a hand-back, a rescue, a re-ring: their
    doorbell may be pending, backing off or lost), oldest due first, all of them: a
    freed slot takes the oldest due job. Then, when `aged` (a backlog, or the
    process's safety-net interval), a few others: in a backlog any marker, read in
    this slot's own random order (freed slots list the same page; a small index is
    read whole, so "nothing due" is known, not guessed); otherwise markers old enough
    to be overdue (_too_young), oldest first.
    """
    marked = sorted(
        (e for e in entries if e.due is not None and e.due <= now and e.job_id != skip),
        key=lambda e: (e.due, e.created or e.due),
    )
    out = [(e.job_id, True) for e in marked]
    if not aged:
        return out
    seen = {e.job_id for e in marked}
    rest = [e for e in entries if e.job_id not in seen and e.job_id != skip]
    if backlogged:
        _SHUFFLE.shuffle(rest)
        reads = len(rest) if len(entries) < BACKLOG_WHOLE else BACKLOG_READS
    else:
        rest = sorted(
            (e for e in rest if not _too_young(e, now, settings)),
            key=lambda e: e.created or now,
        )
        reads = settings.drain_max_jobs * 5
    return out + [(e.job_id, False) for e in rest[:reads]]


def random_start(pool: str | None) -> str:
    """A random point of a pool's markers (PendingEntry.key): a hash segment drawn at
    random (shared.shards.name_hash), inside the pool's folder."""
    folder = pending_listing(pool)[0].removeprefix(PENDING_PREFIX)
    return folder + f"{_SHUFFLE.randrange(16**NAME_HASH_CHARS):0{NAME_HASH_CHARS}x}"


def listing_window(
    store: Store, pool: str | None, start: str, limit: int = BACKLOG_LISTING
) -> tuple[list[PendingEntry], bool]:
    """Up to `limit` of a pool's markers from `start`, wrapping round to the first ones
    when the end comes first, and whether that was every marker. A backlog's freed slots
    each list from their own random point: from the first name, all 32 (8x4) would list
    the same page, race for its jobs and read its running ones again and again, as the
    safety net's oldest-first reads did (bench/big_backlog.py at 4,000 jobs: 902 claims
    lost). The markers' hash segment spreads every pool's jobs over the whole range."""
    after = store.list_pending(limit=limit, start_at=start, pool=pool)
    if len(after) >= limit:
        return after, False
    before = store.list_pending(limit=limit, pool=pool)
    wrapped = [e for e in before if e.key < start]
    reached = len(wrapped) < len(before) or len(before) < limit  # came round to `start`
    room = limit - len(after)
    return after + wrapped[:room], reached and len(wrapped) <= room


def _too_young(entry: PendingEntry, now: datetime, settings: Settings) -> bool:
    """A marker younger than settings.overdue_after_seconds cannot be overdue (its record
    was written after it), so the drain skips it without paying for a read."""
    if entry.created is None:
        return False
    return (now - entry.created).total_seconds() < settings.overdue_after_seconds
