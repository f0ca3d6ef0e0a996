"""Structured logs: one JSON line per event, as Cloud Logging parses stdout.

`severity` and `message` are the special fields Cloud Logging reads; the job
fields (job_id, owner, attempt, stage) land in jsonPayload for filtering.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

_LEVELS = {"DEBUG": 10, "INFO": 20, "NOTICE": 25, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
_threshold = _LEVELS["INFO"]
_to_stderr = False


def configure(level: str = "INFO", *, stderr: bool = False) -> None:
    """Set the lowest severity written, and whether lines go to stderr (the CLI keeps
    stdout for its own output). The stream is looked up at each write, never kept."""
    global _threshold, _to_stderr
    _threshold = _LEVELS.get(level.upper(), _LEVELS["INFO"])
    _to_stderr = stderr


def log(severity: str, message: str, **fields: Any) -> None:
    """Write one event; fields that are None are left out."""
    if _LEVELS.get(severity, 0) < _threshold:
        return
    entry: dict[str, Any] = {
        "severity": severity,
        "message": message,
        "time": datetime.now(UTC).isoformat(),
    }
    entry.update({k: v for k, v in fields.items() if v is not None})
    out = sys.stderr if _to_stderr else sys.stdout
    out.write(json.dumps(entry, default=str, separators=(",", ":")) + "\n")
    out.flush()


class JobLogger:
    """A logger bound to one job's owner and attempt, handed to stages."""

    def __init__(self, job_id: str, owner: str | None = None, attempt: int | None = None):
        self.job_id = job_id
        self.owner = owner
        self.attempt = attempt
        self.stage: str | None = None

    def _emit(self, severity: str, message: str, fields: dict[str, Any]) -> None:
        log(
            severity,
            message,
            job_id=self.job_id,
            owner=self.owner,
            attempt=self.attempt,
            stage=self.stage,
            **fields,
        )

    def debug(self, message: str, **fields: Any) -> None:
        self._emit("DEBUG", message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self._emit("INFO", message, fields)

    def warning(self, message: str, **fields: Any) -> None:
        self._emit("WARNING", message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self._emit("ERROR", message, fields)
