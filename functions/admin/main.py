"""Entry point `admin`: the operator routes of the HTTP API, and nothing else.

A job's cancel and retry, bulk cancel and retry (a count first), a pipeline's pause and
resume (docs/api.md, "Operator routes"). The same shared code as submit
(shared.http.routes), deployed as its own function so that Cloud Run's IAM check admits
only the operators (terraform: var.operators hold roles/run.invoker on it, nobody else)
before any code runs (https://cloud.google.com/run/docs/authenticating/service-to-service).
The author in a history or a pause flag is what that check verified (shared.http.identity).
"""

from __future__ import annotations

import flask

from shared.http import routes as api_routes
from shared.http.edge import Refusal, answer, entry_point, framework_errors, require_method
from shared.http.once import SettingsOnce

HEALTH_PATH = "/health"  # not /healthz: Cloud Run answers some paths ending in "z" itself
_settings = SettingsOnce("admin")
_settings.validate_now()
framework_errors()


@entry_point("admin")
def admin(request: flask.Request) -> flask.Response:
    """POST /jobs/<id>/cancel|retry|complete, /bulk/cancel|retry,
    /pipelines/<name>/pause|resume, /waitpoints/<token>; GET /health. Any other path is a
    404 pointing at submit."""
    path = request.path.rstrip("/") or "/"
    if path == HEALTH_PATH:
        require_method(request, ("GET",))
        return answer(200, {"ok": True})
    route = api_routes.operator_route(path)
    if route is None:
        raise Refusal(
            404,
            "not found",
            f"no route {path} here: the admin function serves only the operator routes "
            f"({api_routes.OPERATOR_ROUTES}); submit serves the rest",
        )
    return api_routes.operator_action(_settings.queue(), request, *route)
