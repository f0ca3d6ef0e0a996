"""The HTTP edge every function shares: settings loaded once, JSON answers, and the
one place where errors become refusals.

Every refusal has the same shape, {"error": short, "reason": a sentence}, so a
client (or Pub/Sub's dead-letter reader) always learns why. ``entry_point``
wraps each function: the library's ReclaimErrors map to their status codes
here, and only here; anything else is a logged 500. ``framework_errors`` gives
the refusals functions-framework makes itself the same shape. A function may
render a refusal its own way (the dashboard, a browser's app, as a page).

Pub/Sub push treats 102, 200, 201, 202 and 204 as an acknowledgement and any
other status as a negative one, so a refused or failed push is redelivered
(https://cloud.google.com/pubsub/docs/push#receive_push).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import flask

from shared import logs, metrics
from shared.config import Settings
from shared.errors import (
    BadEvent,
    BatchNotFound,
    ConfigError,
    Conflict,
    CorruptRecord,
    DoorbellError,
    IgnoredEvent,
    InvalidInput,
    InvalidRecord,
    JobNotFound,
    PipelineModuleError,
    ReclaimError,
    SelectionChanged,
    SelectionGrew,
    StorageError,
    SubmitError,
)
from shared.http import capacity, identity

log = logs.get_logger(__name__)

Handler = Callable[[flask.Request], flask.Response]


class Refusal(ReclaimError):
    """An HTTP refusal raised from a helper; the entry point turns it into the answer."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: str,
        headers: dict[str, str] | None = None,
        *,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers or {}
        self.extra = extra or {}  # more fields of the JSON answer

    def answer(self) -> flask.Response:
        return answer(
            self.status, {"error": self.error, "reason": self.reason, **self.extra}, self.headers
        )


Render = Callable[[flask.Request, Refusal], flask.Response]
"""How a function answers a refusal: JSON for the API functions (json_refusal)."""


def json_refusal(request: flask.Request, refusal: Refusal) -> flask.Response:
    """The API functions' answer to every refusal: {"error", "reason", ...} as JSON."""
    return refusal.answer()


def entry_point(
    function: str,
    *,
    retry_after_s: int = 5,
    render: Render = json_refusal,
    is_wait: Callable[[flask.Request], bool] | None = None,
) -> Callable[[Handler], Handler]:
    """Wrap a function's handler: its errors become refusals (see refusal_for), an
    unexpected one a 500 with the traceback logged, each answered by `render`.
    `retry_after_s` is the Retry-After of a 503 (an outage worth retrying). Each request
    counts in the instance's slots (shared.http.capacity); `is_wait` tells a waiting
    read, which cuts no parked wait short."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(request: flask.Request) -> flask.Response:
            waits = bool(is_wait is not None and is_wait(request))
            with capacity.INSTANCE.request(wait=waits):
                return _answer(request, handler)

        def _answer(request: flask.Request, handler: Handler) -> flask.Response:
            try:
                return handler(request)
            except IgnoredEvent as exc:  # valid, and nothing to do: acknowledge it
                log.info(f"{function}: event ignored", reason=exc.reason)
                return answer(200, {"ignored": True, "reason": exc.reason})
            except ReclaimError as exc:
                refusal = refusal_for(exc, retry_after_s)
                failed = refusal.status >= 500
                log.log(
                    logging.ERROR if failed else logging.WARNING,
                    f"{function} refused a request",
                    path=request.path,
                    error=refusal.error,
                    reason=refusal.reason,
                    **(
                        metrics.request_error(function, refusal.status)
                        if failed
                        else {"status": refusal.status}
                    ),
                )
                return render(request, refusal)
            except Exception:  # the entry point: a bug must answer a refusal and be logged
                log.exception(
                    f"{function} failed", path=request.path, **metrics.request_error(function, 500)
                )
                bug = Refusal(500, "internal error", "the request failed unexpectedly")
                return render(request, bug)

        return run

    return wrap


_PLAIN: tuple[tuple[type[ReclaimError], int, str], ...] = (
    (BadEvent, 400, "bad event"),
    (SelectionChanged, 409, "selection changed"),  # before SelectionGrew: a kind of it
    (SelectionGrew, 409, "selection grew"),
    (JobNotFound, 404, "not found"),
    (BatchNotFound, 404, "not found"),
)
"""Errors answered with their own message as the reason."""


def refusal_for(exc: ReclaimError, retry_after_s: int = 5) -> Refusal:
    """The HTTP answer to a library error: its status code, short error and reason."""
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, SubmitError):
        extra = {"problems": exc.problems} if len(exc.problems) > 1 else {}
        if isinstance(exc, Conflict):
            return Refusal(409, "conflict", exc.reason, extra=extra)
        return Refusal(400, "invalid request", exc.reason, extra=extra)
    for kind, status, error in _PLAIN:
        if isinstance(exc, kind):
            return Refusal(status, error, str(exc))
    if isinstance(exc, InvalidInput):
        return Refusal(400, f"invalid {exc.what}", exc.reason)
    if isinstance(exc, InvalidRecord):  # what was sent would make a record no store keeps
        return Refusal(400, "invalid request", f"the change cannot be stored: {exc}")
    if isinstance(exc, CorruptRecord):
        reason = (
            f"the record of job {exc.job_id!r} cannot be read ({exc.reason}); it is left "
            "untouched for a person to repair"
        )
        return Refusal(409, "record unreadable", reason, extra={"id": exc.job_id})
    if isinstance(exc, ConfigError | PipelineModuleError):
        return Refusal(500, "misconfigured", str(exc))
    if isinstance(exc, StorageError | DoorbellError):  # an outage: worth retrying
        headers = {"Retry-After": str(retry_after_s)}
        return Refusal(503, "unavailable", "storage or Pub/Sub is unavailable; retry", headers)
    return Refusal(500, "internal error", f"{type(exc).__name__}: {exc}")


def author(request: flask.Request, prefix: str, settings: Settings) -> str:
    """Who made this request, for a history or a marker (`by`): what the platform verified
    (shared.http.identity), never a header the caller chose."""
    return identity.author(prefix, request.headers, iap_audience=settings.iap_audience)


def answer(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> flask.Response:
    response = flask.jsonify(body)
    response.status_code = status
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def refuse(
    status: int, error: str, reason: str, headers: dict[str, str] | None = None
) -> flask.Response:
    return answer(status, {"error": error, "reason": reason}, headers)


def require_method(request: flask.Request, allowed: tuple[str, ...]) -> None:
    if request.method not in allowed:
        raise Refusal(
            405,
            "method not allowed",
            f"{request.method} is not allowed here; use {' or '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )


def read_body(request: flask.Request, limit: int) -> bytes:
    """The body, refused with 413 above limit (declared or actual, chunked too)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise Refusal(413, "body too large", f"the body is {declared} bytes; the limit is {limit}")
    data = request.stream.read(limit + 1)
    if len(data) > limit:
        raise Refusal(413, "body too large", f"the body exceeds the limit of {limit} bytes")
    return bytes(data)


def framework_errors(render: Render = json_refusal) -> None:
    """Make functions-framework's own refusals the function's too (JSON by default).

    Its router answers Werkzeug's HTML page for a request it cannot route to the
    function at all (a path holding a percent-encoded newline, for one), which
    would break "every answer is JSON". functions-framework exposes the app's
    error handler registration as ``functions_framework.errorhandler`` while it
    loads the function's module (documented in its README); outside it (a plain
    import) there is nothing to register.
    """
    import functions_framework
    from werkzeug.exceptions import HTTPException

    register = getattr(functions_framework, "errorhandler", None)
    if register is None:
        return

    def refusal(exc: HTTPException) -> flask.Response:
        allow = {k: v for k, v in exc.get_headers() if k.lower() == "allow"}
        reason = str(exc.description or exc.name)
        return render(flask.request, Refusal(exc.code or 500, exc.name.lower(), reason, allow))

    register(HTTPException)(refusal)
