"""Entry point `sweep`: Cloud Scheduler POSTs here; one bounded pass over the
pending index rescues silent owners' jobs, re-rings lost doorbells, fails the
exhausted ones and repairs index leftovers. Answers the counts as JSON.

Safe to run concurrently with itself and with claims: every write is a CAS.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import flask

from shared import logs
from shared.config import ConfigError, Settings
from shared.doorbell import get_doorbell
from shared.logs import log
from shared.storage import get_store
from shared.sweeper import run_once

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
                log("ERROR", "sweep is misconfigured", reason=_settings_error)
        return _settings


with contextlib.suppress(Exception):  # validate at import: a bad deployment logs at once
    _load_settings()


def _answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    response = flask.jsonify(body)
    response.status_code = status
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def sweep(request: flask.Request) -> Any:
    """One sweep run (POST only)."""
    if request.method != "POST":
        return _answer(
            405,
            {"error": "method not allowed", "reason": f"{request.method} is not allowed; use POST"},
            {"Allow": "POST"},
        )
    settings = _load_settings()
    if settings is None:
        return _answer(500, {"error": "misconfigured", "reason": _settings_error or "invalid"})
    try:
        result = run_once(get_store(settings), get_doorbell(settings), settings)
    except Exception as exc:  # listing failed (outage): the next tick tries again
        log("ERROR", "sweep failed", error=f"{type(exc).__name__}: {exc}")
        return _answer(
            503,
            {"error": "unavailable", "reason": "storage is unavailable; retry"},
            {"Retry-After": "10"},
        )
    return _answer(200, result.to_json())
