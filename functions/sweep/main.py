"""Entry point `sweep`: Cloud Scheduler POSTs here; one bounded pass over the
pending index rescues silent owners' jobs, re-rings lost doorbells, fails the
exhausted ones and repairs index leftovers. Answers the counts as JSON.

Safe to run concurrently with itself and with claims: every write is a CAS.
"""

from __future__ import annotations

from typing import Any

import flask

from shared.doorbell import get_doorbell
from shared.http import Refusal, SettingsOnce, answer, json_framework_errors, refuse, require_method
from shared.logs import log
from shared.storage import get_store
from shared.sweeper import run_once

_settings = SettingsOnce("sweep")
_settings.validate_now()
json_framework_errors()


def sweep(request: flask.Request) -> Any:
    """One sweep run (POST only)."""
    try:
        require_method(request, ("POST",))
        settings = _settings.get()
    except Refusal as exc:
        return exc.answer()
    try:
        result = run_once(get_store(settings), get_doorbell(settings), settings)
    except Exception as exc:  # listing failed (outage): the next tick tries again
        log("ERROR", "sweep failed", error=f"{type(exc).__name__}: {exc}")
        return refuse(503, "unavailable", "storage is unavailable; retry", {"Retry-After": "10"})
    return answer(200, result.to_json())
