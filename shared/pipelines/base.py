"""What a pipeline is: named, ordered stages over a StageContext.

Kept free of storage and threading so a stage is a plain function that unit
tests can call with a hand-made context: what a stage may read beyond its own job
(a workflow's parents, a callback's batch) the runner hands in as `Reads`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, NoReturn, Protocol

from shared.errors import PermanentError, Stopped
from shared.logs import JobLogger


class OutputStream(Protocol):
    """A large output written as a stream (`with ctx.outputs.open(name) as f:`): nothing
    exists until it closes; an exception in its block discards it."""

    def write(self, data: bytes | bytearray | memoryview) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> OutputStream: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class OutputWriter(Protocol):
    """Writes a stage output for this job and attempt; refuses once the job is lost.

    `write` takes bytes, text or a dict in one call; `open` streams a large output from
    disk (a resumable upload, created at close, create-only: docs/pipelines.md)."""

    def write(
        self, name: str, data: bytes | str | Mapping[str, Any], content_type: str | None = None
    ) -> str: ...
    def open(self, name: str, content_type: str | None = None) -> OutputStream: ...


class SpanRecorder(Protocol):
    """Where a stage's own spans go (shared.traces.stage.StageSpans, handed in by the
    runner: a protocol here, so a pipeline's module imports nothing of the exporter)."""

    def span(self, name: str, **attributes: Any) -> AbstractContextManager[None]: ...

    @property
    def traceparent(self) -> str | None: ...


Stage = Callable[["StageContext"], None]


@dataclass(frozen=True)
class Waitpoint:
    """Something a stage waits for (docs/waiting.md): hand `token` or `url` to a provider,
    a person or another system, then `ctx.wait(wp)`. Whoever holds the token completes
    it: POST `url`, `reclaim complete`, the client, the dashboard, an upload."""

    token: str
    url: str | None
    ref: str
    timeout_at: datetime | None = None


class WaitTools(Protocol):
    """What the runner hands a stage for waiting (shared.features.waits.parking)."""

    def sleep_until(self, when: datetime) -> NoReturn: ...
    def waitpoint(self, timeout: float | None) -> Waitpoint: ...
    def wait(self, waitpoint: Waitpoint) -> NoReturn: ...
    def fan_out(
        self, children: Sequence[Mapping[str, Any]], on_child_failure: str, max_running: int | None
    ) -> NoReturn: ...
    def waited(self) -> dict[str, Any] | None: ...
    def children(self, page_token: str | None, page_size: int) -> dict[str, Any]: ...
    def now(self) -> datetime: ...


def _no_parents() -> dict[str, dict[str, Any]]:
    return {}


def _no_members() -> list[dict[str, Any]]:
    return []


@dataclass(frozen=True)
class Reads:
    """What a stage may read beyond its own job (docs/workflows.md), each read only when
    the stage asks, so a plain stage pays nothing. The runner builds it."""

    parents: Callable[[], dict[str, dict[str, Any]]] = _no_parents
    """Each parent (depends_on) id -> its status, result and outputs."""
    batch_members: Callable[[], list[dict[str, Any]]] = _no_members
    """For an on_complete callback: each member's id, status and result reference."""
    parent_failure: Mapping[str, Any] | None = None
    """The parent that failed when this job runs anyway (on_parent_failure "run")."""


class StageContext:
    """Everything a stage may touch.

    ``state`` is the checkpoint state: mutations persist at the next stage
    boundary, so a resumed attempt sees what earlier stages left there (keep it
    small: digests and names, never big bytes). ``payload`` is a private copy.
    ``result`` becomes the record's result when the last stage succeeds.
    """

    def __init__(
        self,
        job_id: str,
        payload: Mapping[str, Any],
        state: dict[str, Any],
        attempt: int,
        log: JobLogger,
        outputs: OutputWriter,
        store: Any,
        *,
        stopped: Callable[[], bool] | None = None,
        result: dict[str, Any] | None = None,
        reads: Reads | None = None,
        report: Callable[[dict[str, Any]], None] | None = None,
        spans: SpanRecorder | None = None,
        tools: Mapping[str, object] | None = None,
    ):
        self.job_id = job_id
        self.payload: dict[str, Any] = copy.deepcopy(dict(payload))
        self.state = state
        self.attempt = attempt
        self.log = log
        self.outputs = outputs
        self.store = store
        self.result: dict[str, Any] = {} if result is None else result
        self._stopped = stopped or (lambda: False)
        self._reads = reads or Reads()
        self._report = report or (lambda _progress: None)
        self._spans = spans
        self._tools = dict(tools or {})

    # --- workflows (docs/workflows.md): read when asked, so a plain stage pays nothing

    @property
    def parent_failure(self) -> Mapping[str, Any] | None:
        """The parent that failed when this job runs anyway (on_parent_failure "run")."""
        return self._reads.parent_failure

    def parents(self) -> dict[str, dict[str, Any]]:
        """Each parent (depends_on) id -> its status, result and outputs."""
        return self._reads.parents()

    def batch_members(self) -> list[dict[str, Any]]:
        """For an on_complete callback: each member's id, status and result reference."""
        return self._reads.batch_members()

    # --- waits (docs/waiting.md): each ends the stage; the job parks, holding no instance

    def sleep(self, seconds: float) -> NoReturn:
        """End this stage; the job resumes at the next stage `seconds` from now (at most
        30 days), through the time index. No instance, no attempt spent meanwhile."""
        tools = self._waits()
        from datetime import timedelta  # only a sleeping stage pays for it

        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"sleep takes a number of seconds >= 0, not {seconds!r}")
        tools.sleep_until(tools.now() + timedelta(seconds=min(float(seconds), 31 * 86400.0)))

    def sleep_until(self, when: datetime) -> NoReturn:
        """End this stage; the job resumes at the next stage at `when` (aware, at most 30
        days ahead; a time past resumes it at once)."""
        self._waits().sleep_until(when)

    def waitpoint(self, timeout: float | None = None) -> Waitpoint:
        """A new waitpoint of this stage: its token and completion URL to hand out, then
        `ctx.wait(wp)`. `timeout` (seconds, at most 30 days): the wait ends `timed_out`
        then. A rerun of the stage (a new attempt) makes a new token."""
        return self._waits().waitpoint(timeout)

    def wait(self, waitpoint: Waitpoint) -> NoReturn:
        """End this stage and park the job (waiting, never claimable, its slot and
        concurrency place freed) until the waitpoint is completed or times out; the next
        stage reads how in `ctx.waited`. A completion that came first resumes it at once."""
        self._waits().wait(waitpoint)

    def fan_out(
        self,
        children: Sequence[Mapping[str, Any]],
        on_child_failure: str = "fail",
        max_running: int | None = None,
    ) -> NoReturn:
        """Create child jobs (each {"pipeline", "payload", "max_attempts", "tags",
        "timeout_seconds"}; any pipeline, any pool) under ids derived from this job, this
        stage and the child's index, so a rerun creates nothing twice; end this stage
        and park until the last child ends. "fail": the first failed child cancels its
        siblings and fails this job, naming it; "continue": every child runs to its end.
        `max_running`: at most this many children run at once. The next stage reads them
        with `ctx.children()`."""
        self._waits().fan_out(children, on_child_failure, max_running)

    @property
    def waited(self) -> dict[str, Any] | None:
        """How the wait that ended the previous stage ended (None if it did not wait):
        {"kind", "status": "slept" | "completed" | "timed_out" | "children", "data",
        "by", "at", ...}."""
        tools = self._tools.get("waits")
        return tools.waited() if tools is not None else None  # type: ignore[attr-defined]

    def children(self, page_token: str | None = None, page_size: int = 100) -> dict[str, Any]:
        """One page of the children of the fan-out that ended the previous stage: {"children":
        [{"id", "index", "pipeline", "status", "result", "outputs", "error"}], "next_page_token",
        "total"}; pass next_page_token back for the next page (None: the last)."""
        return self._waits().children(page_token, page_size)

    def _waits(self) -> WaitTools:
        tools = self._tools.get("waits")
        if tools is None:
            raise PermanentError("waiting needs the runner's context (no waits tools here)")
        return tools  # type: ignore[return-value]

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far this stage got (`done` of `total` units, and a short message).

        Free to call often: the owner keeps the latest and folds it into its next write
        (a checkpoint or heartbeat, at most one per RECLAIM_MIN_WRITE_INTERVAL_SECONDS),
        fenced like them; GET /jobs/<id>, `reclaim watch` and the client show it."""
        self._report(progress_of(done, total, message))

    # --- the job's trace (docs/seeing.md): the stage's own spans join it

    def span(self, name: str, **attributes: Any) -> AbstractContextManager[None]:
        """A span of this stage's own work in the job's trace, around a block:
        ``with ctx.span("encode", frames=240): ...``. It is exported when the attempt ends,
        with the job's other spans, under this stage's span (or the span it is opened in);
        an exception leaving the block marks it failed and goes on. A no-op in a
        hand-made context or an unsampled trace."""
        if self._spans is None:
            return nullcontext()
        return self._spans.span(name, **attributes)

    @property
    def traceparent(self) -> str | None:
        """The W3C traceparent of where this stage is (its innermost open span), for a
        call out (a webhook, a service of yours) to join the job's trace; None without one."""
        return self._spans.traceparent if self._spans is not None else None

    def check(self) -> None:
        """Raise Stopped if this owner lost the job, or the instance is shutting down (the
        job is then handed back to another instance); long stages call it often."""
        if self._stopped():
            raise Stopped(f"job {self.job_id} attempt {self.attempt} is no longer ours")


def stage_version(names: Sequence[str]) -> str:
    """The version a pipeline has unless it declares one: a short hash of its ordered
    stage names, so inserting, removing, renaming or reordering a stage changes it."""
    digest = hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()
    return f"s-{digest[:10]}"


PROGRESS_MESSAGE_MAX = 200


def progress_of(done: float, total: float | None, message: str | None) -> dict[str, Any]:
    """A progress report as the record keeps it; ValueError for numbers that mean nothing."""
    for what, value in (("done", done), ("total", total)):
        if value is None and what == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"progress {what} must be a number >= 0, got {value!r}")
        if value == float("inf"):
            raise ValueError(f"progress {what} must be finite")
    if message is not None and not isinstance(message, str):
        raise ValueError("progress message must be a string")
    return {
        "done": done,
        "total": total,
        "message": message[:PROGRESS_MESSAGE_MAX] if message else None,
    }


@dataclass(frozen=True)
class Pipeline:
    """A named list of stages; ``plan`` derives the stages from the payload when
    they depend on it (the demo's stage count), ``validate`` rejects a bad
    payload at submit time (raise ValueError with a readable reason).

    ``version`` names this list of stages (default: ``stage_version`` of their names);
    the first claim stamps a job with it. ``previous`` keeps older versions of the same
    pipeline registered for one release, so a job whose completed stages are no longer a
    prefix of this version's finishes on its own version (docs/pipelines.md "Deploying
    a change")."""

    name: str
    stages: Sequence[tuple[str, Stage]] = ()
    plan: Callable[[Mapping[str, Any]], Sequence[tuple[str, Stage]]] | None = None
    validate: Callable[[Mapping[str, Any]], None] | None = None
    doc: str = field(default="", compare=False)
    timeout_seconds: float | None = None
    """An attempt's time limit (a job's own timeout_seconds overrides it): shared.claim.timeouts."""
    # flow control (docs/flow-control.md): per concurrency key, unless a job sets its own
    max_running: int | None = None
    rate: str | None = None
    version: str | None = None
    previous: Sequence[Pipeline] = field(default=(), compare=False)
    checkpoint_every_s: float | None = None
    """Coalesce stage-boundary checkpoints into at most one write per this many seconds
    (None: every boundary is its own write, as a safety net wants; the owner still
    keeps one record to about one write a second). For pipelines of short stages: three
    stages of 1.2 s with 3.0 here cost one checkpoint write instead of two. The
    trade-off: a hard crash (SIGKILL, a lost host) re-runs up to one interval of
    completed stages; a hand-back on SIGTERM, a requeue and a timeout write the pending
    checkpoint with their own write, so they lose none (docs/pipelines.md)."""

    def __post_init__(self) -> None:
        every = self.checkpoint_every_s
        if every is not None and (
            isinstance(every, bool)
            or not isinstance(every, int | float)
            or not 0 <= every < float("inf")
        ):
            raise ValueError(f"checkpoint_every_s must be a finite number >= 0, got {every!r}")

    def version_for(self, payload: Mapping[str, Any]) -> str:
        """The version a job with this payload runs: declared, else derived from names."""
        if self.version is not None:
            return self.version
        return stage_version([name for name, _ in self.stages_for(payload)])

    def versions_for(self, payload: Mapping[str, Any]) -> dict[str, list[tuple[str, Stage]]]:
        """Every version this pipeline still registers -> its stages for this payload,
        this one first; a previous version that cannot plan the payload is left out."""
        out = {self.version_for(payload): self.stages_for(payload)}
        for old in self.previous:
            try:
                out.setdefault(old.version_for(payload), old.stages_for(payload))
            except PermanentError:
                continue
        return out

    def stages_for(self, payload: Mapping[str, Any]) -> list[tuple[str, Stage]]:
        """The ordered stages this payload runs (checkpoint.next_stage indexes them)."""
        stages = list(self.plan(payload) if self.plan is not None else self.stages)
        if not stages:
            raise PermanentError(f"pipeline {self.name!r} has no stages for this payload")
        return stages

    def check_payload(self, payload: Mapping[str, Any]) -> None:
        """Raise ValueError if the payload cannot run; submit calls this before creating."""
        if self.validate is not None:
            self.validate(payload)
        try:
            self.stages_for(payload)
        except PermanentError as exc:
            raise ValueError(str(exc)) from None
