"""The spans a stage adds to its job's trace (``ctx.span("encode")``), kept for its attempt.

A stage's own spans live in memory until the attempt ends, then go out in the same export
call as the spans built from the record (shared.traces.export): no exporter of their own,
no thread. Their ids are derived like the record's (trace, job, attempt, stage index,
name, how many of that name before), so a re-export writes the same spans; their parent is
the stage's span, or the span they are opened inside (per thread). An attempt the instance
died in loses them (its stages still show, from the record). Pure: stdlib and the room.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from shared import tracing
from shared.traces.spans import AttributeValue, Span, stage_span_id

MAX_SPANS = 500
"""A stage's spans past this many in one attempt are dropped (counted in `dropped`): one
export call carries them all, and it must stay small."""
MAX_ATTRIBUTES = 32


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _attribute(value: Any) -> AttributeValue:
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)[:256]


class StageSpans:
    """One attempt's stage spans: ctx.span() opens them, the export takes `spans`."""

    def __init__(
        self,
        traceparent: object,
        job_id: str,
        attempt: int,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.context = tracing.parse(traceparent)
        self.job_id = job_id
        self.attempt = attempt
        self._clock = clock
        self._lock = threading.Lock()
        self._local = threading.local()
        self._counts: dict[tuple[int, str], int] = {}
        self._stage = 0
        self.spans: list[Span] = []
        self.dropped = 0

    def enter_stage(self, index: int) -> None:
        """The runner starts stage `index`: new spans hang under its span."""
        self._stage = index

    def _stack(self) -> list[str]:
        stack: list[str] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _stage_id(self) -> str | None:
        if self.context is None:
            return None
        return stage_span_id(self.context, self.job_id, self.attempt, self._stage)

    @property
    def traceparent(self) -> str | None:
        """The W3C traceparent of where the stage is now (its innermost open span, else the
        stage's own): the header a webhook call or a task is given, so its spans join."""
        if self.context is None:
            return None
        stack = self._stack()
        span_id = stack[-1] if stack else self._stage_id()
        return self.context.with_span(span_id or self.context.span_id).traceparent

    @contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[None]:
        """A span of the stage's own work, from entering to leaving the block; an exception
        that leaves it marks the span's status as an error (and goes on)."""
        context = self.context
        if context is None or not context.sampled:
            yield
            return
        name = str(name)[:128] or "span"
        stage = self._stage
        with self._lock:
            n = self._counts.get((stage, name), 0)
            self._counts[(stage, name)] = n + 1
        span_id = tracing.derived_span_id(
            context.trace_id, self.job_id, self.attempt, "user", stage, name, n
        )
        stack = self._stack()
        parent = stack[-1] if stack else self._stage_id()
        start = self._clock()
        error: str | None = None
        stack.append(span_id)
        try:
            yield
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:512]
            raise
        finally:
            stack.pop()
            self._record(name, span_id, parent, start, stage, attributes, error)

    def _record(
        self,
        name: str,
        span_id: str,
        parent: str | None,
        start: datetime,
        stage: int,
        attributes: Mapping[str, Any],
        error: str | None,
    ) -> None:
        attrs: dict[str, AttributeValue] = {
            "reclaim.job_id": self.job_id,
            "reclaim.attempt": self.attempt,
            "reclaim.stage_index": stage,
        }
        for key, value in list(attributes.items())[:MAX_ATTRIBUTES]:
            attrs[str(key)[:128]] = _attribute(value)
        span = Span(name, "user", span_id, parent, start, self._clock(), self.attempt, attrs, error)
        with self._lock:
            if len(self.spans) >= MAX_SPANS:
                self.dropped += 1
                return
            self.spans.append(span)
