"""The watchdog's one move on one record, shared by the sweep, status reads and claim.

stale_action decides; this applies it with a generation-matched write, so any
number of sweeps, status reads and owners can race on a record and at most one
of them changes it. Losing that race is fine: someone else acted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from shared import finish, job_queue, metrics
from shared.errors import AttemptsExhausted, LostRace, NotFound, OwnerGone, StorageError
from shared.hints import due_hint
from shared.jobs import HistoryEntry, JobError, JobRecord, JobStatus, WatchdogAction
from shared.logs import get_logger
from shared.seams import ring_or_leave
from shared.sweep_plan import MARK_SLACK_MAX_S
from shared.traces import export as trace_export

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store, Stored

log = get_logger(__name__)


@dataclass(frozen=True)
class Recovery:
    """What recover did: the action it wrote (None: nothing written), the record now."""

    action: WatchdogAction | None
    stored: Stored
    rescued: bool = False  # a running job whose owner went silent was handed back
    rang: bool = False  # the doorbell of a requeued job was accepted by Pub/Sub
    unmarked: bool = False  # a terminal job's pending marker was removed


def recover(ctx: Context, stored: Stored, now: datetime, *, clean_marker: bool = False) -> Recovery:
    """Apply stale_action to one record: what was written ("requeue", "fail" or None) and
    the record now.

    None with a fresh read means healthy, terminal, or someone else acted first.
    With clean_marker, a terminal job's leftover pending marker is removed (the
    sweep passes it; a status read need not pay a delete per finished job), unless the
    job ended after `now` (less the clocks' slack): the sweep listed its marker before
    the terminal write, and the finisher removes it next (the sweep doing it too only
    met that delete in a race: in a 2,000-job backlog, 228 jobs a run, each a second
    delete and a second run of what follows the end).
    """
    job = stored.record
    job_id = str(job["id"])
    if job_queue.is_terminal(job):
        unmarked = False
        if clean_marker and not _ended_after(job, now - timedelta(seconds=MARK_SLACK_MAX_S)):
            # the sweep: a crash left what follows a terminal write undone
            unmarked = finish.after_terminal(ctx, job)
            if unmarked:  # its owner may have died before exporting the end: again, same ids
                trace_export.attempt_ended(job, job_queue.attempts_of(job))
                log.info(
                    "finished what follows a terminal write and removed the pending marker",
                    job_id=job_id,
                    status=job.get("status"),
                    traceparent=job.get("traceparent"),
                )
        return Recovery(None, stored, unmarked=unmarked)
    s = ctx.settings
    max_attempts = job_queue.max_attempts_of(job, s.max_attempts)
    action = job_queue.stale_action(  # the stale time of the job's pool
        job, now, s.stale_seconds_of(job), max_attempts, skew_s=s.clock_skew_seconds
    )
    if action == "requeue":
        return _requeue(ctx, stored, now)
    if action == "fail":
        return _fail(ctx, stored, now, max_attempts)
    return Recovery(None, stored)


def ring_ahead(ctx: Context, stored: Stored, now: datetime) -> bool:
    """The sweep's part in a retry on time (shared.claim.due_wait): a queued job whose
    backoff is longer than RECLAIM_RETRY_WAIT_SECONDS is rung once it is due within that
    window, without a write, so the claim that receives the doorbell waits out the rest
    inside its push. True when a doorbell went out."""
    job = stored.record
    s = ctx.settings
    max_attempts = job_queue.max_attempts_of(job, s.max_attempts)
    window = s.retry_wait_seconds
    if window <= 0 or not job_queue.rings_ahead(
        job, now, window, max_attempts, skew_s=s.clock_skew_seconds
    ):
        return False
    job_id = str(job["id"])
    trace = job.get("traceparent")
    if ring_or_leave(ctx.doorbell, job_id, trace, pipeline=job.get("pipeline")) is not None:
        return False  # not rung: the marker's due mark and the staleness rule still cover it
    log.info(
        "rang a retry ahead of its backoff",
        job_id=job_id,
        not_before=job.get("not_before"),
        traceparent=trace,
    )
    return True


def _ended_after(job: JobRecord, when: datetime) -> bool:
    """The terminal write is dated after `when` (an undatable one is not)."""
    ended = job_queue.parse_time(job.get("updated_at"))
    return ended is not None and ended > when


def rescue_now(ctx: Context, stored: Stored, now: datetime, why: str) -> Recovery:
    """A running job whose owner is known to be gone (its Cloud Run execution ended with
    the job still running: shared.features.executions): requeued at once, or failed when out of
    attempts, without waiting out the stale time. Generation-matched like the rest."""
    job = stored.record
    if job.get("status") != JobStatus.RUNNING:
        return Recovery(None, stored)
    max_attempts = job_queue.max_attempts_of(job, ctx.settings.max_attempts)
    if job_queue.attempts_of(job) >= max_attempts:
        return _fail(ctx, stored, now, max_attempts, why)
    return _requeue(ctx, stored, now, why)


def _requeue(ctx: Context, stored: Stored, now: datetime, why: str | None = None) -> Recovery:
    """A stale job back to queued with a fresh updated_at, and rung: a silent owner's
    (rescue; `why` the owner is known gone) or a queued one whose doorbell was lost."""
    if stored.record.get("status") == JobStatus.RUNNING:
        return _rescue(ctx, stored, now, why)
    return _rering(ctx, stored, now)


def _rering(ctx: Context, stored: Stored, now: datetime) -> Recovery:
    """A queued job whose doorbell was lost, rung first and written only if the ring went
    out: its history then counts the re-rings in a row (shared.job_queue.rerings: each
    waits twice as long as the last), and a failed ring leaves the record stale for the
    next run to try again. Ringing first is safe for a queued job: a claim that wins the
    doorbell before the write only makes the write lose its race."""
    job = stored.record
    job_id = str(job["id"])
    trace = job.get("traceparent")
    if ring_or_leave(ctx.doorbell, job_id, trace, pipeline=job.get("pipeline")) is not None:
        return Recovery("requeue", stored)  # not rung: stays stale for the next run
    log.info(
        "re-rang a queued job",
        job_id=job_id,
        attempt=job_queue.attempts_of(job),
        rerings=job_queue.rerings(job) + 1,
        traceparent=trace,
    )
    written = _write_requeued(ctx, stored, now, rescued=False)
    if written is None:
        return Recovery(None, ctx.store.read(job_id), rang=True)
    # the sweep reads the markers of jobs re-rung again and again after the others
    _mark(ctx, written, now, rerings=job_queue.rerings(written.record))
    return Recovery("requeue", written, rang=True)


def _rescue(ctx: Context, stored: Stored, now: datetime, why: str | None) -> Recovery:
    """A running job whose owner went silent (or is known gone: `why`): written back to
    queued, what it held released, then rung."""
    job = stored.record
    job_id = str(job["id"])
    error = None
    if why is not None:
        error = job_queue.error_info(
            OwnerGone(why),
            stage=job.get("stage") if isinstance(job.get("stage"), str) else None,
            attempt=job_queue.attempts_of(job),
            now=now,
            retryable=True,
        )
    written = _write_requeued(ctx, stored, now, rescued=True, error=error)
    if written is None:
        return Recovery(None, ctx.store.read(job_id))
    finish.after_requeue(ctx, written.record)  # what the owner held (a concurrency place)
    # the rescue ends the silent owner's attempt: its spans go out now (shared.tracing)
    trace_export.attempt_ended(written.record, job_queue.attempts_of(job))
    _mark(ctx, written, now, rerings=0)
    trace = job.get("traceparent")
    log.warning(
        "rescued a job whose owner went silent",
        job_id=job_id,
        owner=job.get("owner"),
        attempt=job_queue.attempts_of(job),
        traceparent=trace,
        **metrics.rescued(job),
    )
    rang = ring_or_leave(ctx.doorbell, job_id, trace, pipeline=job.get("pipeline")) is None
    return Recovery("requeue", written, rescued=True, rang=rang)


def _write_requeued(
    ctx: Context, stored: Stored, now: datetime, *, rescued: bool, error: JobError | None = None
) -> Stored | None:
    """The record back to queued, generation-matched; None when someone else acted first."""
    fields = job_queue.requeue_fields(stored.record, now, rescued=rescued, error=error)
    if rescued:
        job = stored.record
        fields = with_newest(fields, silent_since(job, ctx.settings.stale_seconds_of(job)))
    try:
        return ctx.store.update({**stored.record, **fields}, stored.generation)
    except (LostRace, NotFound):
        return None


def silent_since(job: JobRecord, stale_s: float) -> HistoryEntry:
    """What the entry that ends a silent owner's attempt (a rescue, or a claim taking the
    record over) says of it (issue 46): `last_seen`, its record's updated_at (its last
    proof of life), and `stopped_by`, that plus the stale time: its lease, from when others
    may take its concurrency place. An owner that died stopped earlier; one cut off from
    storage stops itself within its lease; one paused or starved past it (alive) stops at
    its next check() or write, refused (docs/flow-control.md)."""
    seen = job_queue.parse_time(job.get("updated_at"))
    if seen is None:
        return {}
    lease_end = seen + timedelta(seconds=stale_s)
    return {
        "last_seen": job_queue.format_time(seen),
        "stopped_by": job_queue.format_time(lease_end),
    }


def with_newest(fields: JobRecord, more: HistoryEntry) -> JobRecord:
    """`fields` with the history entry they append (the newest) extended by `more`."""
    history = fields.get("history") or []
    if not more or not history:
        return fields
    entry: HistoryEntry = {**history[-1], **more}
    return {**fields, "history": [*history[:-1], entry]}


def _mark(ctx: Context, written: Stored, now: datetime, *, rerings: int) -> None:
    """A freed slot takes the job from its marker whatever becomes of the doorbell."""
    pool = ctx.settings.marker_pool(written.record)
    mark_due(ctx.store, str(written.record["id"]), now, pool=pool, rerings=rerings)


def _fail(
    ctx: Context, stored: Stored, now: datetime, max_attempts: int, why: str | None = None
) -> Recovery:
    """Out of attempts and silent (or gone: `why`): terminal failure, then the marker goes."""
    job = stored.record
    job_id = str(job["id"])
    attempts = job_queue.attempts_of(job)
    shown = attempts if attempts != job_queue.ATTEMPTS_UNREADABLE else "unreadable"
    gone = why or "the owner went silent"
    exc = AttemptsExhausted(f"{gone} and the job is out of attempts ({shown} of {max_attempts})")
    stage = job.get("stage")
    error = job_queue.error_info(
        exc,
        stage=stage if isinstance(stage, str) else None,
        attempt=attempts if attempts != job_queue.ATTEMPTS_UNREADABLE else -1,
        now=now,
        retryable=False,
        out_of_attempts=True,
    )
    fields = job_queue.fail_fields(job, now, error)
    if job.get("status") == JobStatus.RUNNING:  # a silent owner's attempt ends here
        fields = with_newest(fields, silent_since(job, ctx.settings.stale_seconds_of(job)))
    new: JobRecord = {**job, **fields}
    try:
        written = ctx.store.update(new, stored.generation)
    except (LostRace, NotFound):
        return Recovery(None, ctx.store.read(job_id))
    log.error(
        "failed a job: attempts exhausted",
        job_id=job_id,
        owner=job.get("owner"),
        attempt=error["attempt"],
        traceparent=job.get("traceparent"),
        **metrics.finished(job, metrics.Ending.FAILED),
    )
    trace_export.attempt_ended(written.record, job_queue.attempts_of(job))
    finish.after_terminal(ctx, written.record)
    return Recovery("fail", written)


def mark_due(
    store: Store, job_id: str, due: datetime, *, pool: str | None = None, rerings: int = 0
) -> bool:
    """Mark a job sent back to the queue due (a hand-back, a rescue, a re-ring) on its
    pending marker, so the next freed slot anywhere takes it from the listing whatever
    became of its doorbell (`pool`: the marker's folder, Settings.marker_pool). False
    (logged) if the write failed: the doorbell, the drain's safety net and the sweep still
    cover the job."""
    try:
        store.mark_due(job_id, due, pool=pool, rerings=rerings)
    except StorageError as exc:
        log.warning("could not mark the job due on its marker", job_id=job_id, error=str(exc))
        return False
    due_hint.announce(store, pool)  # freed slots list the index only when this moves
    return True
