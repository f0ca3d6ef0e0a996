"""An uploaded object version becomes the job its route says (upload_routes, pure),
exactly once: the job id is derived from bucket, name and generation, so a redelivered
notification finds its job and an overwrite (a new generation) makes a new one.

Batches from uploads. A route's batch collects the jobs of one folder (or one metadata
value). With on_complete, the batch is open-ended until its closing object (`close_with`,
e.g. `reports/2026-12/_done`) arrives, so a first member that ends before the second
is uploaded cannot fire the callback. Each member writes, before its record, the seal
(the on_complete spec: the same bytes from every member), its own open marker and the
batch's hold (an open marker of the pseudo-member ``upload-batch-open``); then, if the
batch was already closed, it drops the hold again. The closing object writes
``workflows/closed/<batch>`` first, drops the hold, and creates the callback if no
member is left open. Whatever the order of the notifications (Pub/Sub does not order
them), the last of {every member's end, the closing object} creates the callback, once:
its id is deterministic and its write create-only (shared.features.workflows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared import records
from shared.errors import NotFound
from shared.features import workflow_graph as graph
from shared.features import workflows
from shared.logs import get_logger
from shared.pipelines import get_pipeline
from shared.seams import Context
from shared.submission import create as submission
from shared.submission.create import SubmittedJob
from shared.submission.upload_routes import (
    DEFAULT_PIPELINE,
    Route,
    Routes,
    Uploaded,
    object_reference,
)

log = get_logger(__name__)


@dataclass(frozen=True)
class Routed:
    """What one upload did: a job (created or found), a batch closed, or nothing (why)."""

    job: SubmittedJob | None = None
    route: str | None = None
    closed: str | None = None  # the batch its closing object closed
    callback: str | None = None  # the callback that closing created (or found)
    ignored: str | None = None  # why nothing was done
    taken: Mapping[str, Any] | None = None  # a feature took it (waits: a completion)

    def to_json(self) -> dict[str, Any]:
        if self.taken is not None:
            return dict(self.taken)
        if self.job is not None:
            return {**self.job.to_json(), "route": self.route}
        if self.closed is not None:
            return {"route": self.route, "closed": self.closed, "callback": self.callback}
        return {"ignored": True, "reason": self.ignored}


def route_upload(
    ctx: Context, routes: Routes, obj: Uploaded, now: datetime, traceparent: str | None = None
) -> Routed:
    """The job (or batch close) of one finalized upload, as the first matching route says;
    an upload no route takes follows `routes.unrouted`."""
    default_bucket = ctx.settings.uploads_bucket
    for hook in ctx.upload_hooks():  # a feature's object (waits: a waitpoint's token)
        taken = hook(ctx, obj)
        if taken is not None:
            return Routed(taken=taken)
    if routes.routes and not routes.notified(obj.bucket, obj.name, default_bucket):
        return Routed(ignored=f"no upload route covers gs://{obj.bucket}/{obj.name[:200]}")
    route = routes.route_for(obj, default_bucket)
    if route is not None and route.closes(obj, default_bucket):
        return _close(ctx, route, obj)
    if route is None and routes.unrouted == "ignore":
        log.info("upload matches no route: ignored", bucket=obj.bucket, object=obj.name)
        return Routed(ignored="the upload matches no route (unrouted: ignore)")
    return _create(ctx, route, obj, now, traceparent)


def _create(
    ctx: Context, route: Route | None, obj: Uploaded, now: datetime, traceparent: str | None
) -> Routed:
    source = {"bucket": obj.bucket, "name": obj.name, "generation": obj.generation}
    if route is None:
        pipeline, payload, batch_id = DEFAULT_PIPELINE, object_reference(obj), None
    else:
        pipeline, payload, batch_id = route.pipeline, route.build_payload(obj), route.batch_id(obj)
    with_callback = bool(route and route.batch and route.batch.on_complete and batch_id)
    name = route.name if route else None
    found = submission.find_upload_job(ctx.store, _job_id(obj))
    if found is not None:
        return Routed(found, route=name)
    try:
        get_pipeline(pipeline).check_payload(payload)
    except (ValueError, TypeError, LookupError) as exc:  # the pipeline's verdict
        reason = f"route {name or 'unrouted'}: payload rejected by {pipeline}: {str(exc)[:300]}"
        log.error("upload payload refused", object=obj.name, reason=reason)
        return Routed(route=name, ignored=reason)
    if with_callback and batch_id is not None and route and route.batch:
        _join_batch(ctx, batch_id, _job_id(obj), route.batch.on_complete or {})
    job = submission.create_upload_job(
        ctx,
        source=source,
        pipeline=pipeline,
        payload=payload,
        now=now,
        batch_id=batch_id,
        with_callback=with_callback,
        traceparent=traceparent,
    )
    return Routed(job, route=name)


def _job_id(obj: Uploaded) -> str:
    return records.upload_job_id(obj.bucket, obj.name, obj.generation)


def _join_batch(ctx: Context, batch_id: str, job_id: str, on_complete: dict[str, Any]) -> None:
    """Seal, own open marker and the hold, before the record; the hold goes again at
    once when the closing object came first."""
    store = ctx.store
    workflows.write_seal(store, batch_id, on_complete)
    workflows.write_markers(store, [graph.open_name(batch_id, job_id), graph.hold_name(batch_id)])
    if _is_closed(ctx, batch_id):
        store.delete_blob(graph.hold_name(batch_id))


def _is_closed(ctx: Context, batch_id: str) -> bool:
    try:
        ctx.store.read_blob(graph.closed_name(batch_id))
    except NotFound:
        return False
    return True


def _close(ctx: Context, route: Route, obj: Uploaded) -> Routed:
    """The closing object: mark the batch closed, drop its hold, and create the callback
    when no member is left open (else the last member's end creates it)."""
    batch_id = route.batch_id(obj)
    if batch_id is None:
        return Routed(ignored="the closing object names no batch (metadata field missing)")
    store = ctx.store
    workflows.write_markers(store, [graph.closed_name(batch_id)])
    store.delete_blob(graph.hold_name(batch_id))
    callback = None
    if not store.list_blobs(graph.open_prefix(batch_id), limit=1):
        callback = _callback_if_sealed(ctx, batch_id)
    log.info("upload batch closed", batch_id=batch_id, route=route.name, callback=callback)
    return Routed(route=route.name, closed=batch_id, callback=callback)


def _callback_if_sealed(ctx: Context, batch_id: str) -> str | None:
    """A batch closed before any member arrived has no seal: nothing to call back."""
    try:
        ctx.store.read_blob(graph.seal_name(batch_id))
    except NotFound:
        return None
    return workflows.create_callback(ctx, batch_id)
