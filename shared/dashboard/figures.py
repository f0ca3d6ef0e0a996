"""Figures over time for the dashboard's charts, from wherever the metric lines went.

One question, asked of one of two sources: "this log-based metric, per step, over
this window, grouped by one label". Locally (``logs:<folder>``) the answer is
computed from the functions' log files with shared.metrics.aggregate; on GCP
(``monitoring:<prefix>``) Cloud Monitoring answers it from the log-based metrics'
time series (projects.timeSeries.list,
https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/list),
so a page costs a few API reads whatever the traffic was.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from shared import job_queue, metrics
from shared.metrics import Buckets, LogMetric

MONITORING_API = "https://monitoring.googleapis.com/v3"
_LINES_KEPT = timedelta(hours=2)


class Figures(Protocol):
    """What the dashboard asks of a source of figures."""

    description: str

    def series(
        self,
        metric: LogMetric,
        *,
        start: datetime,
        step_s: int,
        size: int,
        group_by: str | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Buckets: ...


def from_setting(value: str, project: str) -> Figures:
    """The source RECLAIM_METRICS_SOURCE names (validated by shared.config)."""
    kind, _, where = value.partition(":")
    if kind == "logs":
        return LogFiles(Path(where))
    if kind == "monitoring":
        return Monitoring(project, where)
    return NoFigures()


class NoFigures:
    description = "no metrics source is configured (RECLAIM_METRICS_SOURCE)"

    def series(
        self, metric: LogMetric, *, start: datetime, step_s: int, size: int, **_: Any
    ) -> Buckets:
        return Buckets(start, step_s, size)


class LogFiles:
    """The local cloud's log folder: each *.log read incrementally, metric lines kept
    for two hours (the local stand-in for Cloud Logging plus the log-based metrics)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.description = f"the metric lines of the local cloud's logs ({folder.name}/*.log)"
        self._offsets: dict[Path, int] = {}
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def entries(self) -> list[dict[str, Any]]:
        """Every metric line read so far (new lines are read on each call)."""
        with self._lock:
            for path in sorted(self.folder.glob("*.log")):
                self._read_new(path)
            dated = [t for t in (_time(e) for e in self._entries) if t is not None]
            newest = max(dated, default=None)
            if newest is not None:
                cut = newest - _LINES_KEPT
                self._entries = [e for e in self._entries if (_time(e) or cut) >= cut]
            return list(self._entries)

    def _read_new(self, path: Path) -> None:
        offset = self._offsets.get(path, 0)
        try:
            with path.open("rb") as fh:
                fh.seek(0, 2)
                if fh.tell() < offset:  # truncated or replaced: read it again
                    offset = 0
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return
        complete = data.rfind(b"\n") + 1  # a torn last line is read next time, whole
        self._offsets[path] = offset + complete
        for raw in data[:complete].decode("utf-8", "replace").splitlines():
            entry = metrics.parse_line(raw)
            if entry is not None:
                self._entries.append(entry)

    def series(
        self,
        metric: LogMetric,
        *,
        start: datetime,
        step_s: int,
        size: int,
        group_by: str | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Buckets:
        return metrics.aggregate(
            self.entries(),
            metric,
            start=start,
            step_s=step_s,
            size=size,
            group_by=group_by,
            where=where,
        )


class Monitoring:
    """Cloud Monitoring's time series of the log-based metrics (read with the
    function's own identity: terraform grants it roles/monitoring.viewer)."""

    def __init__(self, project: str, prefix: str, session: Any = None) -> None:
        self.project = project
        self.prefix = prefix
        self.description = f"Cloud Monitoring, log-based metrics {prefix}/* of {project}"
        self._session = session

    def series(
        self,
        metric: LogMetric,
        *,
        start: datetime,
        step_s: int,
        size: int,
        group_by: str | None = None,
        where: Mapping[str, str] | None = None,
    ) -> Buckets:
        params = query(self.prefix, metric, start, step_s, size, group_by, where)
        url = f"{MONITORING_API}/projects/{self.project}/timeSeries"
        out = Buckets(start, step_s, size)
        while True:
            response = self._authorized().get(url, params=params, timeout=20)
            response.raise_for_status()
            body = response.json()
            add_points(out, body, metric, group_by)
            token = body.get("nextPageToken")
            if not token:
                return out
            params = {**params, "pageToken": token}

    def _authorized(self) -> Any:
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            scopes = ["https://www.googleapis.com/auth/monitoring.read"]
            credentials, _ = google.auth.default(scopes=scopes)
            self._session = AuthorizedSession(credentials)
        return self._session


def query(
    prefix: str,
    metric: LogMetric,
    start: datetime,
    step_s: int,
    size: int,
    group_by: str | None,
    where: Mapping[str, str] | None,
) -> dict[str, str]:
    """timeSeries.list parameters: the metric (user-defined log-based metrics are
    logging.googleapis.com/user/<name>), summed per step and grouped by one label; a
    distribution is read as its mean per step (ALIGN_MEAN is valid for DELTA
    distributions) and its count."""
    end = start + timedelta(seconds=step_s * size)
    filters = [f'metric.type="logging.googleapis.com/user/{prefix}/{metric.name}"']
    filters += [f'metric.label.{k}="{v}"' for k, v in sorted((where or {}).items())]
    params = {
        "filter": " AND ".join(filters),
        "interval.startTime": job_queue.format_time(start),
        "interval.endTime": job_queue.format_time(end),
        "aggregation.alignmentPeriod": f"{step_s}s",
        "aggregation.perSeriesAligner": "ALIGN_DELTA",
        "aggregation.crossSeriesReducer": "REDUCE_SUM",
        "view": "FULL",
    }
    if group_by:
        params["aggregation.groupByFields"] = f"metric.label.{group_by}"
    return params


def add_points(
    out: Buckets, body: Mapping[str, Any], metric: LogMetric, group_by: str | None
) -> None:
    """Fold one timeSeries.list answer into the buckets (a point's end time names its step)."""
    for series in body.get("timeSeries", []):
        labels = series.get("metric", {}).get("labels", {})
        key = str(labels.get(group_by, "")) if group_by else "all"
        for point in series.get("points", []):
            end = job_queue.parse_time(point.get("interval", {}).get("endTime"))
            if end is None:
                continue
            index = int((end - out.start).total_seconds() // out.step_s) - 1
            if not 0 <= index < out.size:
                continue
            value = point.get("value", {})
            if "distributionValue" in value:
                dist = value["distributionValue"]
                count = int(dist.get("count", 0))
                for _ in range(count):
                    out.add(key, index, float(dist.get("mean", 0.0)))
            else:
                for _ in range(int(value.get("int64Value", 0))):
                    out.add(key, index, None)


def _time(entry: Mapping[str, Any]) -> datetime | None:
    return job_queue.parse_time(entry.get("time"))
