"""Entry point `dashboard`: the web dashboard (shared/dashboard), server-rendered HTML.

Thin on purpose: settings and the queue come from shared.http.edge, every page and
button from shared.dashboard.app. A browser's app, it answers every refusal as
its error page (JSON only to a client that asks for it, and on /metrics), those
functions-framework makes before the function runs included. Never public: on
GCP only the principals in terraform's dashboard_viewers hold run.invoker on it
(docs/seeing.md says how a browser gets there).
"""

from __future__ import annotations

import threading

import flask

from shared.dashboard import app, figures
from shared.http.edge import entry_point, framework_errors
from shared.http.once import SettingsOnce

_settings = SettingsOnce("dashboard")
_settings.validate_now()
framework_errors(app.refusal_page)
_figures: figures.Figures | None = None
_lock = threading.Lock()


@entry_point("dashboard", render=app.refusal_page)
def dashboard(request: flask.Request) -> flask.Response:
    """One page, asset or button press."""
    return app.handle(request, _settings.queue(), _source())


def _source() -> figures.Figures:
    global _figures
    settings = _settings.get()
    with _lock:
        if _figures is None:
            _figures = figures.from_setting(settings.metrics_source, settings.project)
        return _figures
