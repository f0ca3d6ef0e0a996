"""What every HTTP entry point shares: settings loaded once, JSON answers and refusals.

Every refusal has the same shape, {"error": short, "reason": a sentence}, so a
client (or Pub/Sub's dead-letter reader) always learns why.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import flask

from shared import logs
from shared.config import ConfigError, Settings
from shared.logs import log
from shared.pipelines import PipelineModuleError, load_modules


class Refusal(Exception):
    """An HTTP refusal raised from a helper; the entry point turns it into the answer."""

    def __init__(self, status: int, error: str, reason: str, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers or {}

    def answer(self) -> flask.Response:
        return refuse(self.status, self.error, self.reason, self.headers)


class SettingsOnce:
    """A function's settings, validated once per process; a bad variable is logged once."""

    def __init__(self, function: str):
        self._function = function
        self._settings: Settings | None = None
        self._error: str | None = None
        self._lock = threading.Lock()

    def get(self) -> Settings:
        """The settings, or a 500 Refusal naming the bad variable."""
        with self._lock:
            if self._settings is None and self._error is None:
                try:
                    settings = Settings.from_env()
                    load_modules(settings.pipeline_modules)
                    self._settings = settings
                    logs.configure(settings.log_level)
                except (ConfigError, PipelineModuleError) as exc:
                    self._error = str(exc)
                    log("ERROR", f"{self._function} is misconfigured", reason=self._error)
            if self._settings is None:
                raise Refusal(500, "misconfigured", self._error or "settings are invalid")
            return self._settings

    def validate_now(self) -> None:
        """Called at import, so a bad deployment logs at once rather than at first request."""
        with contextlib.suppress(Refusal):
            self.get()


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


def json_framework_errors() -> None:
    """Make functions-framework's own refusals JSON too.

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
        code = exc.code or 500
        reason = exc.description or exc.name
        return refuse(code, exc.name.lower(), str(reason))

    register(HTTPException)(refusal)
