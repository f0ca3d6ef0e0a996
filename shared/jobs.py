"""The job vocabulary: its states, the record's shape and the watchdog's verdicts.

Both the policy (shared.job_queue) and the JSON codec (shared.records) speak
it, so it belongs to neither. Stdlib only.

``JobStatus`` members ARE the strings stored in records (a StrEnum compares
equal to its value and serialises as it), so typing the vocabulary changed no
stored byte. The TypedDicts describe a record as reclaim writes it; a
hand-edited record may hold anything in the fields the codec does not check
(attempts, timestamps, history), which is why the policy reads those through
its own defensive readers rather than trusting these types.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict


class JobStatus(StrEnum):
    """Where a job stands. Each line says what moves a job out of that state."""

    QUEUED = "queued"
    """Waiting for an owner: claim (CAS) -> running; cancel -> cancelled; the
    watchdog fails it when stale and out of attempts."""
    RUNNING = "running"
    """Owned by one live instance: done/fail by the owner; requeue (a retryable
    error, or the watchdog's rescue of a silent owner); cancel."""
    DONE = "done"
    """Finished with a result. Absorbing: not even retry leaves it (run a new job)."""
    FAILED = "failed"
    """Gave up: a permanent error or out of attempts. Retry (by a person) -> queued."""
    CANCELLED = "cancelled"
    """Stopped by a person (or by a failed parent). Retry (by a person) -> queued."""
    WAITING = "waiting"
    """Waiting on its parents (``depends_on``), or parked by one of its stages (a sleep, a
    waitpoint, its children: ``park``, shared.features.waits): never claimable, burns no
    attempt, the watchdog leaves it alone. The last parent's end releases it (-> queued)
    or, when a parent failed and on_parent_failure is "cancel", cancels it
    (shared.features.workflows); a park is released by time, a completion of its
    waitpoint or the end of its last child (-> queued), or fails with a failed child."""


MEMBER_MISSING = "missing"
"""Shown in place of a status for a job whose record does not exist (yet, or any more),
e.g. a batch member whose marker was written before its record."""
MEMBER_UNREADABLE = "unreadable"
"""Shown in place of a status for a job whose record cannot be decoded (left for a person)."""

WatchdogAction = Literal["requeue", "fail"]
"""What the watchdog (sweep, status read, drain) does with a stale pending job:
hand it back to the queue, or fail it when no attempt is left."""

HistoryEvent = Literal[
    "submitted",
    "claimed",
    "checkpoint",
    "requeued",
    "rescued",
    "handed back",
    "done",
    "failed",
    "cancelled",
    "retried",
    "released",
    "deferred",
    "dispatched",
    "adopted",
    "parked",
    "resumed",
]
"""The events a record's history lists, oldest first."""

JsonObject = dict[str, Any]
"""A payload, checkpoint state or result: any JSON object the pipeline chooses."""


class JobError(TypedDict):
    """The record's ``error``: the last failure, from an exception."""

    stage: str | None
    attempt: int
    type: str
    message: str
    retryable: bool
    """Whether the job will be retried after it (its kind is "retryable")."""
    at: str
    kind: NotRequired[str]
    """One of ERROR_KINDS: "retryable" (retried with backoff), "out of attempts" (it could
    have been retried, but the job's budget is spent), "permanent" (no retry can help: a
    PermanentError, a pipeline that cannot run), "expired" (never ran). Records from before
    it say only `retryable` (shared.job_queue.error_kind reads both)."""
    traceback: NotRequired[str]
    """The stage's traceback, its own frames first, trimmed (shared.claim.stage_errors)."""
    where: NotRequired[dict[str, object]]
    """{"file", "line", "function"} in the pipeline's code where it was raised."""


class Checkpoint(TypedDict, total=False):
    """Where the next attempt resumes: stage index, the state it carries, committed outputs."""

    next_stage: int
    state: JsonObject
    outputs: list[str]
    version: str
    """The pipeline version that wrote this checkpoint (shared.resume)."""
    completed: list[str]
    """The names of the stages completed, in order: a new version resumes by name."""


HistoryEntry = TypedDict(
    "HistoryEntry",
    {
        "at": str,
        "event": HistoryEvent,
        "owner": str | None,
        "attempt": int | None,
        "took_over_from": str | None,
        "stage": str,
        "next_stage": int,
        "not_before": str,
        "error": JobError,
        "by": str,
        "reason": str | None,
        "from": str | None,
        "max_attempts": int,
        "version": str,
        "resume": str,
        "from_version": str | None,
        "execution": str,
        "last_seen": str | None,
        "running": str,
        "stage_running": bool,
        "stopped_by": str,
    },
    total=False,
)
"""One line of the audit trail (``from`` is a keyword, hence the functional form). An
entry that ends an attempt says when that attempt stopped running its stages: at its `at`
when its owner wrote it once its stage had returned; else `stage_running` (a hand-back
written from outside while the stage ran) or `last_seen` (a rescue: the silent owner's
last write), and `stopped_by`, the latest it ran (docs/flow-control.md)."""


class JobRecord(TypedDict, total=False):
    """A job's record, ``jobs/<id>.json``: schema 1.

    total=False because the policy builders return partial records (the fields
    to merge: ``new = {**job, **fields}``) of this same shape.
    """

    schema: int
    id: str
    pipeline: str
    payload: JsonObject
    batch_id: str | None
    client_id: str | None
    source: JsonObject | None
    status: JobStatus
    stage: str | None
    attempts: int
    max_attempts: int | None
    owner: str | None
    created_at: str
    updated_at: str
    not_before: str | None
    rescues: int
    handbacks: int
    checkpoint: Checkpoint
    result: JsonObject | None
    outputs: list[str]
    error: JobError | None
    history: list[HistoryEntry]
    history_dropped: int
    write_id: str
    traceparent: str
    """The job's W3C trace context (shared.tracing); absent in records made before it."""
    submit_traceparent: str
    """The submit request's own traceparent, when it had a valid one: the job's submit
    span links to it (shared.traces.spans)."""
    # --- versions (shared.resume; docs/pipelines.md "Deploying a change")
    pipeline_version: str | None
    """The pipeline version the job runs, stamped by its first claim."""
    pipeline_revision: str | None
    """The revision (K_REVISION) that stamped it."""
    skew_since: str | None
    """First time a revision without the job's code refused it (rollout skew)."""
    progress: JsonObject
    """A stage's latest ctx.progress: done, total, message (absent until one reports)."""
    # --- Cloud Run jobs (shared.claim.dispatch; docs/long-stages.md)
    execution: JsonObject | None
    """The Cloud Run job execution that runs the claimed attempt: job, name,
    claim_generation, dispatched_at, adopted_at (absent for a push runner's claim)."""
    # --- time (shared.timing): absent in records made without them
    run_at: str | None
    """Not claimed before this UTC time (a delayed job)."""
    expires_at: str | None
    """Cancelled (error type Expired) if not started by then."""
    timeout_seconds: float
    """An attempt's time limit, overriding the pipeline's."""
    unique_key: str
    """The key of the unique lock this job took (unique/<sha256>)."""
    unique_until: str | None
    """The lock's window end; None: while this job is pending."""
    # --- flow control (shared.features.flow; absent in records made before it)
    concurrency_key: str
    """At most max_running jobs with this key run at once."""
    max_running: int
    """This job's limit for its key (else its pipeline's)."""
    rate: str
    """Starts per window for its key (else its pipeline's), e.g. "5/s"."""
    rate_token: str | None
    """The rate token this job reserved in the window of its not_before."""
    # --- workflows (shared.features.workflows; docs/workflows.md)
    depends_on: list[str]
    """Parent job ids: the job waits until every one is terminal."""
    on_parent_failure: Literal["cancel", "run"]
    """What a failed or cancelled parent does to this job (default cancel)."""
    parent_failure: ParentFailure | None
    """The parent whose failure cancelled (or did not stop) this job."""
    callback_of: str
    """The batch whose completion created this job (an on_complete callback)."""
    batch_has_callback: bool
    """A member of a batch with on_complete: its end is counted (shared.features.workflows)."""
    # --- waits (shared.features.waits; docs/waiting.md)
    park: JsonObject | None
    """What a parked job waits for: kind (sleep, token, children), its stage, until..."""
    waited: JsonObject | None
    """How the last park ended (the next stage reads it: ctx.waited)."""
    parent_job: JsonObject
    """A fan-out's child: its parent's id, stage, fan-out and index."""


class ParentFailure(TypedDict):
    """Which parent ended badly, and how."""

    parent: str
    status: str


# A per-job max_attempts above this is not believed (falls back to the default).
MAX_ATTEMPTS_LIMIT = 1_000_000


def format_time(now: datetime) -> str:
    """ISO-8601 in UTC, the one time format records carry (naive means UTC)."""
    return (now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)).isoformat()
