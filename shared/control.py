"""What a person does to a job: cancel it, retry it.

Each is a policy transition (shared.job_queue) applied with a generation-matched
write. A running owner's heartbeats write the same record, so a lost race
re-reads and decides again, a few times, before giving up with LostRace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared import (
    finish,
    job_queue,
    lifecycle,  # noqa: F401 - installs the features' hooks and gates
    metrics,
    records,
    workflows,
)
from shared.clock import Clock
from shared.doorbell import Ringer
from shared.errors import DoorbellError, JobNotFound, LostRace, NotFound
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
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


def cancel(
    store: Store,
    job_id: str,
    *,
    by: str,
    reason: str | None,
    clock: Clock,
    doorbell: Ringer | None = None,
) -> JobRecord:
    """queued|running -> cancelled; a running owner's next CAS fails and it stops.

    The pending marker goes after the terminal write, as for any terminal job.
    Raises InvalidInput, JobNotFound, CorruptRecord, IllegalTransition or LostRace.
    """
    stored = _transition(
        store,
        job_id,
        lambda job, now: job_queue.cancel_fields(job, now, by=by, reason=reason),
        clock,
    )
    finish.after_terminal(store, doorbell, stored.record)
    log.info(
        "cancelled",
        job_id=job_id,
        by=by,
        reason=reason,
        traceparent=stored.record.get("traceparent"),
        **metrics.finished(stored.record, JobStatus.CANCELLED),
    )
    return stored.record


def retry(
    store: Store,
    doorbell: Ringer,
    job_id: str,
    *,
    by: str,
    default_max_attempts: int,
    clock: Clock,
) -> Retried:
    """failed|cancelled -> queued with a fresh budget, then ring the doorbell.

    The pending marker is added first, as at submission: a crash between the two
    leaves a marker the sweep repairs, never a queued job nobody indexes. A
    failed ring is reported, not raised: the job is queued and the sweep rings it.
    """
    stored = _transition(
        store,
        job_id,
        lambda job, now: job_queue.retry_fields(
            job, now, by=by, default_max_attempts=default_max_attempts
        ),
        clock,
        before_write=lambda job: _before_retry(store, job_id, job),
    )
    trace = stored.record.get("traceparent")
    log.info("retried", job_id=job_id, by=by, traceparent=trace)
    try:
        doorbell.ring(job_id, trace)
    except DoorbellError as exc:
        log.warning(
            "doorbell failed; the sweep will ring",
            job_id=job_id,
            error=exc.reason,
            traceparent=trace,
        )
        return Retried(stored.record, str(exc))
    return Retried(stored.record)


def _before_retry(store: Store, job_id: str, job: JobRecord) -> None:
    store.add_pending(job_id)
    workflows.reopen_for_retry(store, job)  # a batch with on_complete waits for it again


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
