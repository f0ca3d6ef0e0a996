"""Reading jobs and batches as their owners see them, with the watchdog.

A status read applies the same stale_action as the sweep (shared.recovery), so
a client polling a job whose owner vanished gets it requeued or failed without
waiting for the scheduler. The watchdog is best effort on a read: if it cannot
write, the reader still gets the record as read. Only a deployed function reads with
it (GET /jobs/<id>, the dashboard: the deployment's stale times, its pools'); a reader
with settings of its own (the CLI) reads with watchdog=False, so that no read judges a
job stale by a stale time that is not the deployment's.

What a view says of a job (render_job): `stage` is the stage running now (the owner
writes it at the claim and at each boundary); `error` is the error of the attempt the
job is at or ended with, with its kind ("retryable", "out of attempts", "permanent",
"expired") and the stage's traceback, while an earlier attempt's error is shown as
`previous_error` on a pending job and not at all on a done one (its history keeps it).

A record that cannot be decoded raises CorruptRecord (the HTTP API answers 409:
the stored state conflicts with its schema, a person must fix it) and is never
rewritten or deleted here.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared import job_queue, records
from shared.errors import (
    BatchNotFound,
    CorruptRecord,
    InvalidInput,
    JobNotFound,
    NotFound,
    ReclaimError,
)
from shared.features import workflows
from shared.jobs import MEMBER_MISSING, MEMBER_UNREADABLE, JobRecord, WatchdogAction
from shared.logs import get_logger
from shared.recovery import recover

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Stored

log = get_logger(__name__)

BATCH_LIST_LIMIT = 10_000
_WORKERS = 8
_VIEW_FIELDS = (
    "pipeline",
    "status",
    "stage",
    "attempts",
    "created_at",
    "updated_at",
    "not_before",
    "batch_id",
    "client_id",
    "source",
    "owner",
    "result",
    "rescues",
    "handbacks",
    "history",
)
_MEMBER_FIELDS = ("id", "pipeline", "status", "stage", "attempts", "updated_at")


@dataclass(frozen=True)
class JobView:
    """A job as a status read sees it: its record after the watchdog, and what it did."""

    record: JobRecord
    max_attempts: int  # the job's own, else the deployment's
    watchdog: WatchdogAction | None = None
    features: dict[str, Any] = field(default_factory=dict)  # what each feature's view adds
    generation: int = 0  # the record's version: GET /jobs/<id>?wait=&after= waits past it

    def to_json(self) -> dict[str, Any]:
        """The public view (GET /jobs/<id>, `reclaim status`)."""
        body = render_job(self.record, self.max_attempts)
        body["generation"] = self.generation
        if self.watchdog:
            body["watchdog"] = self.watchdog
        body.update(self.features)
        return body


@dataclass(frozen=True)
class BatchView:
    """Every member of a batch, each summarised (its status may be MEMBER_MISSING or
    MEMBER_UNREADABLE besides a JobStatus)."""

    batch_id: str
    members: list[dict[str, Any]]
    truncated: bool  # the batch has more members than one read lists
    on_complete: dict[str, Any] | None = None  # workflows: {pipeline, id, status} of the callback

    @property
    def counts(self) -> dict[str, int]:
        """Members by status, sorted by status."""
        return dict(sorted(Counter(str(m["status"]) for m in self.members).items()))

    @property
    def done(self) -> bool:
        """Every member is terminal."""
        return all(m["status"] in job_queue.TERMINAL_STATUSES for m in self.members)

    def to_json(self) -> dict[str, Any]:
        """The public view (GET /batches/<id>)."""
        return {
            "batch_id": self.batch_id,
            "total": len(self.members),
            "counts": self.counts,
            "done": self.done,
            "truncated": self.truncated,
            "jobs": self.members,
            **({"on_complete": self.on_complete} if self.on_complete is not None else {}),
        }


def read_job(ctx: Context, job_id: str, now: datetime, *, watchdog: bool = True) -> JobView:
    """The job after the read-path watchdog (without it: as stored); InvalidInput,
    JobNotFound or CorruptRecord."""
    records.validate_job_id(job_id)
    try:
        stored = ctx.store.read(job_id)
    except NotFound:
        raise JobNotFound(job_id) from None
    except CorruptRecord as exc:
        log.error("record unreadable; left for a person", job_id=job_id, reason=exc.reason)
        raise
    action, stored = _watchdog(ctx, stored, now) if watchdog else (None, stored)
    max_attempts = job_queue.max_attempts_of(stored.record, ctx.settings.max_attempts)
    shown = feature_views(ctx, stored.record)
    return JobView(stored.record, max_attempts, action, shown, stored.generation)


def feature_views(ctx: Context, record: JobRecord) -> dict[str, Any]:
    """What each feature's view adds to a job's (flow control: `paused` on a queued job
    of a paused pipeline)."""
    shown: dict[str, Any] = {}
    for feature in ctx.features:
        if feature.view is not None:
            shown.update(feature.view(ctx, record))
    return shown


def read_batch(ctx: Context, batch_id: str, now: datetime, *, watchdog: bool = True) -> BatchView:
    """Every member of a batch (O(batch): its markers, then its records in parallel),
    each after the watchdog (without it: as stored); InvalidInput or BatchNotFound."""
    records.validate_batch_id(batch_id)
    ids = ctx.store.list_batch(batch_id, limit=BATCH_LIST_LIMIT)
    if not ids:
        raise BatchNotFound(batch_id)
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(ids))) as pool:
        found = pool.map(lambda i: _member(ctx, batch_id, i, now, watchdog), ids)
        members = [m for m in found if m is not None]
    if not members:  # only stray markers: no record names this batch
        raise BatchNotFound(batch_id)
    return BatchView(
        batch_id,
        members,
        truncated=len(ids) >= BATCH_LIST_LIMIT,
        on_complete=workflows.batch_on_complete(ctx.store, batch_id),
    )


def render_job(record: JobRecord, max_attempts: int) -> dict[str, Any]:
    """The public view of a record; tolerant of hand-edited field types."""
    body: dict[str, Any] = {"id": record.get("id")}
    body.update({k: record.get(k) for k in _VIEW_FIELDS})
    body["handbacks"] = record.get("handbacks", 0)  # written on the first hand-back only
    body.update(errors_shown(record))
    body["max_attempts"] = max_attempts
    body["outputs"] = _outputs(record)
    body["status_url"] = f"/jobs/{record.get('id')}"
    if isinstance(record.get("progress"), dict):  # a stage's ctx.progress
        body["progress"] = record.get("progress")
    return body


def errors_shown(record: JobRecord) -> dict[str, Any]:
    """`error`: the error of the attempt the job is at or ended with (None: no error of
    its own), with its kind; `previous_error` on a pending job: an earlier attempt's."""
    own = job_queue.error_of_attempt(record)
    shown: dict[str, Any] = {"error": _with_kind(own)}
    stored = record.get("error")
    if own is None and isinstance(stored, dict) and stored:
        if record.get("status") in (*job_queue.PENDING_STATUSES, *job_queue.WAITING_STATUSES):
            shown["previous_error"] = _with_kind(stored)
    elif own is None and stored not in (None, {}) and not isinstance(stored, dict):
        shown["error"] = stored  # hand-edited: shown as stored
    return shown


def _with_kind(error: Any) -> Any:
    if isinstance(error, dict):
        return {**error, "kind": job_queue.error_kind(error)}
    return error


def _member(
    ctx: Context, batch_id: str, job_id: str, now: datetime, watchdog: bool = True
) -> dict[str, Any] | None:
    """One member's summary; None for what only looks like one: a foreign object
    under batches/<id>/, or a stray marker whose record names another batch (a
    marker is only an index; the record decides the membership)."""
    try:
        stored = ctx.store.read(job_id)
    except NotFound:  # marker written, record not (yet): the sweep repairs or it lands
        return {"id": job_id, "status": MEMBER_MISSING, "status_url": f"/jobs/{job_id}"}
    except InvalidInput:  # a foreign object under batches/<id>/: not a member
        log.warning("foreign object in a batch skipped; remove it by hand", name=job_id)
        return None
    except CorruptRecord as exc:
        return {
            "id": job_id,
            "status": MEMBER_UNREADABLE,
            "reason": exc.reason,
            "status_url": f"/jobs/{job_id}",
        }
    if stored.record.get("batch_id") != batch_id:  # a stray marker: not a member
        return None
    if watchdog:
        _action, stored = _watchdog(ctx, stored, now)
    return summary(stored.record, tuple(ctx.summary_fields()))


def summary(record: JobRecord, feature_fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """A job in a list (a batch's members, GET /jobs): its state, not its history; with
    the features' summary fields it has (Feature.summary_fields)."""
    out: dict[str, Any] = {k: record.get(k) for k in _MEMBER_FIELDS}
    out["status_url"] = f"/jobs/{record.get('id')}"
    error = errors_shown(record)["error"]
    if error is not None:
        out["error"] = error
    if isinstance(record.get("progress"), dict):
        out["progress"] = record.get("progress")
    out.update({k: record.get(k) for k in feature_fields if record.get(k) is not None})
    return out


def _watchdog(ctx: Context, stored: Stored, now: datetime) -> tuple[WatchdogAction | None, Stored]:
    """recover() the record if it is stale; if that fails, show it as read."""
    try:
        done = recover(ctx, stored, now)
        action, after = done.action, done.stored
    except ReclaimError as exc:  # best effort: a read must answer even if the write fails
        log.warning(
            "status watchdog could not act",
            job_id=stored.record.get("id"),
            error=f"{type(exc).__name__}: {exc}",
            traceparent=stored.record.get("traceparent"),
        )
        return None, stored
    if action:
        log.info(
            f"status read applied {action}",
            job_id=stored.record.get("id"),
            traceparent=stored.record.get("traceparent"),
        )
    return action, after


def _outputs(record: JobRecord) -> list[Any]:
    """Output object names: the record's own list, else those the result points at."""
    found: object = record.get("outputs")
    if isinstance(found, list):
        return found
    result: object = record.get("result")
    if not isinstance(result, dict):
        return []
    listed = result.get("outputs")
    if isinstance(listed, list):
        return listed
    return [v for v in result.values() if isinstance(v, str) and v.startswith("outputs/")]
