"""The scheduled sweep: River-style rescue over the pending index only.

Cost is O(pending), never O(history): it lists the whole of ``pending/``, every pool's
markers (shared.pools: ``pending/<h>~<id>`` and ``pending/<pool>/<h>~<id>``; one list call per
1,000), reads the records whose markers say they may need action (shared.sweep_plan:
every one when the index is small, at most RECLAIM_SWEEP_MAX_JOBS a run), within
RECLAIM_SWEEP_MAX_SECONDS, and lets shared.recovery apply stale_action with the stale
time of the job's pool; a requeued job is rung on its pool's topic. Every write is
generation-matched, so two sweeps at once (or a sweep racing a status read or an owner)
are safe.

Index repair. Submit writes the marker first and the record second; the owner
writes the final record first and drops the marker second. So the leftovers a
crash can leave are:
- a marker without a record (crash between marker and record create): removed
  once the marker is older than Settings.orphan_marker_grace_seconds (younger
  ones may be a submit in flight);
- a marker of a terminal record (crash between final write and marker delete):
  removed.
The third kind, a pending record without a marker, cannot arise: nothing
deletes a marker before the record is terminal (and retry_fields re-adding a
marker is the retry path's job). Corrupt records are counted, listed and left
alone: never rewritten, never deleted, and their marker stays so the next sweep
reports them again until a person acts.

Gauges. The records the sweep reads are the queue's pending jobs, so each run logs one
``queue`` metric line per pipeline (queued, running, the age of the oldest due job:
shared.metrics) and one ``sweep`` line; the log-based metrics and alerts are built on
those (docs/seeing.md). They cover the whole index every run: a marker left unread
counts as queued in its pipeline (the marker's metadata) and as ``unread``; the
unread ones are the newest markers, marked within the stale time, so the oldest due job
is among those read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared import job_queue, metrics, sweep_plan
from shared.config import Settings
from shared.errors import CorruptRecord, InvalidInput, NotFound, ReclaimError, StorageError
from shared.hints import index_board
from shared.jobs import JobRecord
from shared.logs import get_logger
from shared.pipelines import pipeline_names
from shared.recovery import Recovery, recover, ring_ahead
from shared.seams import Context, SweepPass
from shared.storage import PendingEntry

log = get_logger(__name__)

MAX_CORRUPT_LISTED = 100


@dataclass
class SweepResult:
    """Counts of one sweep run (the sweep function answers them as JSON)."""

    examined: int = 0
    requeued: int = 0  # queued jobs whose doorbell was lost, re-rung
    rescued: int = 0  # running jobs whose owner went silent, requeued
    failed: int = 0  # out of attempts
    rung: int = 0  # doorbells accepted by Pub/Sub
    rung_ahead: int = 0  # retries backing off longer than the wait window, rung before due
    repaired: int = 0  # index leftovers removed
    corrupt: list[str] = field(default_factory=list)
    errors: int = 0
    elapsed: float = 0.0
    truncated: bool = False  # markers left unread (the read or time budget): see unread
    listed: int = 0  # markers in the pending index (the whole of it is listed every run)
    unread: int = 0  # markers this run did not read (counted in the gauges all the same)
    released: int = 0  # time: delayed jobs moved into pending/ and rung
    expired: int = 0  # time: ended by their expiry before they started
    unique_released: int = 0  # time: unique locks that no longer held, removed
    resumed: int = 0  # waits: parked jobs released (their time came, or a repair)

    def add(self, counts: Mapping[str, int | bool]) -> None:
        """Add a pass's counts (named like the fields): numbers add up, flags or."""
        for name, value in counts.items():
            now = getattr(self, name)
            setattr(self, name, (now or value) if isinstance(value, bool) else now + value)

    def counts(self) -> dict[str, int | bool]:
        """The counters a pass may add to, as they stand."""
        return {k: v for k, v in asdict(self).items() if isinstance(v, int | bool)}

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["elapsed"] = round(self.elapsed, 3)
        return out


def run_once(
    ctx: Context, now: datetime | None = None, *, monotonic: Callable[[], float] = time.monotonic
) -> SweepResult:
    """One sweep over the pending index, with the features' passes (their `beside` passes
    on a thread during it, the others after it); per-entry errors are counted, never
    raised. Only the listing's own failure (a storage outage) propagates.
    """
    start = monotonic()
    now = now if now is not None else datetime.now(UTC)
    settings = ctx.settings
    result = SweepResult()
    beside = SweepResult()  # their listings overlap the pending pass
    passes = list(ctx.sweep_passes())
    indexes = _Indexes(ctx, passes, now)  # which of the passes' indexes may hold anything
    indexes.load()
    side = threading.Thread(target=indexes.run_beside, args=(passes, beside))
    side.start()
    entries = ctx.store.list_pending()  # the whole index: one list call per 1,000 markers
    chosen = sweep_plan.plan(entries, now, settings, settings.sweep_max_jobs)
    result.listed = len(entries)
    pending: list[JobRecord] = []  # what the pending records are after this run
    unread = list(chosen.unread)
    for i, entry in enumerate(chosen.read):
        if monotonic() - start > settings.sweep_max_seconds:
            unread += chosen.read[i:]
            break
        result.examined += 1
        try:
            record = _sweep_entry(ctx, now, entry, result)
        except ReclaimError as exc:  # a storage hiccup or an odd record: the next run retries
            result.errors += 1
            log.error(
                "sweep could not handle a job",
                job_id=entry.job_id,
                error=f"{type(exc).__name__}: {exc}",
            )
        else:
            if record is not None:
                pending.append(record)
    result.unread = len(unread)
    result.truncated = bool(unread)
    side.join()
    result.add(beside.counts())
    listed = frozenset(e.job_id for e in entries)
    _run_passes(ctx, indexes.runnable(p for p in passes if not p.beside), now, listed, result)
    indexes.settle()
    result.elapsed = monotonic() - start
    _log_gauges(pending, unread, now, settings)
    log.info(
        "sweep finished",
        **{k: v for k, v in result.to_json().items() if k != "corrupt"},
        corrupt=len(result.corrupt),
        **metrics.sweep_run(),
    )
    return result


class _Indexes:
    """One run's view of the index board (shared.hints.index_board): read beside the pending
    listing (checked whole when due), the passes with an index that may hold anything
    run, and what they listed settles the board at the end. A board that cannot be read
    leaves every pass to list as it would without one."""

    def __init__(self, ctx: Context, passes: list[SweepPass], now: datetime) -> None:
        self.ctx = ctx
        self.now = now
        self.watched = [k for p in passes for k in p.indexes]
        self.board: index_board.Board | None = None
        self.observed = index_board.Observed()
        self._scope: index_board.sweeping | None = None

    def run_beside(self, passes: list[SweepPass], out: SweepResult) -> None:
        """On the side thread: the beside passes the board lets run."""
        _run_passes(
            self.ctx, self.runnable(p for p in passes if p.beside), self.now, frozenset(), out
        )

    def load(self) -> None:
        """The board, checked whole when due (a read; nine listings at most once an hour)."""
        store = self.ctx.store
        try:
            board = index_board.read(store)
            if board.check_due(self.now):  # entries the board never heard of
                board, lists = index_board.full_check(store, board, self.watched, self.now)
                log.info("index board checked whole", listings=lists, on_board=len(board.entries))
        except StorageError as exc:
            log.warning("could not read the index board: every index is listed", error=str(exc))
            return
        self.board = board
        self._scope = index_board.sweeping(store, board, self.observed)
        self._scope.__enter__()

    def runnable(self, passes: Iterable[SweepPass]) -> list[SweepPass]:
        """The passes whose indexes may hold something (all of them without a board)."""
        board = self.board
        return [
            p
            for p in passes
            if board is None or not p.indexes or any(board.may_hold(k) for k in p.indexes)
        ]

    def settle(self) -> None:
        """The run is over: indexes its passes listed empty past their lease leave the
        board (shared.hints.index_board.settle)."""
        if self._scope is None or self.board is None:
            return
        self._scope.__exit__()
        index_board.settle(self.ctx.store, self.board, self.observed, self.now)


def _log_gauges(
    pending: list[JobRecord], unread: list[PendingEntry], now: datetime, settings: Settings
) -> None:
    """One ``queue`` line per known pipeline (zeros included) and per pipeline seen: the
    records read, and the markers left unread counted from the listing."""
    ahead = [e for e in unread if e.due is not None and e.due > now]  # parks (waits)
    gauges = metrics.queue_gauges(
        pending,
        now,
        pipelines=pipeline_names(),
        skew_s=settings.clock_skew_seconds,
        unread=[e.pipeline for e in unread if e not in ahead],
        parked=[e.pipeline for e in ahead],
    )
    for gauge in gauges.values():
        log.info("queue gauge", **gauge.fields())


def _sweep_entry(
    ctx: Context, now: datetime, entry: PendingEntry, result: SweepResult
) -> JobRecord | None:
    """Recover one entry; returns its record afterwards if the job is still pending."""
    try:
        stored = ctx.store.read(entry.job_id)
    except NotFound:
        if _orphan_marker_expired(entry, now, ctx.settings):
            ctx.store.remove_pending(entry.job_id, pool=entry.pool)
            result.repaired += 1
            log.warning("removed a pending marker without a record", job_id=entry.job_id)
        return None
    except (CorruptRecord, InvalidInput) as exc:  # or a foreign name in pending/
        if len(result.corrupt) < MAX_CORRUPT_LISTED:
            result.corrupt.append(entry.job_id)
        log.error("corrupt record left for a person", job_id=entry.job_id, reason=exc.reason)
        return None
    for check in ctx.sweep_checks():  # a feature's own states (expired, waiting)
        settled = check(ctx, stored, now)
        if settled is not None:
            result.add({settled.count: 1} if settled.count else {})
            return settled.pending
    done = recover(ctx, stored, now, clean_marker=True)
    _drop_moved_marker(ctx, entry, done)
    _count(result, done)
    if done.action is None and not done.unmarked and ring_ahead(ctx, done.stored, now):
        result.rung_ahead += 1  # a long backoff due within the window: shared.claim.due_wait
    return None if job_queue.is_terminal(done.stored.record) else done.stored.record


def _count(result: SweepResult, done: Recovery) -> None:
    """What recover() did to one record, in the run's counts."""
    if done.unmarked:
        result.repaired += 1
    elif done.action == "fail":
        result.failed += 1
    elif done.action == "requeue":
        if done.rescued:
            result.rescued += 1
        else:
            result.requeued += 1
    if done.rang:  # accepted by Pub/Sub, even when a claim then won the write's race
        result.rung += 1


def _drop_moved_marker(ctx: Context, entry: PendingEntry, done: Recovery) -> None:
    """A finished job's marker left in a folder its pipeline's pool no longer uses (the
    pools file changed, or it was written before pools): the finish removed the marker
    where the job's pool keeps it, this one is removed where it was listed."""
    if done.unmarked and entry.pool != ctx.settings.marker_pool(done.stored.record):
        ctx.store.remove_pending(entry.job_id, pool=entry.pool)


def _run_passes(
    ctx: Context, passes: list[SweepPass], now: datetime, pending: frozenset[str], out: SweepResult
) -> None:
    """The features' passes in table order; a failure is counted and logged, and the next
    pass runs all the same."""
    for sweep_pass in passes:
        try:
            out.add(sweep_pass.run(ctx, now, pending))
        except Exception as exc:  # maybe on its own thread: whatever it is, count it, log it
            out.errors += 1
            log.error(
                "a sweep pass failed", name=sweep_pass.name, error=f"{type(exc).__name__}: {exc}"
            )


def _orphan_marker_expired(entry: PendingEntry, now: datetime, settings: Settings) -> bool:
    """A record-less marker is a crashed submit only once it is older than the grace."""
    if entry.created is None:
        return False  # cannot date it: leave it (it costs one read per sweep)
    created = entry.created if entry.created.tzinfo else entry.created.replace(tzinfo=UTC)
    return (now - created).total_seconds() > settings.orphan_marker_grace_seconds
