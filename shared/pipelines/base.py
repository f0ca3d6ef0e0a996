"""What a pipeline is: named, ordered stages over a StageContext.

Kept free of storage and threading so a stage is a plain function that unit
tests can call with a hand-made context: what a stage may read beyond its own job
(a workflow's parents, a callback's batch) the runner hands in as `Reads`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.errors import PermanentError, Stopped
from shared.logs import JobLogger


class OutputWriter(Protocol):
    """Writes a stage output for this job and attempt; refuses once the job is lost."""

    def write(
        self, name: str, data: bytes | str | Mapping[str, Any], content_type: str | None = None
    ) -> str: ...


Stage = Callable[["StageContext"], None]


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

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far this stage got (`done` of `total` units, and a short message).

        Free to call often: the owner keeps the latest and folds it into its next write
        (a checkpoint or heartbeat, at most one per RECLAIM_MIN_WRITE_INTERVAL_SECONDS),
        fenced like them; GET /jobs/<id>, `reclaim watch` and the client show it."""
        self._report(progress_of(done, total, message))

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
