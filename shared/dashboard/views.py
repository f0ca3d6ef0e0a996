"""What each page shows, gathered through the Queue facade (no rendering here).

Reads cost what they show: the overview and the batches page list the pending
index once (at most PENDING_LIMIT ids) and read those records in parallel, as the
sweep does; a batch page reads its members; a job page one record. Figures over
time come from the Figures source, never from walking the history.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from shared import bulk, job_queue, metrics
from shared.dashboard.figures import Figures
from shared.errors import BatchNotFound, InvalidInput, NotFound
from shared.features.waits import rules as waits_rules
from shared.http import pages
from shared.jobs import JobRecord
from shared.pipelines import pipeline_names
from shared.queue import Queue
from shared.submission import batch_days

PENDING_LIMIT = 2000
"""Most pending jobs one page reads (more: the page says the figures are partial)."""
ACTIVE_BATCHES_SHOWN = 20
WINDOW_STEPS = 60
STEP_S = 60
PROGRESS_ORDER = (
    "done",
    "failed",
    "cancelled",
    "running",
    "queued",
    "waiting",
    "missing",
    "unreadable",
)


@dataclass
class Pending:
    """The pending index as one listing saw it."""

    records: list[JobRecord]
    truncated: bool
    unreadable: int


def read_pending(queue: Queue) -> Pending:
    ids = queue.pending(limit=PENDING_LIMIT + 1)
    listing = queue.read_many(ids[:PENDING_LIMIT])
    return Pending(listing.records, len(ids) > PENDING_LIMIT, len(listing.corrupt))


@dataclass
class Chart:
    times: list[datetime]
    series: dict[str, list[float | None]]


@dataclass
class Overview:
    gauges: list[metrics.Gauge]
    counts: list[dict[str, Any]]  # one row per pipeline: queued, running, done, failed, ...
    throughput: Chart
    failures: Chart
    waits: dict[str, dict[str, float | None]]  # pipeline -> mean/max wait and run (last hour)
    truncated: bool
    unreadable: int
    figures_note: str | None = None
    active_batches: list[tuple[str, int]] = field(default_factory=list)


def window_start(now: datetime) -> datetime:
    """Start of the charts' hour, on a whole minute."""
    minute = now.replace(second=0, microsecond=0)
    return minute - timedelta(seconds=STEP_S * (WINDOW_STEPS - 1))


def overview(queue: Queue, figures: Figures, now: datetime) -> Overview:
    pending = read_pending(queue)
    skew = queue.settings.clock_skew_seconds
    gauges = metrics.queue_gauges(pending.records, now, pipelines=pipeline_names(), skew_s=skew)
    start = window_start(now)
    note = None
    by_outcome: dict[str, metrics.Buckets] = {}
    run: metrics.Buckets | None = None
    wait: metrics.Buckets | None = None
    try:
        finished = metrics.METRICS_BY_NAME["jobs_finished"]
        for outcome in ("done", "failed", "cancelled"):
            by_outcome[outcome] = figures.series(
                finished,
                start=start,
                step_s=STEP_S,
                size=WINDOW_STEPS,
                group_by="pipeline",
                where={"outcome": outcome},
            )
        span = {"start": start, "step_s": STEP_S * WINDOW_STEPS, "size": 1, "group_by": "pipeline"}
        run = figures.series(metrics.METRICS_BY_NAME["job_run"], **span)  # type: ignore[arg-type]
        wait = figures.series(metrics.METRICS_BY_NAME["job_wait"], **span)  # type: ignore[arg-type]
    except Exception as exc:  # a dashboard must render even when its figures cannot be read
        note = f"figures over time are unavailable: {type(exc).__name__}: {exc}"
    times = [start + timedelta(seconds=STEP_S * i) for i in range(WINDOW_STEPS)]
    rows = []
    for pipeline, gauge in gauges.items():
        row: dict[str, Any] = {
            "pipeline": pipeline,
            "queued": gauge.queued,
            "running": gauge.running,
        }
        for outcome, buckets in by_outcome.items():
            row[outcome] = sum(buckets.count.get(pipeline, []))
        rows.append(row)
    for buckets in by_outcome.values():  # pipelines with finished jobs but none pending
        for pipeline in buckets.count:
            if pipeline not in gauges:
                row = {"pipeline": pipeline, "queued": 0, "running": 0}
                row.update({o: sum(b.count.get(pipeline, [])) for o, b in by_outcome.items()})
                rows.append(row)
                gauges[pipeline] = metrics.Gauge(pipeline)
    waits: dict[str, dict[str, float | None]] = {}
    for name, dist in (("run", run), ("wait", wait)):
        if dist is None:
            continue
        for pipeline in dist.count:
            mean = dist.mean(pipeline)[0]
            peak = dist.peak[pipeline][0]
            waits.setdefault(pipeline, {})[f"{name}_mean"] = mean
            waits.setdefault(pipeline, {})[f"{name}_max"] = peak
    batches = Counter(
        str(r.get("batch_id")) for r in pending.records if r.get("batch_id") is not None
    )
    return Overview(
        gauges=list(gauges.values()),
        counts=sorted(rows, key=lambda r: r["pipeline"]),
        throughput=_chart(times, by_outcome.get("done")),
        failures=_chart(times, by_outcome.get("failed")),
        waits=dict(sorted(waits.items())),
        truncated=pending.truncated,
        unreadable=pending.unreadable,
        figures_note=note,
        active_batches=batches.most_common(ACTIVE_BATCHES_SHOWN),
    )


def _chart(times: list[datetime], buckets: metrics.Buckets | None) -> Chart:
    series: dict[str, list[float | None]] = {}
    for key, counts in sorted((buckets.count if buckets else {}).items()):
        series[key] = [float(c) for c in counts]
    return Chart(times, series)


def progress(counts: dict[str, int]) -> list[tuple[str, int, float, float]]:
    """(status, count, percent, offset percent) segments of a progress bar, terminal
    ones first."""
    total = sum(counts.values()) or 1
    order = [s for s in PROGRESS_ORDER if counts.get(s)] + sorted(
        s for s in counts if s not in PROGRESS_ORDER and counts[s]
    )
    out, offset = [], 0.0
    for status in order:
        pct = 100.0 * counts[status] / total
        out.append((status, counts[status], pct, offset))
        offset += pct
    return out


def active_batches(queue: Queue) -> list[dict[str, Any]]:
    """Batches with a pending member (newest listing), each with its progress."""
    pending = read_pending(queue)
    seen = Counter(str(r["batch_id"]) for r in pending.records if r.get("batch_id"))
    out = []
    for batch_id, _ in seen.most_common(ACTIVE_BATCHES_SHOWN):
        try:
            view = queue.get_batch(batch_id)
        except (BatchNotFound, InvalidInput):  # no marker yet (or a hand-edited batch_id)
            continue
        out.append(batch_summary(view.batch_id, view.counts, view.done))
    return out


def batch_summary(batch_id: str, counts: dict[str, int], done: bool) -> dict[str, Any]:
    total = sum(counts.values())
    finished = sum(counts.get(s, 0) for s in job_queue.TERMINAL_STATUSES)
    return {
        "batch_id": batch_id,
        "total": total,
        "finished": finished,
        "done": done,
        "segments": progress(counts),
        "counts": counts,
    }


@dataclass
class Step:
    """One line of a job's timeline."""

    at: str
    event: str
    took_s: float | None  # time until the next entry (or now, for a pending job's last)
    stage: str | None
    attempt: Any
    owner: Any
    error: str | None


def timeline(record: JobRecord, now: datetime) -> list[Step]:
    """The history with how long each step lasted: a checkpoint's duration is its
    stage's run time (from the claim or the previous checkpoint)."""
    history = record.get("history")
    entries = [e for e in (history if isinstance(history, list) else []) if isinstance(e, dict)]
    times = [job_queue.parse_time(e.get("at")) for e in entries]
    pending = record.get("status") in job_queue.PENDING_STATUSES
    steps = []
    for i, entry in enumerate(entries):
        end = times[i + 1] if i + 1 < len(entries) else (now if pending else None)
        began = times[i]
        took = (
            max((end - began).total_seconds(), 0.0)
            if end is not None and began is not None
            else None
        )
        error = entry.get("error")
        steps.append(
            Step(
                at=str(entry.get("at", "")),
                event=str(entry.get("event", "")),
                took_s=took,
                stage=entry.get("stage") if isinstance(entry.get("stage"), str) else None,
                attempt=entry.get("attempt"),
                owner=entry.get("owner"),
                error=f"{error.get('type')}: {error.get('message')}"
                if isinstance(error, dict)
                else None,
            )
        )
    return steps


def error_fields(error: object) -> dict[str, str] | None:
    """A job's error as the page shows it: its kind ("out of attempts" apart from
    "permanent"), where the pipeline's code raised it and the stage's traceback; a
    hand-edited one (not an object) is shown as stored, as its message."""
    if error is None or error == {}:
        return None
    if not isinstance(error, dict):
        return {
            "type": "",
            "message": str(error),
            "where": "as stored",
            "raised_at": "",
            "traceback": "",
        }
    stage = error.get("stage") or "-"
    kind = job_queue.error_kind(error)
    where = f"stage {stage}, attempt {error.get('attempt')}, {kind}, at {error.get('at')}"
    place = error.get("where")
    raised_at = (
        f"{place.get('file')}:{place.get('line')} in {place.get('function')}"
        if isinstance(place, dict) and place.get("file")
        else ""
    )
    trace = error.get("traceback")
    return {
        "type": str(error.get("type") or ""),
        "message": str(error.get("message")),
        "where": where,
        "raised_at": raised_at,
        "traceback": trace if isinstance(trace, str) else "",
    }


def error_text(error: object) -> str:
    """One line for an error in a table: its message, or the value as stored."""
    if error is None:
        return ""
    if isinstance(error, dict):
        return str(error.get("message", ""))
    return str(error)


def stage_durations(steps: list[Step]) -> list[tuple[str, float]]:
    """(stage, seconds) per committed stage: from the claim (or the previous
    checkpoint) to the checkpoint that committed it."""
    out: list[tuple[str, float]] = []
    start: datetime | None = None
    for step in steps:
        at = job_queue.parse_time(step.at)
        if step.event == "claimed":
            start = at
        elif step.event in ("checkpoint", "done") and start is not None and at is not None:
            out.append((step.stage or "last stage", (at - start).total_seconds()))
            start = at
    return out


def actions(record: JobRecord) -> list[str]:
    """The buttons a job's page offers: the facade's transitions that are legal now (a job
    parked on a waitpoint: Approve and Reject complete it, docs/waiting.md)."""
    status = record.get("status")
    if waits_rules.parked_on(record, "token"):
        return ["approve", "reject", "cancel"]
    if status in job_queue.CANCELLABLE_STATUSES:
        return ["cancel"]
    if status in job_queue.RETRYABLE_STATUSES:
        return ["retry"]
    return []


def waits(record: JobRecord) -> dict[str, Any]:
    """What a parked job waits for, how its last wait ended, its fan-out links (waits)."""
    return waits_rules.view(record)


@dataclass
class Relations:
    """A job's place in a workflow (docs/workflows.md), as its page links it."""

    parents: list[str]  # the record's depends_on
    children: list[str]  # jobs that named it in depends_on (the reverse edges)
    callback_of: str | None  # the batch whose completion created it
    on_parent_failure: str | None
    parent_failure: dict[str, Any] | None  # the parent whose end cancelled (or not) it

    def __bool__(self) -> bool:
        return bool(self.parents or self.children or self.callback_of)


def relations(queue: Queue, record: JobRecord) -> Relations:
    """What the record stores of its workflow, and its children from the reverse edges
    (one listing: what GET /jobs/<id> shows as `children`)."""
    from shared.features import workflows

    found = record.get("depends_on")
    parents = [str(p) for p in found] if isinstance(found, list) else []
    callback_of = record.get("callback_of")
    failure = record.get("parent_failure")
    policy = record.get("on_parent_failure")
    return Relations(
        parents=parents,
        children=workflows.children_of(queue.store, str(record.get("id"))),
        callback_of=str(callback_of) if callback_of else None,
        on_parent_failure=str(policy) if parents and policy else None,
        parent_failure=dict(failure) if isinstance(failure, dict) else None,
    )


def feature_facts(record: JobRecord, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """The features' summary fields the record has (Feature.summary_fields), as text for
    the job page's facts: a list reads as its items joined by commas."""
    shown: list[tuple[str, str]] = []
    for name in names:
        value = record.get(name)
        if value is None:
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        shown.append((name, text))
    return shown


@dataclass
class PipelineState:
    """A registered pipeline as the pipelines page shows it: paused or not, by whom."""

    name: str
    paused: bool
    by: str | None = None
    at: str | None = None


def pipelines(queue: Queue) -> list[PipelineState]:
    """Every registered pipeline with its pause flag (docs/flow-control.md): one listing of
    the flags, one read per paused pipeline."""
    from shared.features.flow_policy import PAUSED_PREFIX

    flags = {b.name[len(PAUSED_PREFIX) :] for b in queue.store.list_blobs(PAUSED_PREFIX)}
    out = []
    for name in pipeline_names():
        if name not in flags:
            out.append(PipelineState(name, False))
            continue
        try:
            flag = json.loads(queue.store.read_blob(f"{PAUSED_PREFIX}{name}").data)
        except (NotFound, ValueError):  # resumed meanwhile, or a flag written by hand
            flag = {}
        flag = flag if isinstance(flag, dict) else {}
        out.append(PipelineState(name, True, _text(flag.get("by")), _text(flag.get("at"))))
    return out


def _text(value: object) -> str | None:
    return None if value is None else str(value)[:120]


def filled(fields: Mapping[str, str], *, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """A form's or query's fields without the empty ones (a browser sends every field of a
    form, a blank one as ""; the API refuses an empty value) and without `drop`."""
    return {k: v.strip() for k, v in fields.items() if v.strip() and k not in drop}


def bulk_links(query: pages.Query) -> list[tuple[str, str]]:
    """(action, /bulk URL) for the bulk actions a search's filters can also select (the
    CLI's selection: batch, status, pipeline; a tag is no bulk selection)."""
    if query.tag is not None or not (query.batch or query.status or query.pipeline):
        return []
    out = []
    for action, statuses in bulk.ACTS_ON.items():
        if query.status is not None and query.status not in statuses:
            continue
        selection = {"batch": query.batch, "status": query.status, "pipeline": query.pipeline}
        args = {"action": action, **{k: str(v) for k, v in selection.items() if v}}
        out.append((action, "/bulk?" + urlencode(args)))
    return out


def needs_batch(asked: Mapping[str, str]) -> bool:
    """A search for done jobs without a batch or a tag: no index holds every done job
    (it would grow with the history), so only a batch's or a tag's markers find them."""
    return asked.get("status") == "done" and not (asked.get("batch") or asked.get("tag"))


def local_log_dir(metrics_source: str) -> str | None:
    """The local cloud's log folder (its figures come from `logs:<folder>`), or None on
    GCP, where a job's trace links to Cloud Logging."""
    kind, _, where = metrics_source.partition(":")
    return where if kind == "logs" and where else None


FINISHED_SHOWN = 200
SUBMITTED_SHOWN = 200
"""Most jobs one day's page lists per status (the rest: the CLI's `reclaim retry --since`)."""
FINISHED_STATUSES = ("failed", "cancelled")


@dataclass
class FinishedDay:
    """One day of ended jobs of one status, as the ended index holds them."""

    day: str
    status: str
    jobs: list[dict[str, Any]]
    truncated: bool
    unreadable: list[str]
    previous: str
    next: str | None
    batches: list[tuple[str, int]]
    submitted: list[str]
    """Batches submitted that day (shared.submission.batch_days): their done jobs too."""
    more_submitted: bool


def finished_day(queue: Queue, day_text: str, status_text: str, now: datetime) -> FinishedDay:
    """The jobs of `status` that ended on `day` (UTC; default today), newest index first,
    with the batches they belong to; InvalidInput names a bad day or status."""
    from shared.features.flow_policy import ended_day_prefixes

    status = status_text or "failed"
    if status not in FINISHED_STATUSES:
        raise InvalidInput(
            f"status must be failed or cancelled (done jobs are found by their batch, listed "
            f"by the day it was submitted, or by tag), "
            f"got {status[:40]!r}",
            "status",
        )
    today = now.astimezone(UTC).date()
    try:
        day = date.fromisoformat(day_text) if day_text else today
    except ValueError:
        raise InvalidInput(f"day must be YYYY-MM-DD, got {day_text[:40]!r}", "day") from None
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    ids: list[str] = []
    for prefix in ended_day_prefixes(status, start):
        ids += [
            b.name[len(prefix) :] for b in queue.store.list_blobs(prefix, limit=FINISHED_SHOWN + 1)
        ]
    ids = sorted(set(ids))
    found = queue.read_many(ids[:FINISHED_SHOWN])
    jobs = sorted(
        (status_summary(r) for r in found.records if r.get("status") == status),
        key=lambda j: str(j.get("updated_at") or ""),
        reverse=True,
    )
    batches = Counter(str(j["batch_id"]) for j in jobs if j.get("batch_id"))
    submitted = batch_days.submitted_on(queue.store, day, SUBMITTED_SHOWN + 1)
    after = day + timedelta(days=1)
    return FinishedDay(
        day=day.isoformat(),
        status=status,
        jobs=jobs,
        truncated=len(ids) > FINISHED_SHOWN,
        unreadable=sorted(found.corrupt),
        previous=(day - timedelta(days=1)).isoformat(),
        next=after.isoformat() if after <= today else None,
        batches=batches.most_common(ACTIVE_BATCHES_SHOWN),
        submitted=submitted[:SUBMITTED_SHOWN],
        more_submitted=len(submitted) > SUBMITTED_SHOWN,
    )


def status_summary(record: JobRecord) -> dict[str, Any]:
    """A job in the day's table: its summary, with the batch it belongs to."""
    from shared.status import summary

    return {**summary(record), "batch_id": record.get("batch_id")}
