"""Structured logs on the standard ``logging`` module: one JSON line per record.

Cloud Run (so Cloud Functions gen2) sends each line a container writes to
stdout or stderr to Cloud Logging, which parses a JSON line into a structured
entry: ``severity``, ``message``, ``time``, ``logging.googleapis.com/sourceLocation``
are special fields, everything else lands in ``jsonPayload`` for filtering
(https://cloud.google.com/logging/docs/structured-logging), and a
``stack_trace`` field is what Error Reporting reads
(https://cloud.google.com/error-reporting/docs/formatting-error-messages).

Modules log through ``get_logger(__name__)``, passing the entry's fields as
keywords: ``log.info("claimed", job_id=job_id, owner=owner)``; a JobLogger
carries a job's id, owner, attempt, current stage and trace into every line.
A ``source_location`` field ({"file", "line", "function"}) replaces the line's own
sourceLocation: the runner's line about a stage's exception points at the pipeline's
code that raised it (shared.claim.stage_errors), not at the runner.

A ``traceparent`` field (the job's W3C trace context, kept in its record) is
written as Cloud Logging's trace fields (shared.tracing), so every line about a
job, whichever function wrote it, is found by one trace filter.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any

from shared import tracing

ROOT = "reclaim"  # every logger of the project: reclaim.runner, reclaim.claim, reclaim.job
_FIELDS = "reclaim_fields"  # the LogRecord attribute that carries an entry's fields
_LOGGING_KWARGS = frozenset({"exc_info", "stack_info", "stacklevel", "extra"})
_TRACEPARENT = tracing.TRACEPARENT_HEADER  # the field a job's trace context comes in
SOURCE_LOCATION = "source_location"  # a field that names the line's sourceLocation itself
_project: str | None = None  # names the trace resource: projects/<project>/traces/<id>


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON in Cloud Logging's structured format."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
        }
        fields = dict(getattr(record, _FIELDS, {}))
        traceparent = fields.pop(_TRACEPARENT, None)
        location = fields.pop(SOURCE_LOCATION, None)
        entry.update(fields)
        entry.update(tracing.log_fields(traceparent, _project))
        entry["logger"] = record.name
        entry["logging.googleapis.com/sourceLocation"] = (
            location
            if isinstance(location, dict)
            else {"file": record.pathname, "line": record.lineno, "function": record.funcName}
        )
        if record.exc_info:
            entry["stack_trace"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str, separators=(",", ":"))


class _StdStreamHandler(logging.StreamHandler[Any]):
    """Writes to whatever sys.stdout (or sys.stderr) is at each record, never a kept
    reference, so a redirected stream (the CLI, a test's capture) gets the lines."""

    def __init__(self, *, stderr: bool) -> None:
        self.stderr = stderr
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr if self.stderr else sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        """StreamHandler sets its stream; this one looks it up at each write instead."""


def configure(level: str = "INFO", *, stderr: bool = False, project: str | None = None) -> None:
    """Set the lowest severity written, and whether lines go to stderr (the CLI keeps
    stdout for its own output). Replaces any earlier configuration; `project` (the
    deployment's, once its settings are read) is kept when not given."""
    global _project
    if project is not None:
        _project = project
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        if isinstance(handler, _StdStreamHandler):
            logger.removeHandler(handler)
    handler = _StdStreamHandler(stderr=stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper() if level.upper() in logging.getLevelNamesMapping() else "INFO")
    logger.propagate = False  # the hosting server's root handlers would print it again


class EventLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose calls take the entry's fields as keywords; fields that are None
    are left out. ``extra`` (the adapter's bound fields) goes into every entry."""

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """A metric line (a `metric` field) is written whatever the level: it is the data
        of the log-based metrics and the dashboard, not chatter, and a RECLAIM_LOG_LEVEL
        above INFO would otherwise empty every chart and alert."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1  # the caller's line, not ours
        if kwargs.get("metric") is None or self.isEnabledFor(level):
            super().log(level, msg, *args, **kwargs)
            return
        msg, kwargs = self.process(msg, kwargs)
        self.logger._log(level, msg, args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k not in _LOGGING_KWARGS}
        merged = {**(self.extra or {}), **fields}
        kwargs["extra"] = {_FIELDS: {k: v for k, v in merged.items() if v is not None}}
        return msg, kwargs


def get_logger(name: str) -> EventLogger:
    """The logger of one module (pass ``__name__``), under the project's root logger."""
    return EventLogger(logging.getLogger(f"{ROOT}.{name.removeprefix('shared.')}"), {})


class JobLogger(EventLogger):
    """A logger bound to one job's id, owner and attempt, handed to stages as
    ``ctx.log``; the runner sets ``stage`` as the job moves on."""

    def __init__(
        self,
        job_id: str,
        owner: str | None = None,
        attempt: int | None = None,
        traceparent: str | None = None,
    ):
        super().__init__(
            logging.getLogger(f"{ROOT}.job"),
            {
                "job_id": job_id,
                "owner": owner,
                "attempt": attempt,
                "stage": None,
                _TRACEPARENT: traceparent,
            },
        )

    @property
    def job_id(self) -> str:
        return str(self._fields["job_id"])

    @property
    def stage(self) -> str | None:
        stage = self._fields["stage"]
        return None if stage is None else str(stage)

    @stage.setter
    def stage(self, name: str | None) -> None:
        self._fields["stage"] = name

    @property
    def _fields(self) -> dict[str, object]:
        assert isinstance(self.extra, dict)
        return self.extra


configure()  # until the settings say otherwise: INFO, to stdout
