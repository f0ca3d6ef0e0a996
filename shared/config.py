"""Settings from environment variables, validated once at start.

Every variable the functions read is declared in ``ENV_VARS`` and read only
here, so terraform can be checked against this one table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class EnvVar:
    """One setting: its variable, default, parser and what it means."""

    name: str
    field: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    minimum: float | None = None


def _name(value: str) -> str:
    if not value or any(c.isspace() for c in value) or "/" in value:
        raise ValueError("must be a non-empty name without spaces or '/'")
    return value


def _modules(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    for name in names:
        if not all(piece.isidentifier() for piece in name.split(".")):
            raise ValueError(f"{name!r} is not a dotted module name")
    return names


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "RECLAIM_PROJECT",
        "project",
        "reclaim-local",
        _name,
        "GCP project that owns the jobs topic.",
    ),
    EnvVar(
        "RECLAIM_RECORDS_BUCKET",
        "records_bucket",
        "reclaim-records",
        _name,
        "Bucket holding jobs/, pending/, batches/ and outputs/.",
    ),
    EnvVar(
        "RECLAIM_JOBS_TOPIC",
        "jobs_topic",
        "reclaim-jobs",
        _name,
        "Topic id of the doorbell (job ids only).",
    ),
    EnvVar(
        "RECLAIM_MAX_CONCURRENT",
        "max_concurrent",
        "4",
        int,
        "Jobs one instance runs at once; must match the function's request concurrency.",
        1,
    ),
    EnvVar(
        "RECLAIM_STALE_SECONDS",
        "stale_seconds",
        "120",
        float,
        "A pending job whose record has not advanced for this long has lost its owner.",
        3,
    ),
    EnvVar(
        "RECLAIM_MAX_ATTEMPTS",
        "max_attempts",
        "3",
        int,
        "Claims a job may take before it fails (a job's own max_attempts wins).",
        1,
    ),
    EnvVar(
        "RECLAIM_BACKOFF_BASE_SECONDS",
        "backoff_base_seconds",
        "5",
        float,
        "First retry delay after a stage error; doubles each attempt, with jitter.",
        0,
    ),
    EnvVar(
        "RECLAIM_BACKOFF_MAX_SECONDS",
        "backoff_max_seconds",
        "300",
        float,
        "Upper bound of the retry delay.",
        0,
    ),
    EnvVar(
        "RECLAIM_CLOCK_SKEW_SECONDS",
        "clock_skew_seconds",
        "300",
        float,
        "A timestamp further than this in the future is treated as undated (stale).",
        0,
    ),
    EnvVar(
        "RECLAIM_MIN_WRITE_INTERVAL_SECONDS",
        "min_write_interval_seconds",
        "1.0",
        float,
        "Checkpoint writes to one record are coalesced to at most one per interval.",
        0,
    ),
    EnvVar(
        "RECLAIM_SWEEP_MAX_JOBS",
        "sweep_max_jobs",
        "1000",
        int,
        "Pending entries one sweep run examines at most.",
        1,
    ),
    EnvVar(
        "RECLAIM_SWEEP_MAX_SECONDS",
        "sweep_max_seconds",
        "45",
        float,
        "Wall-time budget of one sweep run.",
        1,
    ),
    EnvVar(
        "RECLAIM_DRAIN_MAX_JOBS",
        "drain_max_jobs",
        "3",
        int,
        "Overdue jobs a claim instance takes from the pending index when a slot frees.",
        0,
    ),
    EnvVar(
        "RECLAIM_MAX_BODY_BYTES",
        "max_body_bytes",
        "1048576",
        int,
        "Largest request body submit accepts.",
        1,
    ),
    EnvVar(
        "RECLAIM_MAX_BATCH_JOBS",
        "max_batch_jobs",
        "1000",
        int,
        "Most jobs one POST /jobs may create.",
        1,
    ),
    EnvVar(
        "RECLAIM_RETENTION_DAYS_DONE",
        "retention_days_done",
        "30",
        int,
        "Days a done record is kept; the store stamps its custom time for the bucket's "
        "lifecycle rule.",
        1,
    ),
    EnvVar(
        "RECLAIM_RETENTION_DAYS_FAILED",
        "retention_days_failed",
        "90",
        int,
        "Days a failed record is kept (custom time, as above).",
        1,
    ),
    EnvVar(
        "RECLAIM_RETENTION_DAYS_CANCELLED",
        "retention_days_cancelled",
        "30",
        int,
        "Days a cancelled record is kept (custom time, as above).",
        1,
    ),
    EnvVar(
        "RECLAIM_PIPELINE_MODULES",
        "pipeline_modules",
        "",
        _modules,
        "Comma-separated modules imported at start so that their pipelines register "
        "(the built-ins need none).",
    ),
    EnvVar(
        "RECLAIM_LOG_LEVEL",
        "log_level",
        "INFO",
        str.upper,
        "Lowest severity written to the log (DEBUG, INFO, WARNING, ERROR).",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The validated settings of one process."""

    project: str
    records_bucket: str
    jobs_topic: str
    max_concurrent: int
    stale_seconds: float
    max_attempts: int
    backoff_base_seconds: float
    backoff_max_seconds: float
    clock_skew_seconds: float
    min_write_interval_seconds: float
    sweep_max_jobs: int
    sweep_max_seconds: float
    drain_max_jobs: int
    max_body_bytes: int
    max_batch_jobs: int
    retention_days_done: int
    retention_days_failed: int
    retention_days_cancelled: int
    pipeline_modules: tuple[str, ...]
    log_level: str

    @property
    def retention_days(self) -> dict[str, int]:
        """Days each terminal state's record is kept before the lifecycle rule deletes it."""
        return {
            "done": self.retention_days_done,
            "failed": self.retention_days_failed,
            "cancelled": self.retention_days_cancelled,
        }

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.jobs_topic}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read and validate every setting; raise ConfigError naming the bad one."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for var in ENV_VARS:
            raw = env.get(var.name, var.default).strip()
            try:
                value = var.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{var.name}={raw!r} is invalid: {exc}") from None
            if var.minimum is not None and value < var.minimum:
                raise ConfigError(f"{var.name}={raw!r} is invalid: must be >= {var.minimum:g}")
            values[var.field] = value
        values.update(overrides)
        if values["log_level"] not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"RECLAIM_LOG_LEVEL={values['log_level']!r} is invalid")
        if values["backoff_max_seconds"] < values["backoff_base_seconds"]:
            raise ConfigError("RECLAIM_BACKOFF_MAX_SECONDS must be >= RECLAIM_BACKOFF_BASE_SECONDS")
        return cls(**values)


assert {v.field for v in ENV_VARS} == {f.name for f in fields(Settings)}
