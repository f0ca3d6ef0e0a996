"""Entry point `waitpoints`: POST /waitpoints/<token> completes a waitpoint, and nothing
else (docs/waiting.md). The one function a provider outside the project may reach: the
signed token in the URL is the caller's proof (shared.http.waitpoints). Its service
account reads and writes the records bucket and rings the jobs topics, nothing more
(terraform/waitpoints.tf).
"""

from __future__ import annotations

import flask

from shared.http import waitpoints as routes
from shared.http.edge import Refusal, answer, entry_point, framework_errors, require_method
from shared.http.once import SettingsOnce

HEALTH_PATH = "/health"  # not /healthz: Cloud Run answers some paths ending in "z" itself
_settings = SettingsOnce("waitpoints")
_settings.validate_now()
framework_errors()


@entry_point("waitpoints")
def waitpoints(request: flask.Request) -> flask.Response:
    """POST /waitpoints/<token> (JSON body: the data the waiting stage reads); GET /health."""
    path = request.path.rstrip("/") or "/"
    if path == HEALTH_PATH:
        require_method(request, ("GET",))
        return answer(200, {"ok": True})
    token = routes.waitpoint_token(path)
    if token is None:
        raise Refusal(404, "not found", f"no route {path[:80]} here; try POST /waitpoints/<token>")
    return routes.complete_waitpoint(_settings.queue(), request, token)
