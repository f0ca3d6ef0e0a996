"""Entry points `submit` (the HTTP API) and `submit_upload` (GCS notifications).

Thin on purpose: routing, limits and the media type live here; validation, job
creation and views behind the queue (shared.queue), event parsing in
shared.events, and the error answers in shared.http. Every answer is JSON;
every refusal is {"error", "reason"}.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import flask

import shared
import shared.errors
from shared.events import upload_from_http
from shared.http import routes as api_routes
from shared.http.edge import (
    Refusal,
    answer,
    entry_point,
    framework_errors,
    read_body,
    require_method,
)
from shared.http.once import SettingsOnce
from shared.logs import get_logger
from shared.queue import parse_submission
from shared.submission.parse import decode_body
from shared.tracing import TRACEPARENT_HEADER

log = get_logger("submit")
_JSON_TYPES = ("application/json",)
# Not /healthz: Cloud Run reserves some paths ending in "z" and answers them itself, so
# such a request never reaches the function ("Reserved URL paths",
# https://cloud.google.com/run/docs/known-issues). /healthz is an unknown route here.
HEALTH_PATH = "/health"
OPENAPI_PATH = "/openapi.json"
_settings = SettingsOnce("submit")
_settings.validate_now(routes=True)
framework_errors()


# ---------------------------------------------------------------- submit


@entry_point("submit", is_wait=api_routes.is_wait)
def submit(request: flask.Request) -> flask.Response:
    """The HTTP API (docs/api.md): submit, read, list and wait for jobs, batches and their
    progress, the cron schedules, GET /health and GET /openapi.json (the document of the
    whole API). The operator routes (cancel, retry, bulk, pause, resume) are the admin
    function's (functions/admin): here they answer 404 naming it."""
    path = request.path.rstrip("/") or "/"
    parts = path.lstrip("/").split("/", 1)
    head, rest = parts[0], (parts[1] if len(parts) > 1 else None)
    if path == HEALTH_PATH:
        require_method(request, ("GET",))
        return answer(200, {"ok": True})
    if path == OPENAPI_PATH:
        require_method(request, ("GET",))
        return answer(200, _openapi())
    if head == "jobs" and rest is None:
        require_method(request, ("GET", "POST"))
        if request.method == "GET":
            return api_routes.list_jobs(_settings.queue(), request)
        return _post_jobs(request)
    if api_routes.operator_route(path) is not None:  # the admin function's, not ours
        raise Refusal(404, "operator route", f"no route {path} here: {api_routes.ADMIN_POINTER}")
    if head == "jobs" and rest:
        require_method(request, ("GET",))
        job_id, _, part = rest.partition("/")
        if part == "outputs" or part.startswith("outputs/"):  # shared.http.outputs
            return api_routes.job_part(_settings.queue(), request, job_id, part)
        return api_routes.get_job(_settings.queue(), request, rest)
    if head == "batches" and rest and rest.endswith("/progress"):
        require_method(request, ("GET",))
        return api_routes.batch_progress_of(_settings.queue(), rest.removesuffix("/progress"))
    if head == "batches" and rest:
        require_method(request, ("GET",))
        return answer(200, _settings.queue().get_batch(rest).to_json())
    if head == "schedules":  # time: cron ticks and the schedules' view
        return _schedules(request, rest)
    raise Refusal(
        404,
        "not found",
        f"no route {path}; try POST /jobs, GET /jobs/<id>, GET /batches/<id>, GET {OPENAPI_PATH}",
    )


@cache
def _openapi() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document, shipped in shared/ (the archive carries it)."""
    doc: dict[str, Any] = json.loads((Path(shared.__file__).parent / "openapi.json").read_text())
    return doc


def _post_jobs(request: flask.Request) -> flask.Response:
    settings = _settings.get()
    _require_json(request)
    raw = read_body(request, settings.max_body_bytes)
    if not raw.strip():
        raise Refusal(400, "invalid request", "the body is empty; send a job as JSON")
    result = _settings.queue().submit(
        parse_submission(decode_body(raw), settings),
        traceparent=request.headers.get(TRACEPARENT_HEADER),
    )
    return answer(202 if result.created else 200, result.to_json())


def _schedules(request: flask.Request, rest: str | None) -> flask.Response:
    """GET /schedules (each with its last and next run); POST /schedules/<name>/tick (Cloud
    Scheduler, or `make dev`'s ticker, with the X-CloudScheduler-ScheduleTime header)."""
    from shared.cron import schedule_view, ticks

    queue = _settings.queue()
    if rest is None:
        require_method(request, ("GET",))
        return answer(200, schedule_view.overview(queue.store, queue.clock()))
    name, _, action = rest.partition("/")
    if action != "tick":
        raise Refusal(404, "not found", "try GET /schedules or POST /schedules/<name>/tick")
    require_method(request, ("POST",))
    schedule = schedule_view.find(name)
    if schedule is None:
        raise Refusal(404, "not found", f"no schedule named {name[:60]!r}")
    if isinstance(schedule, str):  # its entry is bad; the other schedules still tick
        raise Refusal(400, "invalid schedule", schedule)
    try:
        header = request.headers.get(ticks.SCHEDULE_TIME_HEADER)
        tick = ticks.parse_tick_time(schedule, header, queue.clock())
        done = ticks.fire(queue.ctx, schedule, tick, queue.clock())
    except shared.errors.InvalidInput as exc:
        raise Refusal(400, "invalid request", exc.reason) from None
    return answer(202 if done.created else 200, done.to_json())


def _require_json(request: flask.Request) -> None:
    kind = (request.mimetype or "").lower()
    if kind not in _JSON_TYPES:
        shown = request.content_type or "none"
        raise Refusal(
            415, "unsupported media type", f"the body must be application/json, not {shown}"
        )


# ---------------------------------------------------------------- submit_upload


@entry_point("submit_upload")
def submit_upload(request: flask.Request) -> flask.Response:
    """A finalized upload (push envelope or CloudEvent) becomes the job its route says
    (shared.submission.upload_routes; no routes file: an upload-digest job).

    Pub/Sub push acks 2xx: 202 created, 200 already there, a batch closed, or ignored;
    400 for a malformed event (dead-lettered after retries); 500 misconfigured for a
    bad routes file; 503 on an outage (retried).
    """
    require_method(request, ("POST",))
    settings = _settings.get()
    upload = upload_from_http(request.headers, read_body(request, settings.max_body_bytes))
    if upload.bucket in settings.records_buckets:  # never digest our own records: a loop
        log.warning("event from the records bucket ignored", bucket=upload.bucket)
        return answer(200, {"ignored": True, "reason": "object is in the records bucket"})
    done = _settings.queue().submit_upload(
        upload, _settings.routes(), traceparent=request.headers.get(TRACEPARENT_HEADER)
    )
    job = done.job
    where: dict[str, Any] = {
        "bucket": upload.bucket,
        "object": upload.name,
        "generation": upload.generation,
    }
    if job is None:
        log.info(
            "upload batch closed" if done.closed else "upload ignored",
            **where,
            route=done.route,
            reason=done.ignored,
            batch_id=done.closed,
        )
        return answer(200, done.to_json())
    log.info(
        "upload job created" if job.created else "upload job already existed",
        job_id=job.job_id,
        traceparent=job.traceparent,
        route=done.route,
        batch_id=job.batch_id,
        **where,
    )
    return answer(202 if job.created else 200, done.to_json())
