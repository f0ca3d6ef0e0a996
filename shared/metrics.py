"""The queue's figures as structured log lines: what is logged, and what it means.

reclaim exports no metric itself. The functions write a few log lines with a
``metric`` field (an ``Event``) and numbers beside it; on GCP, log-based metrics
that terraform defines from ``LOG_METRICS`` (terraform/monitoring.tf mirrors this
table; a test compares the two) turn them into Cloud Monitoring time series
(https://cloud.google.com/logging/docs/logs-based-metrics). Locally the same
lines land in the local cloud's log files and ``aggregate`` reads them with the
same table, so the dashboard shows figures computed from the very lines that
production would count. Why logs and not an exporter: docs/seeing.md.

- the sweep (which already lists ``pending/`` and reads each record) logs one
  ``queue`` line per pipeline per run: queued, running, and the age of the oldest
  due job (``queue_gauges``), then one ``sweep`` line;
- the owner logs ``claimed`` (with ``wait_s``, submit to start, on a first
  attempt) and ``finished`` (outcome done, failed or requeued, with ``run_s``);
  cancel logs ``finished`` with outcome cancelled, the watchdog ``rescued`` and,
  when it fails a job out of attempts, ``finished`` failed;
- every function logs ``request_error`` for an answer >= 500 (a claim error is
  one of claim's).

Pure: no I/O but reading the lines it is handed.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from shared import job_queue
from shared.jobs import JobRecord, JobStatus

METRIC_FIELD = "metric"
"""The log field naming the Event a line reports (its log-based metrics filter on it)."""


class Event(StrEnum):
    """What a metric line reports."""

    QUEUE = "queue"
    """Sweep: one pipeline's gauges (queued, running, oldest_due_age_s) this run."""
    SWEEP = "sweep"
    """Sweep: one run finished (its absence means the sweep is not running)."""
    CLAIMED = "claimed"
    """Owner: an attempt started; wait_s on a first attempt (submit or not_before to start)."""
    FINISHED = "finished"
    """An attempt ended: outcome done, failed, requeued or cancelled; run_s for the owner's."""
    RESCUED = "rescued"
    """Watchdog: a running job whose owner went silent was handed back to the queue."""
    REQUEST_ERROR = "request_error"
    """A function answered >= 500 (an outage or a bug); labelled by function."""


class Ending(StrEnum):
    """How an attempt ended (the ``outcome`` label of ``finished``)."""

    DONE = "done"
    FAILED = "failed"
    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    HANDED_BACK = "handed back"  # its instance got SIGTERM (no attempt spent)
    PARKED = "parked"  # a stage ended early to wait: the job holds no slot (no attempt spent)


@dataclass(frozen=True)
class LogMetric:
    """One log-based metric: a counter of Event lines, or a distribution of one field."""

    name: str
    event: Event
    description: str
    value: str | None = None  # the field a distribution extracts; None: a counter
    labels: tuple[str, ...] = ("pipeline",)
    unit: str = "1"

    @property
    def kind(self) -> str:
        return "counter" if self.value is None else "distribution"


LOG_METRICS: tuple[LogMetric, ...] = (
    LogMetric("queue_queued", Event.QUEUE, "Jobs queued (due or backing off).", "queued"),
    LogMetric("queue_running", Event.QUEUE, "Jobs running.", "running"),
    LogMetric(
        "queue_parked", Event.QUEUE, "Jobs waiting: parked by a stage, or for parents.", "parked"
    ),
    LogMetric(
        "queue_oldest_due_age",
        Event.QUEUE,
        "Seconds the oldest due queued job has waited for an owner.",
        "oldest_due_age_s",
        unit="s",
    ),
    LogMetric(
        "jobs_finished",
        Event.FINISHED,
        "Attempts ended, by outcome (done, failed, requeued, cancelled).",
        labels=("pipeline", "outcome"),
    ),
    LogMetric("jobs_rescued", Event.RESCUED, "Jobs whose silent owner's claim was taken back."),
    LogMetric(
        "job_wait",
        Event.CLAIMED,
        "Seconds from submit (or not_before) to the first claim.",
        "wait_s",
        unit="s",
    ),
    LogMetric(
        "job_run",
        Event.FINISHED,
        "Seconds an attempt ran, claim to its end.",
        "run_s",
        labels=("pipeline", "outcome"),
        unit="s",
    ),
    LogMetric("sweep_runs", Event.SWEEP, "Sweep runs that finished.", labels=()),
    LogMetric(
        "request_errors",
        Event.REQUEST_ERROR,
        "Answers >= 500, by function and status.",
        labels=("function", "status"),
    ),
)
METRICS_BY_NAME: dict[str, LogMetric] = {m.name: m for m in LOG_METRICS}


# --------------------------------------------------------------------------- the lines


@dataclass(frozen=True)
class Gauge:
    """One pipeline's pending jobs as one listing of the pending index saw them."""

    pipeline: str
    queued: int = 0
    running: int = 0
    oldest_due_age_s: float = 0.0  # 0 when no queued job is due
    oldest_job_id: str | None = None
    unread: int = 0  # markers counted in queued from the listing alone (not read this run)
    parked: int = 0  # waiting: parked by a stage (shared.features.waits) or for its parents

    def fields(self, *, truncated: bool = False) -> dict[str, Any]:
        """The ``queue`` line's fields."""
        return {
            METRIC_FIELD: Event.QUEUE,
            "pipeline": self.pipeline,
            "queued": self.queued,
            "running": self.running,
            "oldest_due_age_s": round(self.oldest_due_age_s, 3),
            "oldest_job_id": self.oldest_job_id,
            "unread": self.unread,
            "parked": self.parked,
            "truncated": truncated or None,
        }


def _blank() -> dict[str, Any]:
    return {"queued": 0, "running": 0, "age": 0.0, "oldest": None, "unread": 0, "parked": 0}


def queue_gauges(
    records: Iterable[JobRecord],
    now: datetime,
    *,
    pipelines: Iterable[str] = (),
    skew_s: float = job_queue.DEFAULT_SKEW_S,
    unread: Iterable[str | None] = (),
    parked: Iterable[str | None] = (),
) -> dict[str, Gauge]:
    """Gauges per pipeline from pending records; every name in `pipelines` gets one,
    zeros included, so a chart falls to zero instead of stopping. `unread`: the pipelines
    of pending markers whose records were not read (None: unknown), counted as queued
    (their jobs were queued or claimed within the stale time: shared.sweep_plan); `parked`:
    those of unread markers marked due ahead (a park's: shared.features.waits), counted
    as parked. A waiting record (parked, or a child waiting for its parents) is parked."""
    counts: dict[str, dict[str, Any]] = {p: _blank() for p in pipelines}
    for pipeline in unread:
        c = counts.setdefault(str(pipeline or "unknown"), _blank())
        c["queued"] += 1
        c["unread"] += 1
    for pipeline in parked:  # unread markers a park marked due ahead (shared.features.waits)
        c = counts.setdefault(str(pipeline or "unknown"), _blank())
        c["parked"] += 1
        c["unread"] += 1
    for job in records:
        status = job.get("status")
        if status == JobStatus.WAITING:
            c = counts.setdefault(str(job.get("pipeline") or "unknown"), _blank())
            c["parked"] += 1
            continue
        if status not in job_queue.PENDING_STATUSES:
            continue
        pipeline = str(job.get("pipeline") or "unknown")
        c = counts.setdefault(pipeline, _blank())
        if status == JobStatus.RUNNING:
            c["running"] += 1
            continue
        c["queued"] += 1
        if not job_queue.is_due(job, now, skew_s=skew_s):
            continue
        age = job_queue.due_age_seconds(job, now, skew_s=skew_s)
        if age is not None and (c["oldest"] is None or age > c["age"]):
            c["age"], c["oldest"] = age, job.get("id")
    return {
        p: Gauge(p, c["queued"], c["running"], c["age"], c["oldest"], c["unread"], c["parked"])
        for p, c in sorted(counts.items())
    }


def claimed(job: JobRecord, now: datetime, attempt: int) -> dict[str, Any]:
    """The ``claimed`` fields; ``wait_s`` only on a first attempt (submit to start)."""
    out: dict[str, Any] = {METRIC_FIELD: Event.CLAIMED, "pipeline": job.get("pipeline")}
    if attempt == 1:
        age = job_queue.due_age_seconds(job, now)
        if age is not None:
            out["wait_s"] = round(age, 3)
    return out


def finished(job: JobRecord, outcome: str, *, run_s: float | None = None) -> dict[str, Any]:
    """The ``finished`` fields of an attempt's end (run_s: the owner's own attempt)."""
    return {
        METRIC_FIELD: Event.FINISHED,
        "pipeline": job.get("pipeline"),
        "outcome": str(outcome),
        "run_s": None if run_s is None else round(max(run_s, 0.0), 3),
    }


def rescued(job: JobRecord) -> dict[str, Any]:
    return {METRIC_FIELD: Event.RESCUED, "pipeline": job.get("pipeline")}


def sweep_run() -> dict[str, Any]:
    return {METRIC_FIELD: Event.SWEEP}


def request_error(function: str, status: int) -> dict[str, Any]:
    return {METRIC_FIELD: Event.REQUEST_ERROR, "function": function, "status": status}


# --------------------------------------------------------------------------- reading them


def read_log_lines(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every metric line in these files (JSON lines with a ``metric`` field); other
    lines (a server's own output, a torn last line) are skipped."""
    for path in paths:
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    entry = parse_line(line)
                    if entry is not None:
                        yield entry
        except OSError:
            continue


def parse_line(line: str) -> dict[str, Any] | None:
    """A metric line's entry, or None for anything else."""
    if f'"{METRIC_FIELD}"' not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get(METRIC_FIELD) not in Event.__members__.values():
        return None
    return entry


@dataclass
class Buckets:
    """Per label value, one figure per step: a counter's count, or a distribution's
    count, sum and max (the mean is sum / count)."""

    start: datetime
    step_s: int
    size: int
    count: dict[str, list[int]] = field(default_factory=dict)
    total: dict[str, list[float]] = field(default_factory=dict)
    peak: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, index: int, value: float | None) -> None:
        if key not in self.count:
            self.count[key] = [0] * self.size
            self.total[key] = [0.0] * self.size
            self.peak[key] = [0.0] * self.size
        self.count[key][index] += 1
        if value is not None:
            self.total[key][index] += value
            self.peak[key][index] = max(self.peak[key][index], value)

    def mean(self, key: str) -> list[float | None]:
        return [
            (t / c if c else None) for c, t in zip(self.count[key], self.total[key], strict=True)
        ]

    @property
    def times(self) -> list[datetime]:
        return [self.start + timedelta(seconds=i * self.step_s) for i in range(self.size)]


def aggregate(
    entries: Iterable[Mapping[str, Any]],
    metric: LogMetric,
    *,
    start: datetime,
    step_s: int,
    size: int,
    group_by: str | None = None,
    where: Mapping[str, str] | None = None,
) -> Buckets:
    """One metric over time, as its log-based metric would count it: lines of its
    event, in [start, start + size * step_s), grouped by one label (or "all").
    A distribution skips lines whose value is missing or not a number, as Cloud
    Logging does when its extractor finds nothing."""
    out = Buckets(start, step_s, size)
    end = start + timedelta(seconds=step_s * size)
    for entry in entries:
        if entry.get(METRIC_FIELD) != metric.event:
            continue
        if where and any(str(entry.get(k)) != v for k, v in where.items()):
            continue
        at = _entry_time(entry)
        if at is None or not start <= at < end:
            continue
        value: float | None = None
        if metric.value is not None:
            value = _number(entry.get(metric.value))
            if value is None:
                continue
        key = str(entry.get(group_by)) if group_by else "all"
        out.add(key, int((at - start).total_seconds() // step_s), value)
    return out


def _entry_time(entry: Mapping[str, Any]) -> datetime | None:
    return job_queue.parse_time(entry.get("time"))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def latest_gauges(entries: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest ``queue`` line of each pipeline (what the last sweep saw)."""
    newest: dict[str, tuple[datetime, dict[str, Any]]] = {}
    for entry in entries:
        if entry.get(METRIC_FIELD) != Event.QUEUE:
            continue
        at = _entry_time(entry)
        pipeline = str(entry.get("pipeline"))
        if at is not None and (pipeline not in newest or at >= newest[pipeline][0]):
            newest[pipeline] = (at, dict(entry))
    return {p: e for p, (_, e) in sorted(newest.items())}


def totals(entries: Iterable[Mapping[str, Any]], since: datetime) -> dict[str, Any]:
    """Counts since `since` of every counter, by its labels (the /metrics endpoint)."""
    counted: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for entry in entries:
        at = _entry_time(entry)
        if at is None or at < since:
            continue
        for metric in LOG_METRICS:
            if metric.value is None and entry.get(METRIC_FIELD) == metric.event:
                key = ",".join(f"{k}={entry.get(k)}" for k in metric.labels) or "all"
                counted[metric.name][key] += 1
    return {name: dict(sorted(by.items())) for name, by in sorted(counted.items())}
