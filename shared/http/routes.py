"""The job lifecycle over HTTP, beside submit and status: a job's cancel and retry, bulk
cancel and retry with a count first, listing by page, a waiting status read, a job's
outputs and a batch's progress (docs/api.md). Each handler validates, calls the queue,
and answers JSON; the refusals are shared.http.edge's.

The operator routes (a job's cancel and retry, bulk cancel and retry, a pipeline's pause
and resume) are served by the admin function alone (functions/admin), whose invokers are
the operators; submit refuses them with a 404 naming it (docs/api.md, "Operator routes").
Each takes a JSON body only, and never a browser's cross-site request
(shared.http.crosssite).
"""

from __future__ import annotations

from typing import Any

import flask

from shared import bulk, params
from shared.errors import IllegalTransition, InvalidInput
from shared.http import capacity, crosssite, outputs, pages, waiting, waitpoints
from shared.http import progress as batch_progress
from shared.http.edge import Refusal, answer, author, read_body, require_method
from shared.queue import Queue
from shared.submission.parse import decode_body

_ONE_JOB_KEYS: dict[str, dict[str, int]] = {"cancel": {"reason": 500}, "retry": {}}


OPERATOR_ROUTES = (
    "POST /jobs/<id>/cancel|retry|complete, POST /bulk/cancel|retry, "
    "POST /pipelines/<name>/pause|resume, POST /waitpoints/<token>"
)
ADMIN_POINTER = (
    "it is an operator route, served by the admin function to operators only (terraform "
    'output admin_url; docs/api.md, "Operator routes")'
)


def operator_route(path: str) -> tuple[str, str] | None:
    """(head, rest) of an operator route's path (a job's, bulk or a pipeline's action), or
    None for any other path."""
    head, _, rest = path.strip("/").partition("/")
    if head == "jobs" and rest.endswith(("/cancel", "/retry", "/complete")):  # waits: complete
        return head, rest
    if (head == "bulk" and rest) or (head == "pipelines" and rest.count("/") == 1):
        return head, rest
    if head == waitpoints.ROUTE and rest and "/" not in rest:  # waits: a token's completion
        return head, rest
    return None


def operator_action(queue: Queue, request: flask.Request, head: str, rest: str) -> flask.Response:
    """Serve one operator route (operator_route's split of its path); each is a POST with
    a JSON body, never a browser's cross-site request."""
    require_method(request, ("POST",))
    refused = crosssite.problem(request.headers, request.host, request.mimetype or "")
    if refused is not None:
        status, reason = refused
        error = "forbidden" if status == 403 else "unsupported media type"
        raise Refusal(status, error, reason)
    if head == "jobs":
        return job_action(queue, request, *rest.rsplit("/", 1))
    if head == "bulk":
        return bulk_action(queue, request, rest)
    if head == waitpoints.ROUTE:  # the admin's own: an operator completes by token, IAM-checked
        return waitpoints.complete_waitpoint(queue, request, rest)
    return pipeline_action(queue, request, *rest.split("/"))


def job_action(queue: Queue, request: flask.Request, job_id: str, action: str) -> flask.Response:
    """POST /jobs/<id>/cancel|retry: the job after the transition; 409 when its state
    does not allow it. POST /jobs/<id>/complete: its waitpoint (shared.http.waitpoints)."""
    if action == "complete":  # waits (docs/waiting.md)
        return waitpoints.complete_job(queue, request, job_id)
    if action not in _ONE_JOB_KEYS:
        raise Refusal(404, "not found", f"no action {action[:40]!r} on a job; try cancel or retry")
    body = _json_object(request, queue, required=False)
    bulk.check_keys(body, _ONE_JOB_KEYS[action])
    by = author(request, "http", queue.settings)
    try:
        if action == "cancel":
            queue.cancel(job_id, by=by, reason=body.get("reason") or None)
        else:
            queue.retry(job_id, by=by)  # a failed ring is the sweep's to repeat
    except IllegalTransition as exc:  # cancel a finished job, retry a running one
        raise Refusal(409, "not allowed", str(exc)) from None
    return answer(200, queue.get(job_id).to_json())


def bulk_action(queue: Queue, request: flask.Request, action: str) -> flask.Response:
    """POST /bulk/cancel|retry: without `confirm`, the count and its token (nothing
    changes); with the token, act on up to BULK_MAX_PER_REQUEST of the selection."""
    _known_bulk_action(action)
    body = _json_object(request, queue, required=True)
    counted = bulk.count(queue.ctx, action, body)
    confirm = body.get("confirm")
    if confirm is None:
        return answer(200, counted.to_json())
    reason = body.get("reason") if isinstance(body.get("reason"), str) else None
    by = author(request, "http", queue.settings)
    return answer(200, bulk.confirm(queue.ctx, counted, confirm, by=by, reason=reason))


def pipeline_action(
    queue: Queue, request: flask.Request, pipeline: str, action: str
) -> flask.Response:
    """POST /pipelines/<name>/pause|resume (docs/flow-control.md): 200 with what changed,
    400 for an unknown pipeline or a body other than {}, 404 for another action."""
    if action in ("pause", "resume"):
        bulk.check_keys(_json_object(request, queue, required=False), {})
    if action == "pause":
        changed = queue.pause(pipeline, by=author(request, "http", queue.settings))
        return answer(200, {"pipeline": pipeline, "paused": True, "changed": changed})
    if action == "resume":
        resumed = queue.resume(pipeline, by=author(request, "http", queue.settings))
        return answer(200, {"pipeline": pipeline, "paused": False, **resumed.to_json()})
    raise Refusal(404, "not found", f"no action {action[:40]!r}; try pause or resume")


def list_jobs(queue: Queue, request: flask.Request) -> flask.Response:
    """GET /jobs?batch=&status=&pipeline=&page_size=&page_token= (shared.http.pages)."""
    query = pages.parse_query({k: v for k, v in request.args.items()})
    return answer(200, pages.page(queue.store, query, queue.ctx.summary_fields()).to_json())


def get_job(queue: Queue, request: flask.Request, job_id: str) -> flask.Response:
    """GET /jobs/<id>[?wait=<s>[&after=<generation>][&until=ended]]: at once, or as soon
    as the record changes past `after` (else past what it was), or with until=ended as
    soon as the job ends, or when the wait ends."""
    unknown = sorted(set(request.args) - {"wait", "after", "until"})
    if unknown:
        shown = ", ".join(params.shown(u, 40) for u in unknown[:5])
        raise InvalidInput(f"unknown parameters {shown}", "query")
    seconds = waiting.parse_wait(request.args.get("wait"))
    after = waiting.parse_after(request.args.get("after"))
    until = waiting.parse_until(request.args.get("until"))
    got = waiting.answer_after_change(queue, job_id, seconds, after, until, room=capacity.INSTANCE)
    later = {} if got.retry_after_s is None else {"Retry-After": str(got.retry_after_s)}
    return answer(200, got.view.to_json(), later)


def is_wait(request: flask.Request) -> bool:
    """A waiting read (GET with a `wait` other than 0): it may park in its slot
    (shared.http.capacity), and cuts no other wait short."""
    return request.method == "GET" and request.args.get("wait", "").strip("0.") != ""


def job_part(queue: Queue, request: flask.Request, job_id: str, part: str) -> flask.Response:
    """GET /jobs/<id>/outputs (the committed outputs) and /jobs/<id>/outputs/<name> (one
    of them: shared.http.outputs)."""
    if part == "outputs":
        return outputs.listing(queue, job_id)
    if part.startswith("outputs/") and len(part) > len("outputs/"):
        return outputs.download(queue, request, job_id, part.removeprefix("outputs/"))
    raise Refusal(
        404, "not found", "try GET /jobs/<id>, /jobs/<id>/outputs or /jobs/<id>/outputs/<name>"
    )


def batch_progress_of(queue: Queue, batch_id: str) -> flask.Response:
    """GET /batches/<id>/progress: counts from the markers (shared.http.progress)."""
    return answer(200, batch_progress.progress(queue.ctx, batch_id, queue.clock()).to_json())


def _known_bulk_action(action: str) -> None:
    if action not in bulk.ACTS_ON:
        raise Refusal(404, "not found", f"no bulk action {action[:40]!r}; try cancel or retry")


def _json_object(request: flask.Request, queue: Queue, *, required: bool) -> dict[str, Any]:
    """The body as a JSON object; an empty body is {} unless `required`."""
    raw = read_body(request, queue.settings.max_body_bytes)
    if not raw.strip():
        if required:
            raise Refusal(400, "invalid request", "the body is empty; send the selection as JSON")
        return {}
    body = decode_body(raw)
    if not isinstance(body, dict):
        raise Refusal(400, "invalid request", "the body must be a JSON object")
    return body
