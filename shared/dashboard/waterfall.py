"""A job's trace as a waterfall on its page: server-side SVG, from the spans exported.

Where the spans come from: locally, the local cloud's collector (reclaim.local.collector,
named by LOCAL_TRACE_COLLECTOR), which holds what the functions exported, a stage's own
spans (ctx.span) included; elsewhere, or when the collector has none yet, the spans built
from the record (shared.traces.spans), the very ones the functions export. On GCP the
page also links to the trace in Cloud Trace's explorer.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from shared.logs import get_logger
from shared.traces.export import COLLECTOR_ENV
from shared.traces.spans import Span, build, duration_s, waterfall_rows
from shared.tracing import TraceContext

log = get_logger(__name__)

READ_TIMEOUT_S = 1.0
MAX_ROWS = 200
COLOURS = {
    "job": "#4b5563",
    "submit": "#0891b2",
    "queued": "#9ca3af",
    "attempt": "#2563eb",
    "stage": "#16a34a",
    "event": "#ea580c",
    "user": "#9333ea",
}
_ROW_H, _W, _LABEL_W, _RIGHT = 20, 760, 250, 70


@dataclass(frozen=True)
class Waterfall:
    """The spans drawn, where they came from, and the trace's id."""

    trace_id: str
    spans: tuple[Span, ...]
    source: str
    """"collector" (what was exported) or "record" (built from the record)."""

    @property
    def svg(self) -> Markup:
        return waterfall_svg(self.spans)


def for_job(record: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Waterfall | None:
    """The waterfall of a job's trace, or None when the record has no trace."""
    trace = build(record)
    if trace is None:
        return None
    collector = (os.environ if env is None else env).get(COLLECTOR_ENV, "").strip()
    if collector:
        exported = read_collector(collector, trace.trace_id)
        if exported:
            return Waterfall(trace.trace_id, tuple(exported), "collector")
    return Waterfall(trace.trace_id, trace.spans, "record")


def read_collector(url: str, trace_id: str) -> list[Span]:
    """The spans the collector holds for `trace_id` ([] when it cannot say)."""
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/v1/traces/{quote(trace_id)}", timeout=READ_TIMEOUT_S
        ) as answer:
            payload = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        log.warning("could not read the trace collector", url=url, error=str(exc))
        return []
    spans = payload.get("spans") if isinstance(payload, dict) else None
    return [s for s in (span_of(item) for item in spans or []) if s is not None]


def span_of(item: object) -> Span | None:
    """A collector's span (reclaim.local.collector's JSON) as a Span; None if unreadable."""
    if not isinstance(item, dict):
        return None
    try:
        start = datetime.fromtimestamp(int(item["start_unix_nano"]) / 1e9, UTC)
        end = datetime.fromtimestamp(int(item["end_unix_nano"]) / 1e9, UTC)
        attributes = item.get("attributes") or {}
        status = item.get("status") or {}
        links = tuple(
            TraceContext(str(link["trace_id"]), str(link["span_id"]))
            for link in item.get("links") or []
        )
        return Span(
            name=str(item["name"]),
            kind=str(attributes.get("reclaim.span", "user")),
            span_id=str(item["span_id"]),
            parent_id=item.get("parent_span_id") or None,
            start=start,
            end=end,
            segment=int(attributes.get("reclaim.attempt", 0) or 0),
            attributes={k: v for k, v in attributes.items() if isinstance(k, str)},
            error=str(status.get("message") or "error") if status.get("code") == "ERROR" else None,
            links=links,
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def cloud_trace_url(project: str, trace_id: str) -> str:
    """The trace in Cloud Trace's explorer (the console's trace details link)."""
    return (
        f"https://console.cloud.google.com/traces/explorer;traceId={quote(trace_id)}"
        f"?project={quote(project)}"
    )


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def waterfall_svg(spans: Sequence[Span]) -> Markup:
    """One row per span, indented under its parent, its bar placed on the trace's time
    axis; a failed span is outlined red; each bar's title says its times."""
    rows = waterfall_rows(spans)[:MAX_ROWS]
    if not rows:
        return Markup('<p class="muted">no spans yet</p>')
    start = min(s.start for _d, s in rows)
    end = max(s.end for _d, s in rows)
    total = max((end - start) / timedelta(seconds=1), 1e-6)
    plot = _W - _LABEL_W - _RIGHT
    height = _ROW_H * len(rows) + 24
    parts = [
        f'<svg class="waterfall" id="waterfall" viewBox="0 0 {_W} {height}" role="img" '
        f'aria-label="the job\'s trace: {len(rows)} spans">',
        f'<text x="{_LABEL_W}" y="12" class="tick">0</text>',
        f'<text x="{_W - _RIGHT}" y="12" class="tick" text-anchor="end">{_seconds(total)}</text>',
    ]
    for i, (depth, span) in enumerate(rows):
        y = 18 + i * _ROW_H
        x = _LABEL_W + plot * ((span.start - start) / timedelta(seconds=1)) / total
        width = max(plot * duration_s(span) / total, 2.0)
        colour = COLOURS.get(span.kind, COLOURS["user"])
        failed = ' stroke="#dc2626" stroke-width="2"' if span.error else ""
        title = f"{span.name}: {_seconds(duration_s(span))} from {span.start:%H:%M:%S.%f}"[:-3] + (
            f" (error: {span.error})" if span.error else ""
        )
        label = ("  " * depth + span.name)[:40]
        parts.append(
            f'<g class="span {escape(span.kind)}" data-name="{escape(span.name)}" '
            f'data-kind="{escape(span.kind)}" data-span-id="{escape(span.span_id)}">'
            f"<title>{escape(title)}</title>"
            f'<text x="{4 + depth * 10}" y="{y + 13}" class="label">{escape(label.strip())}</text>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{_ROW_H - 6}" '
            f'fill="{colour}"{failed}/>'
            f'<text x="{_W - 4}" y="{y + 13}" class="tick" text-anchor="end">'
            f"{_seconds(duration_s(span))}</text></g>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
