"""Entry point `sweep`: Cloud Scheduler POSTs here; one bounded pass over the
pending index rescues silent owners' jobs, re-rings lost doorbells, fails the
exhausted ones and repairs index leftovers. Answers the counts as JSON.

Safe to run concurrently with itself and with claims: every write is a CAS.
A storage outage answers 503; the next tick tries again.
"""

from __future__ import annotations

import flask

from shared.http.edge import answer, entry_point, framework_errors, require_method
from shared.http.once import SettingsOnce

_settings = SettingsOnce("sweep")
_settings.validate_now()
framework_errors()


@entry_point("sweep", retry_after_s=10)
def sweep(request: flask.Request) -> flask.Response:
    """One sweep run (POST only)."""
    require_method(request, ("POST",))
    result = _settings.queue().sweep_once()
    return answer(200, result.to_json())
