"""The job lifecycle over HTTP, beside submit and status: a job's cancel and retry, bulk
cancel and retry with a count first, listing by page, a waiting status read and a batch's
progress (docs/api.md). Each handler validates, calls the queue, and answers JSON; the
refusals are shared.http.edge's.

The operator routes (a job's cancel and retry, bulk cancel and retry, a pipeline's pause
and resume) are served by the admin function alone (functions/admin), whose invokers are
the operators; submit refuses them with a 404 naming it (docs/api.md, "Operator routes").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flask

from shared import bulk
from shared.errors import IllegalTransition, InvalidInput
from shared.http import pages, waiting
from shared.http import progress as batch_progress
from shared.http.edge import Refusal, answer, author, read_body, require_method
from shared.jobs import JobRecord, JobStatus
from shared.queue import Queue
from shared.submission.create import decode_body

BULK_MAX_PER_REQUEST = 100
"""Jobs one bulk request moves (at BULK_PACE a second, well within submit's timeout);
`remaining` says when to count and confirm again."""
BULK_PACE = 20.0
_BULK_KEYS = {
    "batch": 128,
    "status": 20,
    "pipeline": 128,
    "since": 64,
    "confirm": 40,
    "reason": 500,
}
"""The keys a body may hold (string values), each with its longest value."""
_ONE_JOB_KEYS: dict[str, dict[str, int]] = {"cancel": {"reason": 500}, "retry": {}}
SHOWN = 20
"""Ids a count shows."""


OPERATOR_ROUTES = (
    "POST /jobs/<id>/cancel|retry, POST /bulk/cancel|retry, POST /pipelines/<name>/pause|resume"
)
ADMIN_POINTER = (
    "it is an operator route, served by the admin function to operators only (terraform "
    'output admin_url; docs/api.md, "Operator routes")'
)


def operator_route(path: str) -> tuple[str, str] | None:
    """(head, rest) of an operator route's path (a job's, bulk or a pipeline's action), or
    None for any other path."""
    head, _, rest = path.strip("/").partition("/")
    if head == "jobs" and rest.endswith(("/cancel", "/retry")):
        return head, rest
    if (head == "bulk" and rest) or (head == "pipelines" and rest.count("/") == 1):
        return head, rest
    return None


def operator_action(queue: Queue, request: flask.Request, head: str, rest: str) -> flask.Response:
    """Serve one operator route (operator_route's split of its path); each is a POST."""
    require_method(request, ("POST",))
    if head == "jobs":
        return job_action(queue, request, *rest.rsplit("/", 1))
    if head == "bulk":
        return bulk_action(queue, request, rest)
    return pipeline_action(queue, request, *rest.split("/"))


def job_action(queue: Queue, request: flask.Request, job_id: str, action: str) -> flask.Response:
    """POST /jobs/<id>/cancel|retry: the job after the transition; 409 when its state
    does not allow it."""
    if action not in _ONE_JOB_KEYS:
        raise Refusal(404, "not found", f"no action {action[:40]!r} on a job; try cancel or retry")
    body = _json_object(request, queue, required=False)
    _check_keys(body, _ONE_JOB_KEYS[action])
    by = author(request, "http", queue.settings)
    try:
        if action == "cancel":
            queue.cancel(job_id, by=by, reason=body.get("reason") or None)
        else:
            queue.retry(job_id, by=by)  # a failed ring is the sweep's to repeat
    except IllegalTransition as exc:  # cancel a finished job, retry a running one
        raise Refusal(409, "not allowed", str(exc)) from None
    return answer(200, queue.get(job_id).to_json())


@dataclass
class BulkCount:
    """A count: the selection, the records it matches now, and the token confirming it."""

    action: str
    selector: bulk.Selector
    chosen: list[JobRecord]
    token: str

    @property
    def ids(self) -> list[str]:
        return [str(r.get("id")) for r in self.chosen]

    def to_json(self) -> dict[str, Any]:
        ids = self.ids
        return {
            "action": self.action,
            "matching": len(ids),
            "jobs": ids[:SHOWN],
            "confirm": self.token,
        }


def bulk_action(queue: Queue, request: flask.Request, action: str) -> flask.Response:
    """POST /bulk/cancel|retry: without `confirm`, the count and its token (nothing
    changes); with the token, act on up to BULK_MAX_PER_REQUEST of the selection."""
    _known_bulk_action(action)
    body = _json_object(request, queue, required=True)
    counted = bulk_count(queue, action, body)
    confirm = body.get("confirm")
    if confirm is None:
        return answer(200, counted.to_json())
    reason = body.get("reason") if isinstance(body.get("reason"), str) else None
    by = author(request, "http", queue.settings)
    return answer(200, bulk_confirm(queue, counted, confirm, by=by, reason=reason))


def bulk_count(queue: Queue, action: str, body: dict[str, Any]) -> BulkCount:
    """Select the jobs `body` names (the CLI's selection: batch, status, pipeline, since)
    for `action`, as a count a person confirms; InvalidInput or a 404 Refusal."""
    _known_bulk_action(action)
    _check_keys(body, _BULK_KEYS)
    now = queue.clock()
    selector = _selector(body, now)
    bulk.check(selector, action)
    chosen = bulk.select(queue.ctx, selector, action, now)
    return BulkCount(action, selector, chosen, bulk.count_token(action, selector, len(chosen)))


def bulk_confirm(
    queue: Queue, counted: BulkCount, confirm: object, *, by: str, reason: str | None
) -> dict[str, Any]:
    """Act on a fresh count of the selection `confirm` was given for: 400 when the token
    is not that count's, 409 when more jobs match now than were counted."""
    if not isinstance(confirm, str):
        raise InvalidInput("confirm must be the token a count answered", "confirm")
    action, ids = counted.action, counted.ids
    confirmed = bulk.confirmed_count(confirm, action, counted.selector)
    if len(ids) > confirmed:
        raise Refusal(
            409,
            "selection grew",
            f"{len(ids)} jobs match now, {confirmed} were counted; count again and confirm",
        )
    now_acting = counted.chosen[:BULK_MAX_PER_REQUEST]
    if action == "retry":
        result = bulk.act(now_acting, lambda i: queue.retry(i, by=by), per_s=BULK_PACE)
    else:
        result = bulk.act(
            now_acting, lambda i: queue.cancel(i, by=by, reason=reason), per_s=BULK_PACE
        )
    return {
        "action": action,
        "matching": len(ids),
        "acted": result.acted,
        "skipped": result.skipped,
        "errors": result.errors,
        "remaining": len(ids) - len(now_acting),
    }


def pipeline_action(
    queue: Queue, request: flask.Request, pipeline: str, action: str
) -> flask.Response:
    """POST /pipelines/<name>/pause|resume (docs/flow-control.md): 200 with what changed,
    400 for an unknown pipeline, 404 for another action."""
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
        raise InvalidInput(f"unknown parameters {', '.join(u[:40] for u in unknown[:5])}", "query")
    seconds = waiting.parse_wait(request.args.get("wait"))
    after = waiting.parse_after(request.args.get("after"))
    until = waiting.parse_until(request.args.get("until"))
    view = waiting.read_after_change(queue, job_id, seconds, after, until)
    return answer(200, view.to_json())


def batch_progress_of(queue: Queue, batch_id: str) -> flask.Response:
    """GET /batches/<id>/progress: counts from the markers (shared.http.progress)."""
    return answer(200, batch_progress.progress(queue.ctx, batch_id, queue.clock()).to_json())


def _known_bulk_action(action: str) -> None:
    if action not in bulk.ACTS_ON:
        raise Refusal(404, "not found", f"no bulk action {action[:40]!r}; try cancel or retry")


def _check_keys(body: dict[str, Any], allowed: dict[str, int]) -> None:
    """Only the allowed keys, each a string no longer than its limit (null: absent)."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidInput(f"unknown keys {', '.join(k[:40] for k in unknown[:5])}", "request")
    for key, longest in allowed.items():
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= longest):
            raise InvalidInput(f"{key} must be a string of 1 to {longest} characters", key)


def _selector(body: dict[str, Any], now: Any) -> bulk.Selector:
    raw_status = body.get("status")
    try:
        job_status = JobStatus(raw_status) if raw_status else None
    except ValueError:
        raise InvalidInput(
            f"status {str(raw_status)[:40]!r} is not a job status", "status"
        ) from None
    return bulk.Selector(
        batch=body.get("batch") or None,
        status=job_status,
        pipeline=body.get("pipeline") or None,
        since=bulk.parse_since(body["since"], now) if body.get("since") else None,
    )


def _json_object(request: flask.Request, queue: Queue, *, required: bool) -> dict[str, Any]:
    """The body as a JSON object; an empty body is {} unless `required`."""
    raw = read_body(request, queue.settings.max_body_bytes)
    if not raw.strip():
        if required:
            raise Refusal(400, "invalid request", "the body is empty; send the selection as JSON")
        return {}
    kind = (request.mimetype or "").lower()
    if kind != "application/json":
        raise Refusal(415, "unsupported media type", "the body must be application/json")
    body = decode_body(raw)
    if not isinstance(body, dict):
        raise Refusal(400, "invalid request", "the body must be a JSON object")
    return body
