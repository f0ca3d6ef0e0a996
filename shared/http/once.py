"""A function's settings, its Queue and its upload routes, validated once per process:
each function's entry point holds one (functions/*/main.py)."""

from __future__ import annotations

import contextlib
import threading

from shared import logs
from shared.config import Settings
from shared.errors import ConfigError, InvalidInput, PipelineModuleError
from shared.http.edge import Refusal
from shared.logs import get_logger
from shared.pipelines import load_modules, pipeline_names
from shared.queue import Queue
from shared.submission import upload_routes
from shared.submission.upload_routes import Routes

log = get_logger(__name__)


class SettingsOnce:
    """A function's settings (and its Queue), validated once per process; a bad
    variable is logged once and answered as a 500 naming it."""

    def __init__(self, function: str):
        self._function = function
        self._settings: Settings | None = None
        self._queue: Queue | None = None
        self._error: str | None = None
        self._routes: Routes | None = None
        self._routes_error: str | None = None
        self._lock = threading.Lock()

    def get(self) -> Settings:
        """The settings, or a 500 Refusal naming the bad variable."""
        with self._lock:
            if self._settings is None and self._error is None:
                try:
                    settings = Settings.from_env()
                    load_modules(settings.pipeline_modules)
                    self._settings = settings
                    logs.configure(settings.log_level, project=settings.project)
                except (ConfigError, PipelineModuleError) as exc:
                    self._error = str(exc)
                    log.error(f"{self._function} is misconfigured", reason=self._error)
            if self._settings is None:
                raise Refusal(500, "misconfigured", self._error or "settings are invalid")
            return self._settings

    def queue(self) -> Queue:
        """The process's Queue (its store and doorbell are made on first use)."""
        settings = self.get()
        with self._lock:
            if self._queue is None:
                self._queue = Queue.from_settings(settings)
            return self._queue

    def routes(self) -> Routes:
        """The upload routes of RECLAIM_UPLOADS_FILE, checked once against the registered
        pipelines; a bad file is logged once and answered as a 500 naming the route."""
        settings = self.get()
        with self._lock:
            if self._routes is None and self._routes_error is None:
                path = upload_routes.uploads_file({"RECLAIM_UPLOADS_FILE": settings.uploads_file})
                try:
                    self._routes = upload_routes.load(path, pipeline_names())
                except InvalidInput as exc:
                    self._routes_error = f"{upload_routes.UPLOADS_ENV} ({path}): {exc.reason}"
                    log.error(f"{self._function} is misconfigured", reason=self._routes_error)
            if self._routes is None:
                raise Refusal(500, "misconfigured", self._routes_error or "routes are invalid")
            return self._routes

    def validate_now(self, *, routes: bool = False) -> None:
        """Called at import, so a bad deployment logs at once rather than at first request
        (with `routes`, the upload routes too)."""
        with contextlib.suppress(Refusal):
            self.get()
            if routes:
                self.routes()
