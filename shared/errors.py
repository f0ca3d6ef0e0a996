"""reclaim's one error family: every exception the library raises is a ReclaimError.

Callers catch the narrowest class they can act on (a storage hiccup is
``Unavailable``, a lost compare-and-swap ``LostRace``, a failed ring
``DoorbellError``). Only the entry points catch broadly, in one place each:
``shared.http.edge.entry_point`` maps the family to JSON refusals, the CLI maps it
to exit codes. Classes that are also a ``ValueError`` (bad input of some kind)
stay one, so plain ``except ValueError`` code keeps working.

Stdlib only, imported by every layer, including the pure policy.
"""

from __future__ import annotations


class ReclaimError(Exception):
    """Base of every error reclaim raises."""


# --------------------------------------------------------------------------- input


class ConfigError(ReclaimError, ValueError):
    """A setting is missing or malformed; the message names the variable."""


class InvalidInput(ReclaimError, ValueError):
    """Bad user input (ids, names, payloads); ``reason`` is safe to show the user,
    ``what`` names the thing that was bad ("job id", "batch id", ...)."""

    def __init__(self, reason: str, what: str = "input") -> None:
        super().__init__(reason)
        self.reason = reason
        self.what = what


class InvalidRecord(ReclaimError, ValueError):
    """Bytes or a dict that are not a valid record; report it, never overwrite or delete it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IllegalTransition(ReclaimError, ValueError):
    """A policy builder was asked for a move the state machine does not allow."""


# --------------------------------------------------------------------------- storage


class StorageError(ReclaimError):
    """Base of the storage seam's errors."""


class NotFound(StorageError):
    """No such record or object."""


class JobNotFound(NotFound):
    """No job by this id (a read, cancel or retry named a job that does not exist)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r}")
        self.job_id = job_id


class BatchNotFound(NotFound):
    """No batch by this id (no membership marker lists it)."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no batch {batch_id!r}")
        self.batch_id = batch_id


class AlreadyExists(StorageError):
    """A create-only write found the object already there."""


class LostRace(StorageError):
    """A generation-matched write lost: someone else wrote the record first."""


class Unavailable(StorageError):
    """A call failed for another reason (retries exhausted, network, permission).

    The outcome of a failed write is unknown: re-read before acting on it.
    """


class CorruptRecord(StorageError):
    """The stored record is not valid JSON or not a valid record; left for a person."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"record {job_id} is unreadable: {reason}")
        self.job_id = job_id
        self.reason = reason


# --------------------------------------------------------------------------- doorbell


class DoorbellError(ReclaimError):
    """A ring was not confirmed by Pub/Sub (missing topic, no connection, timeout)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"doorbell for {job_id} failed: {reason}")
        self.job_id = job_id
        self.reason = reason


# --------------------------------------------------------------------------- submitting


class SubmitError(ReclaimError, ValueError):
    """A submission refused before anything was written; ``problems`` lists each reason."""

    def __init__(self, reason: str, problems: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.problems = problems or []


class InvalidSubmission(SubmitError):
    """The request breaks the schema (an HTTP 400)."""


class Conflict(SubmitError):
    """A client id already names a job with other content (an HTTP 409)."""


# --------------------------------------------------------------------------- deliveries


class SelectionGrew(ReclaimError):
    """A bulk confirm found more jobs matching than its count showed (an HTTP 409)."""


class SelectionChanged(SelectionGrew):
    """A bulk confirm found other jobs matching than its count showed (an HTTP 409)."""


class BadEvent(ReclaimError, ValueError):
    """The request is not a delivery we can read; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IgnoredEvent(ReclaimError):
    """A valid event that needs no work (e.g. an object deleted): acknowledge it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------- pipelines and running


class UnknownPipeline(ReclaimError, LookupError):
    """No pipeline is registered under this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown pipeline {name!r}")
        self.name = name


class PipelineModuleError(ReclaimError, ImportError):
    """A module named in RECLAIM_PIPELINE_MODULES cannot be imported."""


class PermanentError(ReclaimError):
    """Raised by a stage for an error no retry can fix: the job fails at once."""


class Stopped(ReclaimError):
    """This owner lost the job (re-claimed or cancelled): stop, commit nothing."""


class ShuttingDown(Stopped):
    """The instance got SIGTERM: stop the stage, the job is handed back (shared.claim.shutdown)."""


class OwnerLost(ReclaimError):
    """The owner's claim is gone: someone else wrote the record."""


class AttemptsExhausted(ReclaimError):
    """The job's owner went silent and no attempt is left (the watchdog's failure)."""


class OwnerGone(ReclaimError):
    """The job's owner is known to be gone before its stale time: the Cloud Run execution
    that ran it ended with the job still running (shared.features.executions)."""


class PipelineChanged(PermanentError):
    """The job's pipeline changed beyond resuming (shared.resume): it ends unrun, and a
    retry runs it from the start."""


class PipelineUnavailable(PermanentError):
    """No revision offered the job's pipeline (or version) within the rollout-skew bound
    (RECLAIM_ROLLOUT_SKEW_SECONDS)."""


# --------------------------------------------------------------------------- waits


class Parked(BaseException):
    """A stage ended early to wait (ctx.sleep, ctx.wait, ctx.fan_out: docs/waiting.md):
    the runner writes the park at this stage boundary. A BaseException, so a stage's own
    ``except Exception`` does not swallow it; `plan` (shared.seams.ParkPlan) says what the
    park writes and what follows it."""

    def __init__(self, plan: object, why: str) -> None:
        super().__init__(why)
        self.plan = plan
        self.why = why
