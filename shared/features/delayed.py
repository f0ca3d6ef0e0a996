"""Delayed jobs: the hour-bucketed index `scheduled/<slot>/<YYYYMMDDTHH>/<id>` and its release.

A job whose run_at lies ahead is NOT in pending/ while it waits: the drain, the sweep's
rescue pass and the status reads never see it, and no doorbell is held through the delay
(Pub/Sub has no delayed delivery; an unacked message would only be redelivered early).
Each hour is spread over a few fan-out slots (shared.shards.TIME_INDEX_FANOUT, by a
hash of the id), so the writes of one busy hour do not all land in one new key range
(https://cloud.google.com/storage/docs/request-rate). The sweep lists, in each slot and
among the names written before the slots (scheduled/<hour>/<id>, still read), only the
buckets up to the current hour: objects.list's endOffset "filter[s] results to objects
whose names are lexicographically before endOffset"
(https://cloud.google.com/storage/docs/json_api/v1/objects/list), so the far-future
buckets are never read: slots + 1 listings per sweep run. It moves each due job into
pending/ (marker first), rings it, then deletes its scheduled marker. A crash between
those steps leaves both markers: the next sweep moves the job again (idempotent) or finds
it started and drops the marker.

No cursor object is needed: a released bucket is emptied, so the listing below the
current hour only ever holds what is due (or leftovers the sweep is about to repair).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from shared import finish, job_queue, timing
from shared.errors import CorruptRecord, IllegalTransition, LostRace, NotFound
from shared.features import uniqueness
from shared.hints import index_board
from shared.jobs import JobStatus
from shared.logs import get_logger
from shared.seams import ring_or_leave
from shared.shards import fanout_slots

if TYPE_CHECKING:
    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import BlobInfo, Store, Stored

log = get_logger(__name__)

INDEXES: tuple[str, ...] = (
    timing.SCHEDULED_PREFIX,  # the names from before the fan-out slots
    *(f"{timing.SCHEDULED_PREFIX}{slot}/" for slot in fanout_slots()),
    timing.UNIQUE_PREFIX,
)
"""What time's sweep pass lists (shared.hints.index_board: the sweep skips what holds nothing)."""


def place(store: Store, record: JobRecord, now: datetime) -> bool:
    """Write the scheduled marker of a job that is not due yet (before its record, as
    the pending marker would be); False when the job is due now (use pending/)."""
    run_at = timing.run_at_of(record, now)
    if run_at is None or run_at <= now:
        return False
    write_entry(store, timing.scheduled_name(str(record["id"]), run_at), now)
    return True


def write_entry(store: Store, name: str, now: datetime) -> None:
    """A scheduled entry (create-only), its index and hour noted on the board first
    (shared.hints.index_board: the sweep lists a slot only from the first hour it may hold). The
    one writer of the time index: a delayed job's, a waits' sleep or timeout."""
    key, hour = name.rsplit("/", 2)[0] + "/", name.rsplit("/", 2)[1]  # scheduled/<slot>/, hour
    index_board.note(store, key, now, since=hour)
    store.put_blob(name, b"", generation=0)


@dataclass
class Released:
    """What one pass over the due buckets did."""

    examined: int = 0
    released: int = 0
    expired: int = 0
    repaired: int = 0
    truncated: bool = False


def delayed_ids(
    ctx: Context, statuses: tuple[JobStatus, ...], _since: datetime, _now: datetime
) -> list[str]:
    """Bulk selection: delayed jobs wait in the hour index, not in pending/."""
    if not any(s in (JobStatus.QUEUED, JobStatus.WAITING) for s in statuses):
        return []
    return [b.name.rsplit("/", 1)[-1] for b in ctx.store.list_blobs(timing.SCHEDULED_PREFIX)]


def sweep_pass(ctx: Context, now: datetime, _pending: frozenset[str]) -> dict[str, int | bool]:
    """Time's pass in the sweep, beside the rescue pass: release due delayed jobs, then
    repair unique keys."""
    released = release_due(ctx, now)
    return {
        "released": released.released,
        "expired": released.expired,
        "repaired": released.repaired,
        "truncated": released.truncated,
        "unique_released": uniqueness.repair(ctx.store, ctx.settings, now),
    }


def release_due(ctx: Context, now: datetime | None = None) -> Released:
    """Move due delayed jobs into pending/ and ring them (the sweep calls this first)."""
    now = now or datetime.now(UTC)
    out = Released()
    limit = ctx.settings.sweep_max_jobs
    infos: list[BlobInfo] = []
    run = index_board.current(ctx.store)  # the sweep's board: a slot listed only if due
    for prefix, end in timing.scheduled_ranges(now):  # one listing per fan-out slot + old
        if len(infos) >= limit:
            break
        if run is not None and not run[0].may_hold(prefix, before=end.rsplit("/", 1)[-1]):
            continue  # nothing in this slot can be due (or the board says it is empty)
        listed = ctx.store.list_blobs(prefix, end_before=end, limit=limit - len(infos))
        if run is not None:
            _observe(ctx.store, run, prefix, listed, now)
        infos += listed
    out.truncated = len(infos) >= limit
    for info in infos:
        out.examined += 1
        job_id = timing.scheduled_job_id(info.name)
        try:
            _release_one(ctx, now, info, job_id, out)
        except Exception as exc:  # one odd entry must not stop the others
            log.error("could not release a delayed job", job_id=job_id, error=repr(exc))
    return out


def _observe(
    store: Store,
    run: tuple[index_board.Board, index_board.Observed],
    key: str,
    listed: list[BlobInfo],
    now: datetime,
) -> None:
    """Tell the board what a slot holds: its first due entry's hour, or, when nothing in
    it is due and its note has lapsed, its first entry at all (one more listing, limit 1)
    or that it is empty, so the sweep stops listing it until a later hour comes due."""
    board, observed = run
    if listed:
        observed.listed(key, [listed[0].name])
    elif index_board.settled(board, key, now, None, True) is not None:  # its lease ended
        keys = [p for p, _end in timing.scheduled_ranges(now)]  # the old names' sit above
        first = index_board.first_entry(store, key, keys)
        observed.listed(key, [first] if first else [])


def _release_one(ctx: Context, now: datetime, info: BlobInfo, job_id: str, out: Released) -> None:
    store, settings, name, created = ctx.store, ctx.settings, info.name, info.created
    try:
        stored = store.read(job_id)
    except NotFound:  # a crashed submit (marker, no record) once past the grace
        if created is not None and (now - _aware(created)).total_seconds() > (
            settings.orphan_marker_grace_seconds
        ):
            store.delete_blob(name)
            out.repaired += 1
        return
    except CorruptRecord:
        log.error("corrupt delayed record left for a person", job_id=job_id)
        return
    job = stored.record
    if not job_queue.is_terminal(job) and _woken(ctx, now, stored, name, out):
        return  # a feature's own entry (waits: a sleep's end, a waitpoint's timeout)
    if job_queue.is_terminal(job) or job.get("status") != "queued":
        if not job_queue.is_terminal(job):  # started early (a stray doorbell): rescuable
            store.add_pending(job_id, pool=settings.marker_pool(job), pipeline=job.get("pipeline"))
        store.delete_blob(name)  # cancelled while waiting, or already started
        out.repaired += 1
        return
    if not job_queue.is_due(job, now, skew_s=settings.clock_skew_seconds):
        run_at = timing.run_at_of(job, now)
        if run_at is not None and timing.scheduled_name(job_id, run_at) != name:
            # a replayed submit moved run_at to a later hour: index it there, drop this one
            write_entry(store, timing.scheduled_name(job_id, run_at), now)
            store.delete_blob(name)
            out.repaired += 1
        return  # later this hour
    # marker first: the usual rules
    store.add_pending(job_id, pool=settings.marker_pool(job), pipeline=job.get("pipeline"))
    if timing.expired(job, now):
        try:
            ended = store.update({**job, **job_queue.expire_fields(job, now)}, stored.generation)
        except (LostRace, IllegalTransition):
            return  # someone else moved it; the next pass looks again
        finish.after_terminal(ctx, ended.record)
        out.expired += 1
    else:  # the marker is in pending/: a failed ring is the sweep's
        ring_or_leave(ctx.doorbell, job_id, job.get("traceparent"), pipeline=job.get("pipeline"))
        out.released += 1
    store.delete_blob(name)


def _woken(ctx: Context, now: datetime, stored: Stored, name: str, out: Released) -> bool:
    """A waiting job's entry a feature put in the index (Feature.wakes; waits: a parked
    job): released when its time came; an entry that is not its own any more goes. False
    when no feature claims it (the delayed jobs' rules apply)."""
    for wake in ctx.wakes():
        woke = wake(ctx, stored, name, now)
        if woke is None:
            continue
        if woke == "resumed":
            out.released += 1
        if woke != "later":
            ctx.store.delete_blob(name)  # the release dropped it already, or it is stale
            out.repaired += woke == "stale"
        return True
    return False


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)
