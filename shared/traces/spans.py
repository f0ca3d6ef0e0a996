"""A job's trace as spans, built from its record alone (pure: stdlib and the vocabulary).

One job is one trace, its id the record's ``traceparent``. Its spans:

- the job itself (the root, the record's own span id): created to its end; built once the
  job is terminal;
- ``submit``: the creation, linked to the submit request's own trace (``submit_traceparent``);
- ``queued``: each wait for a claim, from entering the queue (submitted, requeued, rescued,
  handed back, retried, released) to the claim;
- ``attempt N``: each claim to its end, and under it each stage, from the checkpoint times
  (the claim to the first checkpoint, one checkpoint to the next, the last to the end);
- the events between, each a span of its own: ``requeued`` (its backoff until
  ``not_before``), ``timed out``, ``rescued`` (from the owner's last sign of life to the
  rescue), ``handed back``, ``deferred``, ``retried``, ``released``, ``dispatched``,
  ``adopted``, and the end (``done``, ``failed``, ``cancelled``).

Span ids are derived from (trace, job, attempt, what, stage index), never drawn, so the
record built again after a crash gives the same spans, and exporting them again writes the
same ones. Each span names the attempt whose end exports it (``segment``): the request
that ends attempt N exports the spans of segment N (and the root, once the job ended), so
in the usual run each span is sent once. A record whose history was trimmed
(``history_dropped``) gives the spans of what it still holds.

The history keeps the checkpoint times a write recorded: when checkpoints were coalesced
(two stage boundaries inside RECLAIM_MIN_WRITE_INTERVAL_SECONDS) the stages between two
written checkpoints are one span, named after both (its ``reclaim.stages`` attribute
counts them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import tracing
from shared.jobs import JobStatus

AttributeValue = str | int | float | bool
TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
ROOT_SEGMENT = 0
"""The root's segment: exported with whatever attempt ends the job."""
TIMED_OUT_TYPE = "TimedOut"  # shared.claim.timeouts.TimedOut, by name (this module is pure)


@dataclass(frozen=True)
class Span:
    """One span of a job's trace, ready for an exporter or a waterfall."""

    name: str
    kind: str
    """job, submit, queued, attempt, stage, event or user (a stage's own ctx.span)."""
    span_id: str
    parent_id: str | None
    start: datetime
    end: datetime
    segment: int
    """The attempt whose end exports it (ROOT_SEGMENT: the job's own span)."""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    error: str | None = None
    """Set when the span ended in an error (the span's status)."""
    links: tuple[tracing.TraceContext, ...] = ()


@dataclass(frozen=True)
class JobTrace:
    """The spans of one job's trace, and the context they belong to."""

    job_id: str
    context: tracing.TraceContext
    """The job's own traceparent: trace id, the root's span id, the sampled flag."""
    terminal: bool
    spans: tuple[Span, ...]
    last_attempt: int = 0
    """The highest attempt the history shows: the one whose end exports the root."""

    @property
    def trace_id(self) -> str:
        return self.context.trace_id

    def segment(self, attempt: int) -> list[Span]:
        """What the request that ended `attempt` exports: that attempt's spans, and the
        job's own span once the job ended."""
        ends = self.terminal and attempt >= self.last_attempt
        return [
            s for s in self.spans if s.segment == attempt or (s.segment == ROOT_SEGMENT and ends)
        ]


def attempt_span_id(context: tracing.TraceContext, job_id: str, attempt: int) -> str:
    return tracing.derived_span_id(context.trace_id, job_id, attempt, "attempt")


def stage_span_id(context: tracing.TraceContext, job_id: str, attempt: int, index: int) -> str:
    return tracing.derived_span_id(context.trace_id, job_id, attempt, "stage", index)


def build(record: Mapping[str, Any]) -> JobTrace | None:
    """The job's trace from its record; None when it has no valid traceparent (a record
    from before traces existed: nothing to join)."""
    context = tracing.parse(record.get("traceparent"))
    if context is None:
        return None
    walk = _Walk(record, context)
    for entry in _entries(record):
        walk.step(entry)
    walk.finish()
    status = record.get("status")
    terminal = status in TERMINAL
    return JobTrace(str(record.get("id")), context, terminal, tuple(walk.spans), walk.attempts)


# --------------------------------------------------------------------------- the walk


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _int(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _entries(record: Mapping[str, Any]) -> list[tuple[datetime, Mapping[str, Any]]]:
    """The history's readable entries, oldest first (an entry without a time is skipped)."""
    history = record.get("history")
    out: list[tuple[datetime, Mapping[str, Any]]] = []
    for entry in history if isinstance(history, list) else []:
        at = _time(entry.get("at")) if isinstance(entry, dict) else None
        if at is not None and isinstance(entry, dict):
            out.append((at, entry))
    return out


@dataclass
class _Attempt:
    number: int
    start: datetime
    stage_index: int
    stage_start: datetime
    last_seen: datetime
    owner: str | None


class _Walk:
    """Reads the history once, oldest first, opening and closing spans as it goes."""

    def __init__(self, record: Mapping[str, Any], context: tracing.TraceContext) -> None:
        self.record = record
        self.context = context
        self.job_id = str(record.get("id"))
        self.root = context.span_id
        self.spans: list[Span] = []
        created = _time(record.get("created_at"))
        self.created = created
        self.queue_since: datetime | None = created
        self.queue_why = "submitted"
        self.next_stage = 0  # where the next attempt resumes (the last checkpoint's)
        self.attempts = 0  # the highest attempt seen
        self.attempt: _Attempt | None = None
        self.ended: datetime | None = None
        checkpoint = record.get("checkpoint")
        completed = checkpoint.get("completed") if isinstance(checkpoint, dict) else None
        self.names: list[str] = [str(n) for n in completed] if isinstance(completed, list) else []
        self.learned: dict[int, str] = {}  # a stage's name the history gives later (done)
        self.moved: dict[int, int] = {}  # an attempt taken over: its spans go with the taker's
        self.submit_seen = False

    # --- helpers

    def _id(self, *parts: object) -> str:
        return tracing.derived_span_id(self.context.trace_id, self.job_id, *parts)

    def _add(
        self,
        name: str,
        kind: str,
        span_id: str,
        parent: str | None,
        start: datetime,
        end: datetime,
        segment: int,
        attributes: Mapping[str, AttributeValue] | None = None,
        error: str | None = None,
        links: tuple[tracing.TraceContext, ...] = (),
    ) -> None:
        end = max(end, start)
        attrs = {"reclaim.job_id": self.job_id, **(attributes or {})}
        self.spans.append(
            Span(name, kind, span_id, parent, start, end, segment, attrs, error, links)
        )

    def _event(
        self,
        name: str,
        at: datetime,
        segment: int,
        *,
        until: datetime | None = None,
        key: object = None,
        parent: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        error: str | None = None,
    ) -> None:
        span_id = self._id(segment, "event", name, key if key is not None else at.isoformat())
        self._add(
            name, "event", span_id, parent or self.root, at, until or at, segment, attributes, error
        )

    def _stage_name(self, index: int, fallback: object = None) -> str:
        if 0 <= index < len(self.names):
            return self.names[index]
        if isinstance(fallback, str) and fallback:
            self.learned[index] = fallback
            return fallback
        return self.learned.get(index, _placeholder(index))

    def _stages(
        self,
        a: _Attempt,
        until: datetime,
        upto: int,
        *,
        last_name: object = None,
        error: str | None = None,
        keep_empty: bool = True,
    ) -> None:
        """Close the stages a.stage_index .. upto-1 at `until` (one span: coalesced)."""
        first = a.stage_index
        if upto <= first or (not keep_empty and until <= a.stage_start):
            a.stage_start = max(a.stage_start, until)
            return
        names = [self._stage_name(i) for i in range(first, upto)]
        names[-1] = self._stage_name(upto - 1, last_name)
        attributes: dict[str, AttributeValue] = {
            "reclaim.attempt": a.number,
            "reclaim.stage_index": first,
        }
        if len(names) > 1:
            attributes["reclaim.stages"] = len(names)
        self._add(
            " + ".join(names),
            "stage",
            stage_span_id(self.context, self.job_id, a.number, first),
            attempt_span_id(self.context, self.job_id, a.number),
            a.stage_start,
            until,
            a.number,
            attributes,
            error,
        )
        a.stage_index = upto
        a.stage_start = until

    def _close_attempt(
        self, end: datetime, outcome: str, segment: int | None = None, error: str | None = None
    ) -> None:
        a = self.attempt
        if a is None:
            return
        self._add(
            f"attempt {a.number}",
            "attempt",
            attempt_span_id(self.context, self.job_id, a.number),
            self.root,
            a.start,
            end,
            a.number if segment is None else segment,
            {
                "reclaim.attempt": a.number,
                "reclaim.owner": a.owner or "",
                "reclaim.outcome": outcome,
            },
            error,
        )
        self.attempt = None

    def _enqueue(self, at: datetime, why: str) -> None:
        self.queue_since, self.queue_why = at, why

    # --- the entries

    def step(self, item: tuple[datetime, Mapping[str, Any]]) -> None:
        at, entry = item
        event = entry.get("event")
        if self.attempt is not None and event not in ("claimed",):
            self.attempt.last_seen = max(self.attempt.last_seen, at)
        handler = _HANDLERS.get(str(event))
        if handler is not None:
            handler(self, at, entry)

    def _submitted(self, at: datetime, entry: Mapping[str, Any]) -> None:
        self.submit_seen = True
        link = tracing.parse(self.record.get("submit_traceparent"))
        self._add(
            "submit",
            "submit",
            self._id(0, "submit"),
            self.root,
            at,
            at,
            1,
            {"reclaim.pipeline": str(self.record.get("pipeline"))},
            links=(link,) if link is not None else (),
        )
        self._enqueue(at, "submitted")

    def _claimed(self, at: datetime, entry: Mapping[str, Any]) -> None:
        number = _int(entry.get("attempt")) or self.attempts + 1
        if self.attempt is not None:  # a claim took a stale running job over: a rescue
            self._rescued_by(at, number)
        if self.queue_since is not None:
            attrs: dict[str, AttributeValue] = {"reclaim.entered": self.queue_why}
            self._add(
                "queued", "queued", self._id(number, "queued"), self.root,
                self.queue_since, at, number, attrs,
            )  # fmt: skip
        self.queue_since = None
        self.attempts = max(self.attempts, number)
        owner = entry.get("owner")
        self.attempt = _Attempt(
            number, at, self.next_stage, at, at, owner if isinstance(owner, str) else None
        )

    def _rescued_by(self, at: datetime, number: int) -> None:
        """A claim took the stale attempt over: no request exported its end, so its spans
        (and all before them) go with the taker's end."""
        a = self.attempt
        assert a is not None
        self.moved[a.number] = number
        self._stages(a, a.last_seen, a.stage_index + 1, error="the owner went silent")
        self._event("rescued", a.last_seen, number, until=at, key=a.number)
        self._close_attempt(a.last_seen, "rescued", segment=number, error="the owner went silent")

    def _checkpoint(self, at: datetime, entry: Mapping[str, Any]) -> None:
        upto = _int(entry.get("next_stage"))
        if upto is None:
            return
        if self.attempt is not None:
            self._stages(self.attempt, at, upto, last_name=entry.get("stage"))
        running = entry.get("running")
        if isinstance(running, str) and running and upto >= len(self.names):
            self.learned.setdefault(upto, running)  # the stage that started then
        self.next_stage = upto

    def _ended_run(
        self, at: datetime, entry: Mapping[str, Any], outcome: str, error: str | None
    ) -> int:
        """Close the running attempt (its stage in progress, then itself); its number."""
        a = self.attempt
        if a is None:
            return self.attempts + (0 if outcome in ("done", "failed", "cancelled") else 1)
        failing = entry.get("error")
        stage = failing.get("stage") if isinstance(failing, dict) else entry.get("stage")
        keep = outcome not in ("handed back", "cancelled")
        upto = _int(entry.get("next_stage")) if outcome == "done" else None
        if upto is None or upto <= a.stage_index:  # done names how many stages there were:
            upto = a.stage_index + 1  # the ones after a coalesced checkpoint end here too
        self._stages(a, at, upto, last_name=stage, error=error, keep_empty=keep)
        number = a.number
        self._close_attempt(at, outcome, error=error)
        return number

    def _requeued(self, at: datetime, entry: Mapping[str, Any]) -> None:
        if self.attempt is None:  # the sweep rang a queued job whose doorbell was lost
            self._event("re-rung", at, self.attempts + 1)
            return
        failing = entry.get("error")
        kind = failing.get("type") if isinstance(failing, dict) else None
        message = str(failing.get("message")) if isinstance(failing, dict) else None
        name = "timed out" if kind == TIMED_OUT_TYPE else "requeued"
        number = self._ended_run(at, entry, name, message)
        until = _time(entry.get("not_before"))
        attrs: dict[str, AttributeValue] = {"reclaim.attempt": number}
        if kind:
            attrs["reclaim.error_type"] = str(kind)
        if until is not None:
            attrs["reclaim.backoff_s"] = round((until - at).total_seconds(), 3)
        self._event(name, at, number, until=until, key=number, attributes=attrs, error=message)
        self._enqueue(at, name)

    def _rescued(self, at: datetime, entry: Mapping[str, Any]) -> None:
        a = self.attempt
        number = _int(entry.get("attempt")) or self.attempts
        seen = _time(entry.get("last_seen"))
        if a is not None:
            silent = seen if seen is not None and a.start <= seen <= at else a.last_seen
            self._stages(a, silent, a.stage_index + 1, error="the owner went silent")
            self._close_attempt(silent, "rescued", error="the owner went silent")
        else:
            silent = at
        attrs: dict[str, AttributeValue] = {"reclaim.attempt": number}
        owner = entry.get("owner")
        if isinstance(owner, str):
            attrs["reclaim.owner"] = owner
        self._event("rescued", silent, number, until=at, key=number, attributes=attrs)
        self._enqueue(at, "rescued")

    def _handed_back(self, at: datetime, entry: Mapping[str, Any]) -> None:
        number = self._ended_run(at, entry, "handed back", None)
        self._event("handed back", at, number, key=number, attributes={"reclaim.attempt": number})
        self._enqueue(at, "handed back")

    def _terminal(self, at: datetime, entry: Mapping[str, Any]) -> None:
        event = str(entry.get("event"))
        failing = entry.get("error")
        message = str(failing.get("message")) if isinstance(failing, dict) else None
        if event == "cancelled":
            reason = entry.get("reason")
            message = str(reason) if isinstance(reason, str) else None
        number = self._ended_run(at, entry, event, message if event == "failed" else None)
        segment = number if number > 0 else max(self.attempts, 1)
        self._event(event, at, segment, key=segment, error=message if event == "failed" else None)
        self.queue_since = None
        self.ended = at

    def _retried(self, at: datetime, entry: Mapping[str, Any]) -> None:
        self.ended = None
        by = entry.get("by")
        attrs = {"reclaim.by": by} if isinstance(by, str) else {}
        self._event("retried", at, self.attempts + 1, attributes=attrs)
        self._enqueue(at, "retried")

    def _between(self, at: datetime, entry: Mapping[str, Any]) -> None:
        """released, deferred: an event before the next attempt."""
        event = str(entry.get("event"))
        reason = entry.get("reason")
        attrs = {"reclaim.reason": reason} if isinstance(reason, str) else {}
        self._event(event, at, self.attempts + 1, attributes=attrs)
        if event == "released":
            self._enqueue(at, "released")

    def _in_attempt(self, at: datetime, entry: Mapping[str, Any]) -> None:
        """dispatched, adopted: a Cloud Run job execution takes the attempt over."""
        a = self.attempt
        if a is None:
            return
        execution = entry.get("execution")
        attrs = {"reclaim.execution": execution} if isinstance(execution, str) else {}
        parent = attempt_span_id(self.context, self.job_id, a.number)
        event = str(entry.get("event"))
        self._event(event, at, a.number, key=a.number, parent=parent, attributes=attrs)

    # --- the end of the history

    def _rename(self) -> None:
        """A stage cut short before its name was known (a hand-back, a rescue) takes the
        name a later entry gave that index (the done entry names the last stage)."""
        for i, span in enumerate(self.spans):
            index = span.attributes.get("reclaim.stage_index")
            single = span.kind == "stage" and "reclaim.stages" not in span.attributes
            if single and isinstance(index, int) and span.name == _placeholder(index):
                self.spans[i] = replace(span, name=self.learned.get(index, span.name))

    def _move(self) -> None:
        for i, span in enumerate(self.spans):
            segment = span.segment
            while segment in self.moved:
                segment = self.moved[segment]
            if segment != span.segment:
                self.spans[i] = replace(span, segment=segment)

    def finish(self) -> None:
        self._rename()
        if (
            not self.submit_seen
            and self.created is not None
            and not self.record.get("history_dropped")
        ):
            self._submitted(self.created, {})  # a record made without its first entry
            self.spans.insert(0, self.spans.pop())
        self._move()
        if self.ended is None or self.created is None:
            return
        attrs: dict[str, AttributeValue] = {
            "reclaim.pipeline": str(self.record.get("pipeline")),
            "reclaim.status": str(self.record.get("status")),
            "reclaim.attempts": self.attempts,
        }
        batch = self.record.get("batch_id")
        if isinstance(batch, str):
            attrs["reclaim.batch_id"] = batch
        error = self.record.get("error")
        failed = self.record.get("status") == JobStatus.FAILED and isinstance(error, dict)
        self._add(
            f"job {self.record.get('pipeline')}",
            "job",
            self.root,
            None,
            self.created,
            self.ended,
            ROOT_SEGMENT,
            attrs,
            str(error.get("message")) if failed and isinstance(error, dict) else None,
        )


def _placeholder(index: int) -> str:
    return f"stage {index + 1}"


_HANDLERS = {
    "submitted": _Walk._submitted,
    "claimed": _Walk._claimed,
    "checkpoint": _Walk._checkpoint,
    "requeued": _Walk._requeued,
    "rescued": _Walk._rescued,
    "handed back": _Walk._handed_back,
    "done": _Walk._terminal,
    "failed": _Walk._terminal,
    "cancelled": _Walk._terminal,
    "retried": _Walk._retried,
    "released": _Walk._between,
    "deferred": _Walk._between,
    "dispatched": _Walk._in_attempt,
    "adopted": _Walk._in_attempt,
}


def adopt(built: Sequence[Span], own: Sequence[Span]) -> list[Span]:
    """A stage's own spans (shared.traces.stage) hang under their stage's span; where the
    record made one span of several stages (a coalesced checkpoint), under that one."""
    ids = {s.span_id for s in built} | {s.span_id for s in own}
    covering: dict[tuple[int, int], str] = {}
    for span in built:
        first = span.attributes.get("reclaim.stage_index")
        if span.kind == "stage" and isinstance(first, int):
            count = span.attributes.get("reclaim.stages", 1)
            for n in range(first, first + (count if isinstance(count, int) else 1)):
                covering[(span.segment, n)] = span.span_id
    out = []
    for span in own:
        where = span.attributes.get("reclaim.stage_index")
        parent = covering.get((span.segment, where)) if isinstance(where, int) else None
        if span.parent_id not in ids and parent is not None:
            span = replace(span, parent_id=parent)
        out.append(span)
    return out


def waterfall_rows(spans: Sequence[Span]) -> list[tuple[int, Span]]:
    """The spans in tree order with their depth (a parent before its children, siblings
    by start), for a waterfall; a span whose parent is not among them is a top row."""
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[Span]] = {}
    for s in spans:
        parent = s.parent_id if s.parent_id in ids else None
        children.setdefault(parent, []).append(s)
    rows: list[tuple[int, Span]] = []

    def visit(parent: str | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: (x.start, x.end, x.name)):
            rows.append((depth, s))
            if s.span_id != parent:
                visit(s.span_id, depth + 1)

    visit(None, 0)
    return rows


def duration_s(span: Span) -> float:
    return (span.end - span.start) / timedelta(seconds=1)
