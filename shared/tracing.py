"""W3C trace context for a job's whole life, and the Cloud Logging fields that show it.

A job gets a ``traceparent`` of its own when it is created: a new trace, never the
submit request's. On GCP every request has one (Cloud Run's front end sets
``traceparent`` when the client did not), so a child of it would put every job of a
batch, and every retry of them, in one trace. The request's trace id is kept as a
plain log field instead (``submit_trace`` on submit's "job created" line), the link
from a request to its jobs. The RECORD carries the job's trace (so a retry, a
rescue or a re-rung doorbell keeps it) and so does each doorbell's attributes.
Every log line about the job carries Cloud Logging's trace fields
(``logging.googleapis.com/trace`` = ``projects/<project>/traces/<trace id>``,
``spanId``, ``trace_sampled``:
https://cloud.google.com/logging/docs/structured-logging#special-payload-fields),
so one filter, ``trace="projects/P/traces/T"``, shows it across submit, claim,
drain and sweep.

The same trace is exported as spans (this room): ``spans`` builds them from the record
alone (pure: span ids derived from the job, attempt and stage, so exporting again writes
the same spans), ``stage`` records the spans a stage adds (``ctx.span``), and ``export``
sends them in the request that ends an attempt, one call, no background thread
(docs/seeing.md). This module is the context helpers: stdlib only, at the bottom of the
import graph (records and logs read it), so it imports nothing of its room.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

TRACEPARENT_HEADER = "traceparent"
"""The request header, the record field and the doorbell attribute: one name."""

TRACE_FIELD = "logging.googleapis.com/trace"
SPAN_FIELD = "logging.googleapis.com/spanId"
SAMPLED_FIELD = "logging.googleapis.com/trace_sampled"

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_SAMPLED = 0x01


@dataclass(frozen=True)
class TraceContext:
    """One span of one trace: ids as lowercase hex, and the sampled flag."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        """The version-00 header value."""
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    def child(self) -> TraceContext:
        """A new span of the same trace (the job's own span under the request's)."""
        return TraceContext(self.trace_id, _new_span_id(), self.sampled)

    def with_span(self, span_id: str) -> TraceContext:
        """The same trace and sampled flag, at another span (a stage's, an attempt's)."""
        return TraceContext(self.trace_id, span_id, self.sampled)


def parse(value: object) -> TraceContext | None:
    """A traceparent header value, or None if it is not a valid one.

    Version ff is forbidden; a higher known-format version is read by its first
    four fields, as the spec asks of a parser of version 00.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    match = _TRACEPARENT.fullmatch(text[:55])
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(text) != 55):
        return None
    if version != "00" and len(text) > 55 and text[55] != "-":
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & _SAMPLED))


def new_trace() -> TraceContext:
    """A fresh trace, sampled (the ids are random, as the spec recommends)."""
    trace_id = secrets.token_hex(16)
    while trace_id == _ZERO_TRACE:  # pragma: no cover - one chance in 2**128
        trace_id = secrets.token_hex(16)
    return TraceContext(trace_id, _new_span_id())


def for_job() -> TraceContext:
    """The trace of a new job: a trace of its own (see the module's docstring)."""
    return new_trace()


def trace_id(traceparent: object) -> str | None:
    """The trace id of a traceparent (the submit request's, logged as a link), or None."""
    context = parse(traceparent)
    return context.trace_id if context is not None else None


def log_fields(traceparent: object, project: str | None) -> dict[str, Any]:
    """Cloud Logging's special trace fields for a traceparent; {} if it is not valid.

    Without a project the resource name cannot be built: the raw ids are given instead.
    """
    context = parse(traceparent)
    if context is None:
        return {}
    if not project:
        return {"trace_id": context.trace_id, "span_id": context.span_id}
    return {
        TRACE_FIELD: f"projects/{project}/traces/{context.trace_id}",
        SPAN_FIELD: context.span_id,
        SAMPLED_FIELD: context.sampled,
    }


def derived_span_id(trace_id: str, *parts: object) -> str:
    """A span id that is a function of the trace and `parts` (job, attempt, stage, ...):
    a span built again after a crash gets the id it had, so exporting it twice writes one
    span. 8 bytes of SHA-256, never all zero (the spec forbids it)."""
    key = "\x1f".join([trace_id, *(str(part) for part in parts)]).encode("utf-8")
    span_id = hashlib.sha256(key).hexdigest()[:16]
    return span_id if span_id != _ZERO_SPAN else "0" * 15 + "1"


def _new_span_id() -> str:
    span_id = secrets.token_hex(8)
    while span_id == _ZERO_SPAN:  # pragma: no cover - one chance in 2**64
        span_id = secrets.token_hex(8)
    return span_id
