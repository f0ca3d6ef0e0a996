"""POST /waitpoints/<token>: complete a waitpoint (docs/waiting.md), and POST
/jobs/<id>/complete, the operators' completion of the waitpoint a job is parked on.

The caller's proof is the token itself: it names the job and the waitpoint and carries an
HMAC-SHA256 tag made with the deployment's key (shared.features.waits.rules), checked in
constant time, so only whoever was handed the token (a provider's callback URL, a person's
link) can complete that waitpoint, and a token cannot be guessed or altered. That lets a
provider that cannot mint a Google ID token call the waitpoints function, which is the one
function terraform may open to every caller (terraform/waitpoints.tf); callers inside the
project may instead call the same route on the admin function, where Cloud Run's IAM
check admits only the operators and records who they are (shared.http.identity).

Answers: 200 resumed (this completion released the job), 202 recorded (it came before
the job waited: the job resumes when it does), 409 already completed (another completion
or the timeout came first; the first wins), 410 gone (the job ended or no longer
exists), 404 for a token this deployment did not sign, 400 for data that is not JSON of
at most 16 KiB. Nothing is written by a refusal.
"""

from __future__ import annotations

from typing import Any

import flask

from shared.errors import IllegalTransition, InvalidInput
from shared.http.edge import Refusal, answer, author, read_body, require_method
from shared.queue import Queue
from shared.submission.parse import decode_body

_STATUS = {"resumed": 200, "recorded": 202}
ROUTE = "waitpoints"


def waitpoint_token(path: str) -> str | None:
    """The token of a /waitpoints/<token> path, or None for any other path."""
    head, _, rest = path.strip("/").partition("/")
    return rest if head == ROUTE and rest and "/" not in rest else None


def complete_waitpoint(queue: Queue, request: flask.Request, token: str) -> flask.Response:
    """POST /waitpoints/<token> with an optional JSON body: the completion's data."""
    require_method(request, ("POST",))
    data = _data(request, queue)
    try:
        done = queue.complete_waitpoint(
            token, data, by=author(request, "waitpoint", queue.settings)
        )
    except InvalidInput as exc:
        if exc.what == "token":  # forged, altered or another deployment's: no such thing
            raise Refusal(404, "not found", exc.reason) from None
        raise
    return _answer(done.state, done.to_json(), done.detail)


def complete_job(queue: Queue, request: flask.Request, job_id: str) -> flask.Response:
    """POST /jobs/<id>/complete {"data": ...}: complete the waitpoint the job waits for
    (an operator); 409 when it waits for none."""
    body = _data(request, queue)
    if body is not None and (not isinstance(body, dict) or set(body) - {"data"}):
        raise InvalidInput('the body must be {"data": <any JSON>} or empty', "request")
    data = body.get("data") if isinstance(body, dict) else None
    try:
        done = queue.complete_job(job_id, data, by=author(request, "http", queue.settings))
    except IllegalTransition as exc:  # it waits for no waitpoint (or ended)
        raise Refusal(409, "not waiting", str(exc)) from None
    return _answer(done.state, done.to_json(), done.detail)


def _answer(state: str, body: dict[str, Any], detail: str) -> flask.Response:
    if state in _STATUS:
        return answer(_STATUS[state], body)
    if state == "already":
        return answer(409, {"error": "already completed", "reason": detail, **body})
    return answer(410, {"error": "gone", "reason": detail, **body})


def _data(request: flask.Request, queue: Queue) -> Any:
    """The JSON body (None when empty); 415 for another media type."""
    raw = read_body(request, queue.settings.max_body_bytes)
    if not raw.strip():
        return None
    if (request.mimetype or "").lower() != "application/json":
        raise Refusal(415, "unsupported media type", "the body must be application/json")
    return decode_body(raw)
