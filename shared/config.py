"""Settings from environment variables, validated once at start.

Every variable the functions read is declared in ``ENV_VARS`` and read only
here, so terraform (and the README's table) can be checked against this one
table. ``read_env`` is the generic loader: any table of ``EnvVar``s, read
from any mapping, with one clear error naming the bad variable; the local
cloud's launcher reads its LOCAL_* table with it too.

Timings that follow from the stale time are properties of ``Settings``, each
documented once, so no module re-derives them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from shared import pools
from shared.errors import ConfigError
from shared.jobs import JobStatus

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def package_file(file_name: str, modules: str) -> Path | None:
    """`file_name` in the package of the deployment's pipeline modules (the comma-separated
    RECLAIM_PIPELINE_MODULES: the folder terraform ships and reads its files from), or
    None. Found without importing the modules."""
    for module in filter(None, (m.strip() for m in modules.split(","))):
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(folder) / file_name
            if candidate.exists():
                return candidate
    return None


def pools_file(setting: str, modules: str = "") -> Path | None:
    """The pools file: RECLAIM_POOLS_FILE (`setting`; relative to the folder holding
    shared/, as terraform ships it), else pools.json in the package of the deployment's
    pipelines, else the repo's pipelines/pools.json; None when none exists (no pools)."""
    if setting.strip():
        return pools.ROOT / setting.strip()  # an absolute path stays itself
    found = package_file("pools.json", modules) or pools.DEFAULT_FILE
    return found if found.exists() else None


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    """One setting: its variable, the Settings field it fills, default, parser and meaning.

    ``parse`` raises ValueError with a readable reason; ``minimum`` bounds a number.
    """

    name: str
    field: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    minimum: float | None = None


def read_env(table: Iterable[EnvVar], env: Mapping[str, str]) -> dict[str, Any]:
    """field -> parsed value for every variable of `table` (its default when unset).

    Raises ConfigError naming the first variable that does not parse or is out of bounds.
    """
    values: dict[str, Any] = {}
    for var in table:
        raw = env.get(var.name, var.default).strip()
        try:
            value = var.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{var.name}={raw!r} is invalid: {exc}") from None
        if var.minimum is not None and value < var.minimum:
            raise ConfigError(f"{var.name}={raw!r} is invalid: must be >= {var.minimum:g}")
        values[var.field] = value
    return values


def unknown_names(table: Iterable[EnvVar], env: Mapping[str, str], prefix: str) -> list[str]:
    """Variables set with the table's prefix that the table does not know (likely typos)."""
    known = {var.name for var in table}
    return sorted(name for name in env if name.startswith(prefix) and name not in known)


def _name(value: str) -> str:
    if not value or any(c.isspace() for c in value) or "/" in value:
        raise ValueError("must be a non-empty name without spaces or '/'")
    return value


def _names(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    for name in names:
        _name(name)
    if len(set(names)) != len(names):
        raise ValueError("names a bucket twice")
    return names


def _modules(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    for name in names:
        if not all(piece.isidentifier() for piece in name.split(".")):
            raise ValueError(f"{name!r} is not a dotted module name")
    return names


def _pool(value: str) -> str:
    return pools.DEFAULT if not value else pools.check_name(value)


def _flag(value: str) -> bool:
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _log_level(value: str) -> str:
    level = value.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


def _metrics_source(value: str) -> str:
    kind, sep, where = value.partition(":")
    if value and (not sep or kind not in ("monitoring", "logs") or not where):
        raise ValueError("must be monitoring:<metric prefix>, logs:<folder>, or empty")
    return value


def _iap_audience(value: str) -> str:
    if value and not value.startswith("/projects/"):
        raise ValueError("must be IAP's signed-header audience, /projects/<number>/..., or empty")
    return value


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        name="RECLAIM_PROJECT",
        field="project",
        default="reclaim-local",
        parse=_name,
        doc="GCP project that owns the jobs topic.",
    ),
    EnvVar(
        name="RECLAIM_RECORDS_BUCKET",
        field="records_bucket",
        default="reclaim-records",
        parse=_name,
        doc="Bucket holding jobs/, pending/, batches/ and outputs/ (with RECLAIM_SHARD_BUCKETS: "
        "the home bucket, which also keeps the index objects).",
    ),
    EnvVar(
        name="RECLAIM_SHARD_BUCKETS",
        field="shard_buckets",
        default="",
        parse=_names,
        doc="Comma-separated record buckets beside RECLAIM_RECORDS_BUCKET: each job's "
        "objects go to one bucket by a hash of its id, so more buckets carry more jobs/s "
        "from cold (docs/capacity.md). Empty: one bucket. Fixed for a deployment's life.",
    ),
    EnvVar(
        name="RECLAIM_LEGACY_NAMES",
        field="legacy_names",
        default="true",
        parse=_flag,
        doc="Whether records are also looked for under their names from before the hash "
        "segment (jobs/<id>.json): a read that misses looks there, a create of a "
        "user-chosen id checks there (one more read). Turn it off once no such record is left "
        '(docs/capacity.md, "Names that spread load").',
    ),
    EnvVar(
        name="RECLAIM_UPLOADS_BUCKET",
        field="uploads_bucket",
        default="reclaim-uploads",
        parse=_name,
        doc="The deployment's uploads bucket: the bucket of an upload route that names none.",
    ),
    EnvVar(
        name="RECLAIM_JOBS_TOPIC",
        field="jobs_topic",
        default="reclaim-jobs",
        parse=_name,
        doc="Topic id of the doorbell (job ids only).",
    ),
    EnvVar(
        name="RECLAIM_MAX_CONCURRENT",
        field="max_concurrent",
        default="4",
        parse=int,
        doc="Jobs one instance runs at once; must match the function's request concurrency.",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_STALE_SECONDS",
        field="stale_seconds",
        default="120",
        parse=float,
        doc="A pending job whose record has not advanced for this long has lost its owner.",
        minimum=3,
    ),
    EnvVar(
        name="RECLAIM_ROLLOUT_SKEW_SECONDS",
        field="rollout_skew_seconds",
        default="900",
        parse=float,
        doc="How long a job whose pipeline (or version) a claim revision lacks waits, "
        "handed back at no cost, for a revision that has it before it fails.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_MAX_ATTEMPTS",
        field="max_attempts",
        default="3",
        parse=int,
        doc="Claims a job may take before it fails (a job's own max_attempts wins).",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_BACKOFF_BASE_SECONDS",
        field="backoff_base_seconds",
        default="5",
        parse=float,
        doc="The ceiling of the first retry's delay after a stage error: the delay is drawn "
        "between 0 and it (full jitter), and the ceiling doubles each attempt.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_BACKOFF_MAX_SECONDS",
        field="backoff_max_seconds",
        default="300",
        parse=float,
        doc="Upper bound of the retry delay's ceiling.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_RETRY_WAIT_SECONDS",
        field="retry_wait_seconds",
        default="90",
        parse=float,
        doc="A doorbell for a queued job due within this long waits inside its push and "
        "claims the job when it is due: a retry backing off this long or less is rung at "
        "once, one backing off longer is rung this long ahead by the sweep (docs/settings.md, "
        "Retries on time). Longer than the sweep's period; 0: no wait.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_CLOCK_SKEW_SECONDS",
        field="clock_skew_seconds",
        default="300",
        parse=float,
        doc="A timestamp further than this in the future is treated as undated (stale).",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_MIN_WRITE_INTERVAL_SECONDS",
        field="min_write_interval_seconds",
        default="1.0",
        parse=float,
        doc="Checkpoint writes to one record are coalesced to at most one per interval.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_SWEEP_MAX_JOBS",
        field="sweep_max_jobs",
        default="1000",
        parse=int,
        doc="Pending records one sweep run reads at most (it lists the whole index and reads the "
        "markers that may need action, a small index whole: docs/operating.md, the sweep).",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_SWEEP_MAX_SECONDS",
        field="sweep_max_seconds",
        default="45",
        parse=float,
        doc="Wall-time budget of one sweep run.",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_DRAIN_MAX_JOBS",
        field="drain_max_jobs",
        default="3",
        parse=int,
        doc="Overdue jobs a claim instance takes from the pending index when a slot frees.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_DRAIN_JOB_SECONDS",
        field="drain_job_seconds",
        default="60",
        parse=float,
        doc="The longest a job taken from the pending index may run: a claim starts one only "
        "while this much of its push deadline is left.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_PUSH_DEADLINE_SECONDS",
        field="push_deadline_seconds",
        default="600",
        parse=float,
        doc="How long a push to claim may take before Pub/Sub gives up on it: the claim "
        "subscription's ack deadline (the function's timeout is never shorter).",
        minimum=10,
    ),
    EnvVar(
        name="RECLAIM_SHUTDOWN_GRACE_SECONDS",
        field="shutdown_grace_seconds",
        default="10",
        parse=float,
        doc="SIGTERM to SIGKILL on the platform: Cloud Run's is 10 s, fixed "
        "(https://cloud.google.com/run/docs/container-contract#instance-shutdown). A claim "
        "lets a running stage finish only when it fits well inside it; the local cloud sets "
        "its own.",
        minimum=0,
    ),
    EnvVar(
        name="RECLAIM_MAX_BODY_BYTES",
        field="max_body_bytes",
        default="1048576",
        parse=int,
        doc="Largest request body submit accepts.",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_MAX_BATCH_JOBS",
        field="max_batch_jobs",
        default="1000",
        parse=int,
        doc="Most jobs one POST /jobs may create.",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_RETENTION_DAYS_DONE",
        field="retention_days_done",
        default="30",
        parse=int,
        doc="Days a done record is kept; the store stamps its custom time for the bucket's "
        "lifecycle rule.",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_RETENTION_DAYS_FAILED",
        field="retention_days_failed",
        default="90",
        parse=int,
        doc="Days a failed record is kept (custom time, as above).",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_RETENTION_DAYS_CANCELLED",
        field="retention_days_cancelled",
        default="30",
        parse=int,
        doc="Days a cancelled record is kept (custom time, as above).",
        minimum=1,
    ),
    EnvVar(
        name="RECLAIM_PIPELINE_MODULES",
        field="pipeline_modules",
        default="",
        parse=_modules,
        doc="Comma-separated modules imported at start so that their pipelines register "
        "(the built-ins need none).",
    ),
    EnvVar(
        name="RECLAIM_UPLOADS_FILE",
        field="uploads_file",
        default="",
        parse=str.strip,
        doc="The upload routes file (uploads.json in your pipelines folder; a relative path "
        "is read from the folder holding shared/); terraform sets it to the file it read. "
        "Empty: no routes, every upload becomes an upload-digest job (docs/pipelines.md).",
    ),
    EnvVar(
        name="RECLAIM_DEAD_LETTER_SUBSCRIPTION",
        field="dead_letter_subscription",
        default="reclaim-dead-letter-hold",
        parse=_name,
        doc="Pull subscription holding what was dead-lettered (the dashboard peeks at it).",
    ),
    EnvVar(
        name="RECLAIM_METRICS_SOURCE",
        field="metrics_source",
        default="",
        parse=_metrics_source,
        doc="Where the dashboard's charts come from: monitoring:<metric prefix> (Cloud "
        "Monitoring, on GCP), logs:<folder> (the local cloud's log files), or empty (none).",
    ),
    EnvVar(
        name="RECLAIM_IAP_AUDIENCE",
        field="iap_audience",
        default="",
        parse=_iap_audience,
        doc="When IAP fronts a service: the audience of its signed header "
        "(/projects/<number>/locations/<region>/services/<name> on Cloud Run); the author of "
        "an action is then read from IAP's verified assertion only (shared/http/identity.py). "
        "Empty: from the ID token Cloud Run's IAM check verified.",
    ),
    EnvVar(
        name="RECLAIM_LOG_LEVEL",
        field="log_level",
        default="INFO",
        parse=_log_level,
        doc="Lowest severity written to the log (DEBUG, INFO, WARNING, ERROR); metric "
        "lines are written at any level (the log-based metrics count them).",
    ),
    EnvVar(
        name="RECLAIM_SCHEDULES_FILE",
        field="schedules_file",
        default="",
        parse=str.strip,
        doc="The cron schedules file; a relative path is from the deployment's root (the "
        "folder holding shared/). Empty: schedules.json of the first pipelines package "
        "that has one, else pipelines/schedules.json.",
    ),
    EnvVar(
        name="RECLAIM_POOLS_FILE",
        field="pools_file",
        default="",
        parse=str.strip,
        doc="The worker pools file (docs/pools.md); a relative path is from the deployment's "
        "root; terraform sets it to the file it made the pools from. Empty: pools.json of the "
        "pipelines package, else pipelines/pools.json, else no pools (one claim for all).",
    ),
    EnvVar(
        name="RECLAIM_POOL",
        field="pool",
        default="",
        parse=_pool,
        doc="The pool this claim function serves (its topic, its pending markers); empty: "
        "the default pool. Only claim reads it.",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The validated settings of one process, and the timings derived from them."""

    project: str
    records_bucket: str
    shard_buckets: tuple[str, ...]
    legacy_names: bool
    uploads_bucket: str
    jobs_topic: str
    max_concurrent: int
    stale_seconds: float
    rollout_skew_seconds: float
    max_attempts: int
    backoff_base_seconds: float
    backoff_max_seconds: float
    retry_wait_seconds: float
    clock_skew_seconds: float
    min_write_interval_seconds: float
    sweep_max_jobs: int
    sweep_max_seconds: float
    drain_max_jobs: int
    drain_job_seconds: float
    push_deadline_seconds: float
    shutdown_grace_seconds: float
    max_body_bytes: int
    max_batch_jobs: int
    retention_days_done: int
    retention_days_failed: int
    retention_days_cancelled: int
    pipeline_modules: tuple[str, ...]
    uploads_file: str
    dead_letter_subscription: str
    metrics_source: str
    iap_audience: str
    log_level: str
    schedules_file: str
    pools_file: str
    pool: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read and validate every setting; raise ConfigError naming the bad one.

        `overrides` replace fields after reading (tests, the CLI's flags).
        """
        values = read_env(ENV_VARS, os.environ if env is None else env)
        values.update(overrides)
        if values["backoff_max_seconds"] < values["backoff_base_seconds"]:
            raise ConfigError("RECLAIM_BACKOFF_MAX_SECONDS must be >= RECLAIM_BACKOFF_BASE_SECONDS")
        settings = cls(**values)
        if settings.records_bucket in settings.shard_buckets:
            raise ConfigError("RECLAIM_SHARD_BUCKETS must not repeat RECLAIM_RECORDS_BUCKET")
        known = settings.pools.names  # a bad pools file stops the process here, named
        if settings.pool not in known:
            raise ConfigError(
                f"RECLAIM_POOL={settings.pool!r} is not a pool of the pools file ({list(known)})"
            )
        own = settings.pools.get(settings.pool).stale_seconds
        if own is not None and "stale_seconds" not in overrides:  # a pool's claim heartbeats
            settings = replace(settings, stale_seconds=own)  # by its pool's stale time
        return settings

    @cached_property
    def pools(self) -> pools.Pools:
        """The deployment's worker pools (shared.pools; read once per process and file)."""
        modules = ",".join(self.pipeline_modules)
        return pools.load_pools(pools_file(self.pools_file, modules))

    def marker_pool(self, job: Mapping[str, Any]) -> str | None:
        """The pool folder of a job's pending marker (None: pending/<id>, the default
        pool's): every marker write and delete asks here (shared.pools.Pools.marker_of)."""
        return self.pools.marker_of(job.get("pipeline"))

    def stale_seconds_of(self, job: Mapping[str, Any]) -> float:
        """The stale time a job is judged by: its pipeline's pool's (status reads, the
        sweep, a claim rescuing another pool's job), else RECLAIM_STALE_SECONDS; at least
        its job pool's start grace while its Cloud Run execution has not started."""
        return self.pools.stale_seconds_for(job, self.stale_seconds)

    @property
    def records_buckets(self) -> tuple[str, ...]:
        """Every record shard's bucket, the home bucket (RECLAIM_RECORDS_BUCKET) first."""
        return (self.records_bucket, *self.shard_buckets)

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.jobs_topic}"

    @property
    def retention_days(self) -> dict[JobStatus, int]:
        """Days each terminal state's record is kept before the lifecycle rule deletes it."""
        return {
            JobStatus.DONE: self.retention_days_done,
            JobStatus.FAILED: self.retention_days_failed,
            JobStatus.CANCELLED: self.retention_days_cancelled,
        }

    # --- timings derived from the stale time (one definition each)

    @property
    def heartbeat_seconds(self) -> float:
        """How often a running job's owner proves it is alive (a write to its record):
        a third of the stale time, so two heartbeats may be lost before the job looks
        abandoned."""
        return self.stale_seconds / 3

    @property
    def heartbeat_tick_seconds(self) -> float:
        """How often the heartbeat thread wakes to flush a coalesced checkpoint or write
        a heartbeat that is due: twice per write interval (or per heartbeat, when that
        is shorter), and at least every 5 s."""
        due = min(self.heartbeat_seconds, max(self.min_write_interval_seconds, 0.05))
        return min(due / 2, 5.0)

    @property
    def ownership_confirm_seconds(self) -> float:
        """How long a proof of ownership stays good: before an output is committed (or
        a stage calls check()) with an older one, the owner writes a fencing heartbeat,
        so a paused zombie learns it lost the job before it commits anything."""
        return self.stale_seconds / 2

    @property
    def busy_retry_after_seconds(self) -> float:
        """Retry-After of a doorbell the in-app slot guard refuses (429; only a direct
        caller meets it, Cloud Run never sends more than the concurrency): a quarter of
        the stale time, between 1 and 30 s."""
        return max(1.0, min(self.stale_seconds / 4, 30.0))

    @property
    def drain_interval_seconds(self) -> float:
        """Least time between two drains' listings of the pending index in one process
        (outside a backlog)."""
        return self.stale_seconds / 4

    @property
    def backlog_window_seconds(self) -> float:
        """How long after a push showed a backlog (its doorbell waited, or was delivered
        before: shared.claim.drain.backlog_sign) the process counts as backlogged: every freed
        slot then takes due jobs from the pending index itself."""
        return self.stale_seconds

    @property
    def overdue_after_seconds(self) -> float:
        """How long a queued job may have been due before the drain takes it (a fresh
        doorbell is probably on its way for anything younger); pending markers younger
        than this are skipped without a read."""
        return self.stale_seconds / 2

    @property
    def orphan_marker_grace_seconds(self) -> float:
        """Age after which the sweep removes a pending marker that has no record (a
        crashed submit); younger ones may belong to a submit in flight."""
        return 2 * self.stale_seconds


assert {v.field for v in ENV_VARS} == {f.name for f in fields(Settings)}
