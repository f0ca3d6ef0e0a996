"""The release of a parked job, and what calls it: a waitpoint's completion, time (a
sleep's end, a waitpoint's timeout) and, for fan-outs, shared.features.waits.fanout.

Exactly once, by construction. A release is one compare-and-swap on the parked record
(ifGenerationMatch: https://cloud.google.com/storage/docs/request-preconditions) that
takes it from ``waiting`` on *this* wait to ``queued``; whoever loses the race re-reads and
finds the job no longer parked on it. So the first of many completions wins, a timeout
that races a completion settles to one of them, and a completion that lands before the
job parks is kept (``waits/done/<job>/<ref>``, create-only: the first early completion
wins) and read by the park itself right after its write, which releases the job at once:
each side writes, then reads the other's, so at least one of them sees both.

The release marks the job's pending marker due before its write (marker first, as
everywhere), due when its doorbell should have been answered: should the process die
between the write and the doorbell, the drain of any freed slot and the sweep find the
job by that mark, and before then no freed slot races a doorbell that is on its way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import faults, records, timing
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    IllegalTransition,
    InvalidInput,
    JobNotFound,
    LostRace,
    NotFound,
    StorageError,
)
from shared.features.waits import keys, rules
from shared.hints import index_board
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.seams import ring_or_leave

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Stored

log = get_logger(__name__)

CAS_TRIES = 8
RECHECK = timedelta(hours=1)
"""A parked job the sweep has looked at has its pending marker marked due its wake time,
at most this far ahead: the sweep reads it about once an hour (a safety net for a release
whose write or doorbell was lost), never every run."""


def mark(ctx: Context, record: Mapping[str, Any], due: datetime) -> bool:
    """Mark the job's pending marker due at `due` (a failure is only logged: the sweep then
    reads the job by its marker's age, which costs reads, never the job)."""
    try:
        ctx.store.mark_due(str(record["id"]), due, pool=ctx.settings.marker_pool(record))
    except StorageError as exc:
        log.warning("could not mark a parked job's marker", job_id=record.get("id"), error=str(exc))
        return False
    return True


def park_due(record: Mapping[str, Any], now: datetime) -> datetime:
    """When the sweep should look at a parked job: its wake time, at most RECHECK ahead."""
    wake = rules.wake_at(record)
    later = now + RECHECK
    return min(wake, later) if wake is not None else later


def release(
    ctx: Context,
    job_id: str,
    matches: Callable[[JobRecord], bool],
    ended: Mapping[str, Any],
    *,
    stored: Stored | None = None,
) -> Stored | None:
    """Release the job if it is still parked as `matches` says: one CAS, re-read on a
    lost race. The written record, or None when it was not (any more) parked so."""
    for _ in range(CAS_TRIES):
        if stored is None:
            try:
                stored = ctx.store.read(job_id)
            except (NotFound, CorruptRecord):
                return None
        job = stored.record
        if not matches(job):
            return None
        now = ctx.now()
        # marker first: due once the doorbell should have been answered (a fresh doorbell
        # is on its way until then: Settings.overdue_after_seconds), so after a crash the
        # drain of any freed slot and the sweep take it, and no slot races for it before
        mark(ctx, job, now + timedelta(seconds=ctx.settings.overdue_after_seconds))
        try:
            written = ctx.store.update(
                {**job, **rules.release_fields(job, now, ended)}, stored.generation
            )
        except LostRace:
            stored = None
            continue
        except NotFound:
            return None
        faults.kill_if("after-release", job_id)  # test-only (shared.faults)
        _drop_time_marker(ctx, job)
        rec = written.record
        log.info(
            "resumed: its wait ended",
            job_id=job_id,
            wait=(job.get("park") or {}).get("kind"),
            how=ended.get("status"),
            by=ended.get("by"),
            traceparent=rec.get("traceparent"),
        )
        ring_or_leave(ctx.doorbell, job_id, rec.get("traceparent"), pipeline=rec.get("pipeline"))
        return written
    raise LostRace(f"job {job_id}: kept losing the release race")


def _drop_time_marker(ctx: Context, job: Mapping[str, Any]) -> None:
    """The park's time-index entry, if it had one (a leftover is dropped by the sweep)."""
    wake = rules.wake_at(job)
    if wake is None:
        return
    try:
        ctx.store.delete_blob(timing.scheduled_name(str(job["id"]), wake))
    except StorageError as exc:
        log.info("time marker left for the sweep", job_id=job.get("id"), error=str(exc))


# ------------------------------------------------------------------ completions


@dataclass(frozen=True)
class Completion:
    """What one completion did. `state`: "resumed" (this completion released the job),
    "recorded" (it came before the job waited: kept, it resumes the job when it does),
    "already" (another completion or the timeout came first), "gone" (the job ended or
    no longer exists)."""

    job_id: str
    ref: str
    state: str
    detail: str
    waited: dict[str, Any] | None = field(default=None)

    @property
    def won(self) -> bool:
        return self.state in ("resumed", "recorded")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "waitpoint": self.ref,
            "completed": self.won,
            "state": self.state,
            "detail": self.detail,
            "status_url": f"/jobs/{self.job_id}",
        }
        if self.waited is not None:
            out["outcome"] = {k: self.waited.get(k) for k in ("status", "by", "at")}
        return out


def complete_token(ctx: Context, token: object, data: Any, by: str) -> Completion:
    """Complete the waitpoint a token names (InvalidInput for a token this deployment did
    not sign, or data that is no JSON of at most rules.MAX_DATA_BYTES)."""
    key = keys.signing_key(ctx.store, create=False)  # a refusal writes nothing
    found = rules.verify(key, token) if key is not None else None
    if found is None:
        raise InvalidInput("no such waitpoint: the token is not one this deployment made", "token")
    try:
        data = rules.check_data(data)
    except ValueError as exc:
        raise InvalidInput(str(exc), "data") from None
    return complete(ctx, found[0], found[1], "completed", data=data, by=by)


def complete_parked(ctx: Context, job_id: str, data: Any, by: str) -> Completion:
    """Complete the waitpoint a job is parked on now (an operator, the dashboard's Approve
    and Reject): JobNotFound, or IllegalTransition when it is not parked on one."""
    try:
        data = rules.check_data(data)
    except ValueError as exc:
        raise InvalidInput(str(exc), "data") from None
    records.validate_job_id(job_id)
    try:
        record = ctx.store.read(job_id).record
    except NotFound:
        raise JobNotFound(job_id) from None
    park = record.get("park")
    if not rules.parked_on(record, "token") or not isinstance(park, dict):
        raise IllegalTransition(
            f"job {job_id} is {record.get('status')!s}, not waiting for a waitpoint"
        )
    return complete(ctx, job_id, str(park.get("ref")), "completed", data=data, by=by)


def complete(
    ctx: Context, job_id: str, ref: str, status: str, *, data: Any = None, by: str | None = None
) -> Completion:
    """Complete waitpoint `ref` of `job_id` ("completed" or "timed_out"), exactly once."""
    rules.check_ref(ref)
    try:
        stored: Stored | None = ctx.store.read(job_id)
    except NotFound:
        return Completion(job_id, ref, "gone", "the job no longer exists")
    ended = rules.outcome(status, ctx.now(), data=data, by=by)
    wrote_early = False
    for _ in range(CAS_TRIES):
        assert stored is not None
        job = stored.record
        if rules.parked_on(job, "token", ref):
            written = release(ctx, job_id, _on(ref), ended, stored=stored)
            if written is not None:
                if wrote_early:
                    _forget_early(ctx, job_id, ref)
                return Completion(
                    job_id, ref, "resumed", "the job resumes", written.record.get("waited")
                )
            stored = ctx.store.read(job_id)
            continue
        settled = _settled(job_id, ref, job)
        if settled is not None:
            return settled
        if wrote_early:  # kept; the job reads it when it waits on this waitpoint
            return Completion(job_id, ref, "recorded", "kept: the job resumes when it waits")
        if status != "completed":  # a timeout only ends a wait that is under way
            return Completion(job_id, ref, "already", "the job is not waiting on it")
        early = _record_early(ctx, job_id, ref, ended)
        if early is not None:
            return early
        wrote_early = True
        faults.kill_if("after-completion", job_id)  # test-only (shared.faults)
        stored = ctx.store.read(job_id)  # it may have parked meanwhile: look again
    raise LostRace(f"job {job_id}: kept changing while completing its waitpoint")


def _on(ref: str) -> Callable[[JobRecord], bool]:
    return lambda job: rules.parked_on(job, "token", ref)


def _settled(job_id: str, ref: str, job: JobRecord) -> Completion | None:
    """The answer when the waitpoint was settled already or the job ended; None if not."""
    waited = job.get("waited")
    if isinstance(waited, dict) and waited.get("ref") == ref:
        how = waited.get("status")
        return Completion(job_id, ref, "already", f"already {how}", dict(waited))
    if job.get("status") in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED):
        return Completion(job_id, ref, "gone", f"the job is {job.get('status')!s}")
    return None


def _record_early(
    ctx: Context, job_id: str, ref: str, ended: Mapping[str, Any]
) -> Completion | None:
    """Keep a completion that came before its job waited (create-only: the first wins);
    None when this one was kept, else the answer to give."""
    # a nonce: two completions with the same data at the same instant are still two writes
    # (a create-only write that finds its own bytes counts as its retry: stores.gcs.put_blob)
    body = json.dumps({**ended, "nonce": uuid.uuid4().hex}, separators=(",", ":")).encode()
    index_board.note(ctx.store, rules.REPAIR_ROOT)  # the sweep's pass lists it from now on
    try:
        ctx.store.put_blob(rules.done_name(job_id, ref), body, generation=0)
    except AlreadyExists:
        first = early_completion(ctx, job_id, ref)
        how = (first or {}).get("status", "completed")
        return Completion(job_id, ref, "already", f"already {how} (before the job waited)", first)
    return None


def early_completion(ctx: Context, job_id: str, ref: str) -> dict[str, Any] | None:
    """The completion kept for a waitpoint its job had not waited on yet, or None."""
    try:
        blob = ctx.store.read_blob(rules.done_name(job_id, ref))
    except NotFound:
        return None
    try:
        found = json.loads(blob.data)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    found.pop("nonce", None)
    return found


def _forget_early(ctx: Context, job_id: str, ref: str) -> None:
    try:
        ctx.store.delete_blob(rules.done_name(job_id, ref))
    except StorageError as exc:  # the sweep's pass drops it
        log.info("early completion left for the sweep", job_id=job_id, error=str(exc))


def release_early(ctx: Context, stored: Stored) -> bool:
    """A job just parked on a waitpoint (or met by the sweep): if a completion came first,
    release it with that completion's data. True when it was released (by this call)."""
    job = stored.record
    park = job.get("park")
    if not rules.parked_on(job, "token") or not isinstance(park, dict):
        return False
    ref = str(park.get("ref"))
    early = early_completion(ctx, str(job["id"]), ref)
    if early is None:
        return False
    written = release(ctx, str(job["id"]), _on(ref), early, stored=stored)
    _forget_early(ctx, str(job["id"]), ref)
    return written is not None


# ------------------------------------------------------------------ time


def wake(ctx: Context, stored: Stored, now: datetime) -> bool:
    """Time's release of a parked job whose wake time passed: a sleep ends "slept", a
    waitpoint "timed_out" (unless a completion came first and is kept: that one wins).
    True when this call released it; False when it is not due or not parked."""
    job = stored.record
    until = rules.wake_at(job)
    if not rules.is_parked(job) or until is None or until > now:
        return False
    park = job.get("park") or {}
    job_id = str(job["id"])
    if park.get("kind") == "sleep":
        ended = rules.outcome("slept", now)
        return (
            release(ctx, job_id, lambda j: rules.parked_on(j, "sleep"), ended, stored=stored)
            is not None
        )
    if park.get("kind") == "token":
        if release_early(ctx, stored):
            return True
        done = complete(ctx, job_id, str(park.get("ref")), "timed_out", by="timeout")
        return done.state == "resumed"
    return False


def is_due(record: Mapping[str, Any], now: datetime) -> bool:
    wake_time = rules.wake_at(record)
    return wake_time is not None and wake_time <= now
