"""Entry point `claim`: a Pub/Sub push (raw envelope or binary CloudEvent) rings
for a job id; the queue decides, claims and runs it.

An HTTP function (not cloud_event) so it can choose its answer:
- 200: decided (ran, finished, not claimable, someone else won, no record);
- 429 + Retry-After: no free slot here; Pub/Sub redelivers (with its retry
  policy's backoff) instead of anything waiting in this instance's memory;
- 400: malformed delivery. Pub/Sub treats it as a nack and redelivers until
  the subscription's dead_letter_policy moves it to the dead-letter topic;
- 405/413: wrong method / body too large; 503: storage outage; 500: a bug
  (both nacks: Pub/Sub redelivers).
"""

from __future__ import annotations

import flask

from shared.events import job_id_from_delivery, parse_pubsub
from shared.http import (
    Refusal,
    SettingsOnce,
    answer,
    entry_point,
    framework_errors,
    require_method,
)
from shared.logs import get_logger
from shared.tracing import TRACEPARENT_HEADER

log = get_logger("claim")
_settings = SettingsOnce("claim")
_settings.validate_now()
framework_errors()


@entry_point("claim")
def claim(request: flask.Request) -> flask.Response:
    """Handle one doorbell delivery."""
    require_method(request, ("POST",))
    settings = _settings.get()
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        raise Refusal(413, "body too large", f"the body is {declared} bytes; a doorbell is tiny")
    delivery = parse_pubsub(request)
    job_id = job_id_from_delivery(delivery)
    outcome = _settings.queue().handle_delivery(job_id)
    if outcome.busy:
        retry = str(max(1, round(outcome.retry_after_s or 1)))
        log.info(
            "no free slot; asked for a redelivery",
            job_id=job_id,
            delivery_attempt=delivery.delivery_attempt,
            traceparent=delivery.attributes.get(TRACEPARENT_HEADER),
        )
        return answer(429, outcome.to_json(), {"Retry-After": retry})
    return answer(200, outcome.to_json())
