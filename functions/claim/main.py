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

from typing import Any

import flask

from shared.doorbell import get_doorbell
from shared.events import BadEvent, job_id_from_delivery, parse_pubsub
from shared.http import Refusal, SettingsOnce, answer, json_framework_errors, refuse, require_method
from shared.logs import log
from shared.records import InvalidInput
from shared.runner import handle_delivery
from shared.storage import get_store

_settings = SettingsOnce("claim")
_settings.validate_now()
json_framework_errors()


def claim(request: flask.Request) -> Any:
    """Handle one doorbell delivery."""
    try:
        require_method(request, ("POST",))
        settings = _settings.get()
    except Refusal as exc:
        return exc.answer()
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        return refuse(413, "body too large", f"the body is {declared} bytes; a doorbell is tiny")
    try:
        delivery = parse_pubsub(request)
        job_id = job_id_from_delivery(delivery)
    except BadEvent as exc:
        log("WARNING", "malformed delivery refused", reason=exc.reason)
        return refuse(400, "bad event", exc.reason)
    try:
        outcome = handle_delivery(job_id, get_store(settings), get_doorbell(settings), settings)
    except InvalidInput as exc:
        return refuse(400, "bad event", exc.reason)
    except Exception as exc:  # storage outage or a bug: 500, Pub/Sub redelivers
        log(
            "ERROR",
            "claim failed",
            job_id=job_id,
            error=f"{type(exc).__name__}: {exc}",
            message_id=delivery.message_id,
        )
        return refuse(500, "internal error", "the job could not be handled; it will be retried")
    if outcome.busy:
        retry = str(max(1, round(outcome.retry_after_s or 1)))
        log(
            "INFO",
            "no free slot; asked for a redelivery",
            job_id=job_id,
            delivery_attempt=delivery.delivery_attempt,
        )
        return answer(429, outcome.to_json(), {"Retry-After": retry})
    return answer(200, outcome.to_json())
