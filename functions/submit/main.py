"""Entry points `submit` (the HTTP API) and `submit_upload` (GCS notifications).

Thin on purpose: routing, limits and error shapes live here; validation and
job creation in shared.submission, views in shared.status, event parsing in
shared.events. Every answer is JSON; every refusal is {"error", "reason"}.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import flask

import shared
from shared.doorbell import get_doorbell
from shared.events import BadEvent, IgnoredEvent, upload_from_http
from shared.http import (
    Refusal,
    SettingsOnce,
    answer,
    json_framework_errors,
    read_body,
    refuse,
    require_method,
)
from shared.logs import log
from shared.status import batch_view, job_view
from shared.storage import get_store
from shared.submission import (
    SubmitError,
    create_upload_job,
    decode_body,
    parse_submission,
)
from shared.submission import (
    submit as submit_jobs,
)

_JSON_TYPES = ("application/json",)
_settings = SettingsOnce("submit")
_settings.validate_now()
json_framework_errors()


def _now() -> datetime:
    return datetime.now(UTC)


@cache
def _openapi() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document, shipped in shared/ (the archive carries it)."""
    doc: dict[str, Any] = json.loads((Path(shared.__file__).parent / "openapi.json").read_text())
    return doc


def _require_json(request: flask.Request) -> None:
    kind = (request.mimetype or "").lower()
    if kind not in _JSON_TYPES:
        shown = request.content_type or "none"
        raise Refusal(
            415, "unsupported media type", f"the body must be application/json, not {shown}"
        )


# ---------------------------------------------------------------- submit


def submit(request: flask.Request) -> Any:
    """The HTTP API: POST /jobs, GET /jobs/<id>, GET /batches/<id>, GET /healthz,
    GET /openapi.json (the document describing all of them)."""
    try:
        return _route(request)
    except Refusal as exc:
        return exc.answer()
    except SubmitError as exc:
        return answer(exc.status, exc.body())
    except Exception as exc:  # a storage or publisher outage: tell the client to retry
        log("ERROR", "submit failed", path=request.path, error=f"{type(exc).__name__}: {exc}")
        return refuse(
            503,
            "unavailable",
            "storage is unavailable right now; retry later",
            {"Retry-After": "5"},
        )


def _route(request: flask.Request) -> Any:
    path = request.path.rstrip("/") or "/"
    parts = path.lstrip("/").split("/", 1)
    head, rest = parts[0], (parts[1] if len(parts) > 1 else None)
    if path == "/healthz":
        require_method(request, ("GET",))
        return answer(200, {"ok": True})
    if path == "/openapi.json":
        require_method(request, ("GET",))
        return answer(200, _openapi())
    if head == "jobs" and rest is None:
        require_method(request, ("POST",))
        return _post_jobs(request)
    if head in ("jobs", "batches") and rest:
        require_method(request, ("GET",))
        settings = _settings.get()
        view = job_view if head == "jobs" else batch_view
        found = view(get_store(settings), get_doorbell(settings), settings, rest, _now())
        return answer(found.status, found.body)
    raise Refusal(
        404,
        "not found",
        f"no route {path}; try POST /jobs, GET /jobs/<id>, GET /batches/<id>, GET /openapi.json",
    )


def _post_jobs(request: flask.Request) -> Any:
    settings = _settings.get()
    _require_json(request)
    raw = read_body(request, settings.max_body_bytes)
    if not raw.strip():
        raise Refusal(400, "invalid request", "the body is empty; send a job as JSON")
    submission = parse_submission(decode_body(raw), settings)
    result = submit_jobs(get_store(settings), get_doorbell(settings), submission, _now())
    for job in result.body.get("jobs", [result.body]):
        log(
            "INFO",
            "job created" if job["created"] else "job already existed",
            job_id=job["id"],
            batch_id=result.body.get("batch_id"),
        )
    return answer(result.status, result.body)


# ---------------------------------------------------------------- submit_upload


def submit_upload(request: flask.Request) -> Any:
    """A finalized upload (push envelope or CloudEvent) becomes an upload-digest job.

    Pub/Sub push acks 2xx: 202 created, 200 already there or ignored; 400 for
    a malformed event (dead-lettered after retries); 503 on an outage (retried).
    """
    try:
        require_method(request, ("POST",))
        settings = _settings.get()
        body = read_body(request, settings.max_body_bytes)
        obj = upload_from_http(request.headers, body)
    except Refusal as exc:
        return exc.answer()
    except BadEvent as exc:
        log("WARNING", "malformed upload event", reason=exc.reason)
        return refuse(400, "bad event", exc.reason)
    except IgnoredEvent as exc:
        log("INFO", "upload event ignored", reason=exc.reason)
        return answer(200, {"ignored": True, "reason": exc.reason})
    if obj.bucket == settings.records_bucket:  # never digest our own records: a loop
        log("WARNING", "event from the records bucket ignored", bucket=obj.bucket)
        return answer(200, {"ignored": True, "reason": "object is in the records bucket"})
    try:
        outcome = create_upload_job(
            get_store(settings),
            get_doorbell(settings),
            bucket=obj.bucket,
            name=obj.name,
            generation=obj.generation,
            content_type=obj.content_type,
            size=obj.size,
            now=_now(),
        )
    except SubmitError as exc:
        log("ERROR", "upload job not created", reason=exc.reason)
        return answer(exc.status, exc.body())
    except Exception as exc:  # outage: not acked, so Pub/Sub redelivers
        log("ERROR", "submit_upload failed", error=f"{type(exc).__name__}: {exc}")
        return refuse(503, "unavailable", "storage is unavailable right now; retry later")
    log(
        "INFO",
        "upload job created" if outcome.created else "upload job already existed",
        job_id=outcome.job_id,
        bucket=obj.bucket,
        object=obj.name,
        generation=obj.generation,
    )
    return answer(202 if outcome.created else 200, outcome.view())
