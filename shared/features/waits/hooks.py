"""The waits feature at the feature table's seams: a job's view, the sweep's check of a
parked record and its pass over kept completions and stopped fan-outs, the time index's
wake (called by shared.features.delayed), and the upload that completes a waitpoint.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import timing
from shared.errors import CorruptRecord, InvalidInput, NotFound, ReclaimError, StorageError
from shared.features.waits import fanout, release, rules
from shared.hints import index_board
from shared.logs import get_logger
from shared.seams import Settled

if TYPE_CHECKING:
    from collections.abc import Mapping

    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import BlobInfo, Stored

log = get_logger(__name__)

UPLOAD_METADATA = "reclaim-waitpoint"
"""The custom metadata key of an uploaded object that completes a waitpoint: its token
(`gcloud storage cp --custom-metadata=reclaim-waitpoint=<token> ...`)."""
EARLY_KEEP = timedelta(days=7)
"""How long a completion kept for a waitpoint its job never waited on stays (the stage
may still wait on it; after this its job has surely moved on)."""


def view(ctx: Context, record: JobRecord) -> dict[str, Any]:
    """A job's view: what it waits for (with how many children are left), the last
    wait's outcome, its parent or its children."""
    park = record.get("park")
    left = None
    if rules.is_parked(record) and isinstance(park, dict) and park.get("kind") == "children":
        left = fanout.remaining(ctx, str(park.get("fanout")))
    return rules.view(record, left)


def sweep_check(ctx: Context, stored: Stored, now: datetime) -> Settled | None:
    """A parked record the sweep reads (a small index, or its marker's look came): its
    time passed (the time index's release was lost) wakes it; a kept completion or
    children all ended (a crash cut the release short) release it; else its marker is
    marked for the next look."""
    record = stored.record
    if not rules.is_parked(record):
        return None
    park = record.get("park") or {}
    if release.is_due(record, now) and release.wake(ctx, stored, now):
        return Settled("resumed")
    if park.get("kind") == "token" and release.release_early(ctx, stored):
        return Settled("resumed")
    fan = str(park.get("fanout"))
    if (
        park.get("kind") == "children"
        and not ctx.store.list_blobs(rules.open_prefix(fan), limit=1)
        and fanout.release_parent(ctx, str(record["id"]), fan, stored=stored)
    ):
        return Settled("resumed")
    _mark_once(ctx, record, now)
    return Settled(None, record)


_MARKED: dict[str, datetime] = {}
"""park (job id and since) -> the due this process marked it with: in a small index the
sweep reads every record each run (shared.sweep_plan), and a parked one's marker needs a
mark only once per look-ahead, not a write each run."""
_MARKED_MAX = 100_000


def _mark_once(ctx: Context, record: JobRecord, now: datetime) -> None:
    park = record.get("park") or {}
    key = f"{record.get('id')}/{park.get('since')}"
    marked = _MARKED.get(key)
    if marked is not None and marked > now:
        return
    due = release.park_due(record, now)
    if release.mark(ctx, record, due):
        if len(_MARKED) >= _MARKED_MAX:
            _MARKED.clear()
        _MARKED[key] = due


def wake_from_index(ctx: Context, stored: Stored, name: str, now: datetime) -> str | None:
    """The time index found a job's entry (shared.features.delayed, Feature.wakes): None
    when it is not a park's (a delayed job, a child waiting for its parents); "resumed"
    when its time came
    and this released it, "later" when it is not due yet, "stale" when the entry is not
    its park's (it was released, or parked again): the caller drops it."""
    record = stored.record
    if not rules.is_parked(record):
        waited = record.get("waited")  # released already (the release's own delete raced)
        until = timing.read_time(waited.get("until")) if isinstance(waited, dict) else None
        mine = until is not None and timing.scheduled_name(str(record["id"]), until) == name
        return "stale" if mine else None
    wake = rules.wake_at(record)
    if wake is None or timing.scheduled_name(str(record["id"]), wake) != name:
        return "stale"
    if wake > now:
        return "later"
    return "resumed" if release.wake(ctx, stored, now) else "stale"


def sweep_pass(ctx: Context, now: datetime, _pending: frozenset[str]) -> dict[str, int]:
    """One listing of waits/repair/ (none when the index board says it is empty:
    shared.hints.index_board): kept completions whose job parked without seeing them
    (a crash) release it, stopped fan-outs with children still open get a page cancelled.
    A failure is only logged (the next run looks again)."""
    resumed = 0
    try:  # nothing ever kept (the sweep's index board): no listing
        listed = index_board.sweep_list(ctx.store, rules.REPAIR_ROOT, ctx.settings.sweep_max_jobs)
    except ReclaimError as exc:
        log.warning("waits sweep failed", error=f"{type(exc).__name__}: {exc}")
        return {}
    for info in listed:
        try:
            if info.name.startswith(rules.STOP_ROOT):
                fanout.sweep_stop(ctx, info)
                continue
            parsed = rules.parse_done_name(info.name)
            if parsed is not None:
                resumed += _settle_early(ctx, info, *parsed, now)
        except (StorageError, InvalidInput) as exc:
            log.warning("left for the next sweep", name=info.name, error=str(exc))
    return {"resumed": resumed}


def _settle_early(ctx: Context, info: BlobInfo, job_id: str, ref: str, now: datetime) -> int:
    try:
        stored = ctx.store.read(job_id)
    except NotFound:
        ctx.store.delete_blob(info.name)
        return 0
    except CorruptRecord:
        return 0
    record = stored.record
    if rules.parked_on(record, "token", ref):
        return 1 if release.release_early(ctx, stored) else 0
    waited = record.get("waited")
    settled = isinstance(waited, dict) and waited.get("ref") == ref
    ended = record.get("status") in ("done", "failed", "cancelled")
    old = info.created is not None and now - info.created > EARLY_KEEP
    if settled or ended or old:
        ctx.store.delete_blob(info.name)
    return 0


def upload(ctx: Context, obj: Any) -> Mapping[str, Any] | None:
    """An uploaded object whose custom metadata carries a waitpoint token completes that
    waitpoint, with the object's reference as the data (a redelivered notification
    finds it completed already). None for every other object: the routes take it."""
    metadata = getattr(obj, "metadata", None) or {}
    token = metadata.get(UPLOAD_METADATA)
    if not token:
        return None
    data = {
        "bucket": obj.bucket,
        "name": obj.name,
        "generation": obj.generation,
        "content_type": getattr(obj, "content_type", None),
        "size": getattr(obj, "size", None),
    }
    by = f"upload gs://{obj.bucket}/{obj.name}#{obj.generation}"
    try:
        done = release.complete_token(ctx, token, data, by[:200])
    except InvalidInput as exc:
        log.warning("upload names no waitpoint of ours", object=obj.name, reason=exc.reason)
        return {"ignored": True, "reason": f"{UPLOAD_METADATA}: {exc.reason}"}
    log.info("upload completed a waitpoint", job_id=done.job_id, state=done.state, object=obj.name)
    return {"waitpoint": done.to_json()}
