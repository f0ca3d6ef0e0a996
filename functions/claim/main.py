"""Entry point `claim`: a Pub/Sub push (raw envelope or binary CloudEvent) rings
for a job id; the runner decides, claims and runs it.

An HTTP function (not cloud_event) so it can choose its answer:
- 200: decided (ran, finished, not claimable, someone else won, no record);
- 429 + Retry-After: no free slot here; Pub/Sub redelivers (with its retry
  policy's backoff) instead of anything waiting in this instance's memory;
- 400: malformed delivery. Pub/Sub treats it as a nack and redelivers until
  the subscription's dead_letter_policy moves it to the dead-letter topic;
- 405/413: wrong method / body too large; 500: unexpected error (logged).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import flask

from shared import logs
from shared.config import ConfigError, Settings
from shared.doorbell import get_doorbell
from shared.events import BadEvent, job_id_from_delivery, parse_pubsub
from shared.logs import log
from shared.records import InvalidInput
from shared.runner import handle_delivery
from shared.storage import get_store

_settings: Settings | None = None
_settings_error: str | None = None
_lock = threading.Lock()


def _load_settings() -> Settings | None:
    """Settings, validated once per process; a bad variable is logged once, clearly."""
    global _settings, _settings_error
    with _lock:
        if _settings is None and _settings_error is None:
            try:
                _settings = Settings.from_env()
                logs.configure(_settings.log_level)
            except ConfigError as exc:
                _settings_error = str(exc)
                log("ERROR", "claim is misconfigured", reason=_settings_error)
        return _settings


with contextlib.suppress(Exception):  # validate at import: a bad deployment logs at once
    _load_settings()


def _answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    response = flask.jsonify(body)
    response.status_code = status
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def _refuse(status: int, error: str, reason: str, headers: dict[str, str] | None = None) -> Any:
    return _answer(status, {"error": error, "reason": reason}, headers)


def claim(request: flask.Request) -> Any:
    """Handle one doorbell delivery."""
    if request.method != "POST":
        return _refuse(
            405,
            "method not allowed",
            f"{request.method} is not allowed; use POST",
            {"Allow": "POST"},
        )
    settings = _load_settings()
    if settings is None:
        return _refuse(500, "misconfigured", _settings_error or "settings are invalid")
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        return _refuse(413, "body too large", f"the body is {declared} bytes; a doorbell is tiny")
    try:
        delivery = parse_pubsub(request)
        job_id = job_id_from_delivery(delivery)
    except BadEvent as exc:
        log("WARNING", "malformed delivery refused", reason=exc.reason)
        return _refuse(400, "bad event", exc.reason)
    try:
        outcome = handle_delivery(job_id, get_store(settings), get_doorbell(settings), settings)
    except InvalidInput as exc:
        return _refuse(400, "bad event", exc.reason)
    except Exception as exc:  # storage outage or a bug: 500, Pub/Sub redelivers
        log(
            "ERROR",
            "claim failed",
            job_id=job_id,
            error=f"{type(exc).__name__}: {exc}",
            message_id=delivery.message_id,
        )
        return _refuse(500, "internal error", "the job could not be handled; it will be retried")
    if outcome.busy:
        retry = str(max(1, round(outcome.retry_after_s or 1)))
        log(
            "INFO",
            "no free slot; asked for a redelivery",
            job_id=job_id,
            delivery_attempt=delivery.delivery_attempt,
        )
        return _answer(429, outcome.to_json(), {"Retry-After": retry})
    return _answer(200, outcome.to_json())
