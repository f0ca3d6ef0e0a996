"""Entry point `claim`: a Pub/Sub push (raw envelope or binary CloudEvent) rings
for a job id; the queue decides, claims and runs it.

An HTTP function (not cloud_event) so it can choose its answer:
- 200: decided (ran, finished, not claimable, someone else won, no record, or
  handed back while the instance shuts down: its doorbell was rung again, so a
  live instance gets the job without waiting for Pub/Sub's backoff);
- 503 + Retry-After: the job is not settled and no doorbell was rung for it (a
  hand-back whose ring failed; a job whose pipeline or version this revision lacks,
  left for a revision that has it: shared.resume), or storage is down; Pub/Sub
  redelivers;
- 429 + Retry-After: no free slot here. Cloud Run never sends an instance more
  requests than its concurrency (= THREADS = RECLAIM_MAX_CONCURRENT), so only a
  direct caller or a misconfiguration meets it; nothing waits in memory;
- 400: malformed delivery. Pub/Sub treats it as a nack and redelivers until
  the subscription's dead_letter_policy moves it to the dead-letter topic;
- 405/413: wrong method / body too large; 500: a bug (a nack too).
"""

from __future__ import annotations

import flask

from shared.claim.drain import Arrival
from shared.claim.shutdown import SHUTDOWN
from shared.events import job_id_from_delivery, parse_pubsub
from shared.http.edge import Refusal, answer, entry_point, framework_errors, require_method
from shared.http.once import SettingsOnce
from shared.logs import get_logger
from shared.tracing import TRACEPARENT_HEADER

log = get_logger("claim")
_settings = SettingsOnce("claim")
_settings.validate_now()
framework_errors()
REDELIVER_AFTER_S = 1


@entry_point("claim")
def claim(request: flask.Request) -> flask.Response:
    """Handle one doorbell delivery."""
    require_method(request, ("POST",))
    SHUTDOWN.watch_gunicorn()  # in the worker that serves this request (shared.claim.shutdown)
    settings = _settings.get()
    declared = request.content_length
    if declared is not None and declared > settings.max_body_bytes:
        raise Refusal(413, "body too large", f"the body is {declared} bytes; a doorbell is tiny")
    delivery = parse_pubsub(request)
    job_id = job_id_from_delivery(delivery)
    arrival = Arrival(delivery.delivery_attempt, delivery.published_at)
    outcome = _settings.queue().handle_delivery(job_id, arrival=arrival)
    if outcome.busy:
        retry = str(max(1, round(outcome.retry_after_s or 1)))
        log.info(
            "no free slot; asked for a redelivery",
            job_id=job_id,
            delivery_attempt=delivery.delivery_attempt,
            traceparent=delivery.attributes.get(TRACEPARENT_HEADER),
        )
        return answer(429, outcome.to_json(), {"Retry-After": retry})
    if outcome.redeliver:
        return answer(503, outcome.to_json(), {"Retry-After": str(REDELIVER_AFTER_S)})
    return answer(200, outcome.to_json())
