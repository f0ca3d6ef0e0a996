"""The built-in ``webhook`` pipeline: POST a signed JSON body to an https URL.

Payload: ``url`` (https; required), ``body`` (any JSON object, default {}), ``secret_env``
(a RECLAIM_WEBHOOK_SECRET_* variable holding the signing secret; unsigned without it),
``timeout_s`` (1..30, default 10). The request carries the job id as Idempotency-Key, so a
receiver can drop a retried delivery it already took.

Failure comes from the queue itself: a 5xx, 408, 429 or an unreachable receiver raises an
ordinary error (retried with the queue's backoff until the attempts run out); any other
4xx, a refused URL or a missing secret is a PermanentError (the job fails at once). As an
on_complete callback the body's envelope carries the batch's members; as a child, its
parents' results (docs/workflows.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.errors import PermanentError
from shared.pipelines import webhook_delivery as wd
from shared.pipelines.base import Pipeline, StageContext

NAME = "webhook"
MAX_TIMEOUT_S = 30.0


def validate(payload: Mapping[str, Any]) -> None:
    """At submit: the URL's shape and any literal address (names are vetted at delivery)."""
    unknown = sorted(set(payload) - {"url", "body", "secret_env", "timeout_s"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}")
    try:
        wd.parse_target(payload.get("url"))
    except wd.Refused as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(payload.get("body", {}), dict):
        raise ValueError("body must be a JSON object")
    secret_env = payload.get("secret_env")
    if secret_env is not None and not (
        isinstance(secret_env, str) and wd.SECRET_ENV.fullmatch(secret_env)
    ):
        raise ValueError("secret_env must name a RECLAIM_WEBHOOK_SECRET_<NAME> variable")
    timeout = payload.get("timeout_s", 10)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError("timeout_s must be a number")
    if not 1 <= timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout_s must be between 1 and {MAX_TIMEOUT_S:g}")


def deliver(ctx: StageContext) -> None:
    payload = ctx.payload
    envelope: dict[str, Any] = {"job_id": ctx.job_id, "attempt": ctx.attempt}
    parents = ctx.parents()
    if parents:
        envelope["parents"] = parents
    members = ctx.batch_members()
    if members:
        envelope["batch"] = members
    if ctx.parent_failure is not None:
        envelope["parent_failure"] = dict(ctx.parent_failure)
    body = wd.body_of(payload.get("body", {}), envelope)
    try:
        secret = wd.secret_from_env(payload["secret_env"]) if "secret_env" in payload else None
        with ctx.span("POST webhook"):  # the receiver joins the job's trace
            status = wd.post(
                str(payload.get("url")),
                body,
                secret=secret,
                headers={"Idempotency-Key": ctx.job_id},
                timeout_s=float(payload.get("timeout_s", 10)),
                traceparent=ctx.traceparent,
            )
    except (wd.Refused, wd.Rejected) as exc:
        raise PermanentError(f"webhook not delivered: {exc}") from None
    ctx.log.info("webhook delivered", status=status)
    ctx.result.update({"status": status, "attempt": ctx.attempt})


PIPELINE = Pipeline(NAME, stages=[("deliver", deliver)], validate=validate, doc=__doc__ or "")
