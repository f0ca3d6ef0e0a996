"""GET /jobs/<id> and GET /batches/<id>: readable views, with the watchdog.

A status read applies the same stale_action as the sweep (shared.recovery), so
a client polling a job whose owner vanished gets it requeued or failed without
waiting for the scheduler. The watchdog is best effort on a read: if it cannot
write, the client still gets the record as read.

A record that cannot be decoded is answered with 409 (the stored state of the
resource conflicts with its schema; retrying will not help, a person must fix
it) and is never rewritten or deleted here.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from shared import job_queue, records
from shared.config import Settings
from shared.logs import log
from shared.records import InvalidInput
from shared.recovery import recover
from shared.storage import CorruptRecord, NotFound, Store, Stored

CORRUPT_STATUS = 409
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
    "error",
    "result",
    "rescues",
    "history",
)


class Ringer(Protocol):
    """The doorbell, as recovery needs it (requeue rings)."""

    def ring(self, job_id: str) -> None: ...


@dataclass(frozen=True)
class View:
    """An HTTP answer: status code and JSON body."""

    status: int
    body: dict[str, Any]


def job_view(
    store: Store, doorbell: Ringer, settings: Settings, job_id: str, now: datetime
) -> View:
    """The job's record as a readable view, after the read-path watchdog."""
    try:
        records.validate_job_id(job_id)
    except records.InvalidInput as exc:
        return View(400, {"error": "invalid job id", "reason": exc.reason})
    try:
        stored = store.read(job_id)
    except NotFound:
        return View(404, {"error": "not found", "reason": f"no job {job_id!r}"})
    except CorruptRecord as exc:
        log("ERROR", "record unreadable; left for a person", job_id=job_id, reason=exc.reason)
        return View(CORRUPT_STATUS, _unreadable(job_id, exc.reason))
    action, stored = _watchdog(store, doorbell, settings, stored, now)
    body = render_job(stored.record, settings)
    if action:
        body["watchdog"] = action
    return View(200, body)


def batch_view(
    store: Store, doorbell: Ringer, settings: Settings, batch_id: str, now: datetime
) -> View:
    """Every member of a batch (O(batch): its markers, then its records in parallel)."""
    try:
        records.validate_batch_id(batch_id)
    except records.InvalidInput as exc:
        return View(400, {"error": "invalid batch id", "reason": exc.reason})
    ids = store.list_batch(batch_id, limit=BATCH_LIST_LIMIT)
    if not ids:
        return View(404, {"error": "not found", "reason": f"no batch {batch_id!r}"})
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(ids))) as pool:
        found = list(pool.map(lambda i: _member(store, doorbell, settings, i, now), ids))
    # a marker is only an index: the record decides (a stray marker is not membership)
    jobs = [j for j in found if j is not None and j.get("batch_id", batch_id) == batch_id]
    for j in jobs:
        j.pop("batch_id", None)
    if not jobs:
        return View(404, {"error": "not found", "reason": f"no batch {batch_id!r}"})
    counts = Counter(str(j["status"]) for j in jobs)
    done = all(j["status"] in job_queue.TERMINAL_STATUSES for j in jobs)
    return View(
        200,
        {
            "batch_id": batch_id,
            "total": len(jobs),
            "counts": dict(sorted(counts.items())),
            "done": done,
            "truncated": len(ids) >= BATCH_LIST_LIMIT,
            "jobs": jobs,
        },
    )


def render_job(record: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The public view of a record; tolerant of hand-edited field types."""
    body: dict[str, Any] = {"id": record.get("id")}
    body.update({k: record.get(k) for k in _VIEW_FIELDS})
    body["max_attempts"] = job_queue.max_attempts_of(record, settings.max_attempts)
    body["outputs"] = _outputs(record)
    body["status_url"] = f"/jobs/{record.get('id')}"
    return body


def _member(
    store: Store, doorbell: Ringer, settings: Settings, job_id: str, now: datetime
) -> dict[str, Any] | None:
    try:
        stored = store.read(job_id)
    except NotFound:  # marker written, record not (yet): the sweep repairs or it lands
        return {"id": job_id, "status": "missing", "status_url": f"/jobs/{job_id}"}
    except InvalidInput:  # a foreign object under batches/<id>/: not a member
        log("WARNING", "foreign object in a batch skipped; remove it by hand", name=job_id)
        return None
    except CorruptRecord as exc:
        return {
            "id": job_id,
            "status": "unreadable",
            "reason": exc.reason,
            "status_url": f"/jobs/{job_id}",
        }
    _action, stored = _watchdog(store, doorbell, settings, stored, now)
    rec = stored.record
    out = {k: rec.get(k) for k in ("id", "pipeline", "status", "stage", "attempts", "updated_at")}
    out["batch_id"] = rec.get("batch_id")  # checked against the batch, then dropped
    out["status_url"] = f"/jobs/{job_id}"
    if rec.get("error") is not None:
        out["error"] = rec.get("error")
    return out


def _watchdog(
    store: Store, doorbell: Ringer, settings: Settings, stored: Stored, now: datetime
) -> tuple[str | None, Stored]:
    """recover() the record if it is stale; on any failure show it as read."""
    try:
        action, after = recover(store, doorbell, stored, settings, now)
    except Exception as exc:  # best effort: a read must answer even if the write fails
        log(
            "WARNING",
            "status watchdog could not act",
            job_id=stored.record.get("id"),
            error=f"{type(exc).__name__}: {exc}",
        )
        return None, stored
    if action:
        log("INFO", f"status read applied {action}", job_id=stored.record.get("id"))
    return action, after


def _outputs(record: dict[str, Any]) -> list[Any]:
    """Output object names: the record's own list, else those the result points at."""
    found = record.get("outputs")
    if isinstance(found, list):
        return found
    result = record.get("result")
    if not isinstance(result, dict):
        return []
    listed = result.get("outputs")
    if isinstance(listed, list):
        return listed
    return [v for v in result.values() if isinstance(v, str) and v.startswith("outputs/")]


def _unreadable(job_id: str, reason: str) -> dict[str, Any]:
    return {
        "error": "record unreadable",
        "reason": f"the record of job {job_id!r} cannot be read ({reason}); it is left "
        "untouched for a person to repair",
        "id": job_id,
    }
