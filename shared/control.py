"""What a person does to a job: cancel it, retry it.

Each is a policy transition (shared.job_queue) applied with a generation-matched
write. A running owner's heartbeats write the same record, so a lost race
re-reads and decides again, a few times, before giving up with LostRace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from shared import finish, job_queue, metrics, records
from shared.clock import Clock
from shared.errors import JobNotFound, LostRace, NotFound
from shared.features import workflows
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.seams import ring_or_leave

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store, Stored

log = get_logger(__name__)

CAS_ATTEMPTS = 5
"""How often cancel and retry re-read and re-apply after losing a CAS to a heartbeat."""


@dataclass(frozen=True)
class Retried:
    """A retried job's record, and whether its doorbell rang (else the sweep rings it)."""

    record: JobRecord
    ring_error: str | None = None

    @property
    def rung(self) -> bool:
        return self.ring_error is None


def cancel(ctx: Context, job_id: str, *, by: str, reason: str | None) -> JobRecord:
    """queued|running -> cancelled; a running owner's next CAS fails and it stops.

    The pending marker goes after the terminal write, as for any terminal job.
    Raises InvalidInput, JobNotFound, CorruptRecord, IllegalTransition or LostRace.
    """
    stored = _transition(
        ctx.store,
        job_id,
        lambda job, now: job_queue.cancel_fields(job, now, by=by, reason=reason),
        ctx.clock,
    )
    finish.after_terminal(ctx, stored.record)
    log.info(
        "cancelled",
        job_id=job_id,
        by=by,
        reason=reason,
        traceparent=stored.record.get("traceparent"),
        **metrics.finished(stored.record, JobStatus.CANCELLED),
    )
    return stored.record


def retry(ctx: Context, job_id: str, *, by: str) -> Retried:
    """failed|cancelled -> queued with a fresh budget, then ring the doorbell.

    The pending marker is added first, as at submission: a crash between the two
    leaves a marker the sweep repairs, never a queued job nobody indexes. A
    failed ring is reported, not raised: the job is queued and the sweep rings it.
    """
    budget = ctx.settings.max_attempts
    stored = _transition(
        ctx.store,
        job_id,
        lambda job, now: job_queue.retry_fields(job, now, by=by, default_max_attempts=budget),
        ctx.clock,
        before_write=lambda job: _before_retry(ctx, job_id, job),
    )
    trace = stored.record.get("traceparent")
    log.info("retried", job_id=job_id, by=by, traceparent=trace)
    pipeline = stored.record.get("pipeline")
    return Retried(stored.record, ring_or_leave(ctx.doorbell, job_id, trace, pipeline=pipeline))


def _before_retry(ctx: Context, job_id: str, job: JobRecord) -> None:
    ctx.store.add_pending(job_id, pool=ctx.settings.marker_pool(job), pipeline=job.get("pipeline"))
    workflows.reopen_for_retry(ctx.store, job)  # a batch with on_complete waits for it again


def _transition(
    store: Store,
    job_id: str,
    fields_of: Callable[[JobRecord, datetime], JobRecord],
    clock: Clock,
    before_write: Callable[[JobRecord], None] | None = None,
) -> Stored:
    """Read, apply a policy builder, CAS; on LostRace read again (a few times)."""
    records.validate_job_id(job_id)
    for _ in range(CAS_ATTEMPTS):
        try:
            stored = store.read(job_id)
        except NotFound:
            raise JobNotFound(job_id) from None
        new: JobRecord = {**stored.record, **fields_of(stored.record, clock())}
        if before_write is not None:
            before_write(stored.record)
        try:
            return store.update(new, stored.generation)
        except LostRace:
            continue
    raise LostRace(f"job {job_id} kept changing under us ({CAS_ATTEMPTS} tries); try again")
