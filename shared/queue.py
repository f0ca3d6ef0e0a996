"""The queue's front door: every operation on jobs, over one store, doorbell,
settings and clock, and the feature table.

The functions, the CLI and the benchmarks reach the queue through ``Queue``
alone. It builds one Context (shared.seams) from its collaborators and the feature
table (shared.features.table: the one place that lists the features) and hands it to the
focused modules that do the work, one per concern:

- submit: shared.submission.create (validate, create, ring); submit_upload:
  shared.submission.uploads (the upload routes, then the same creation)
- get, get_batch: shared.status (views, with the read-path watchdog)
- read, read_many, list_jobs, pending: shared.listing (as stored, no watchdog)
- cancel, retry: shared.control (a person's transitions, with their CAS loops)
- ring: the doorbell itself
- sweep_once: shared.sweeper (the scheduled rescue pass)
- handle_delivery: shared.claim.runner (claim, run, drain, hand back on shutdown)

A new operation is a function in the module of its concern (or a new module)
plus a one-line method here. Errors are the ReclaimError family; HTTP status
codes and exit codes are decided at the edges (shared.http.edge, reclaim.cli).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from shared import control, listing, status, sweeper
from shared.clock import Clock, utcnow
from shared.config import Settings
from shared.doorbell import get_doorbell
from shared.features import flow
from shared.features import table as features
from shared.features.waits import release as waits
from shared.jobs import JobRecord, JobStatus
from shared.seams import Context, Feature, Ringer
from shared.storage import Store
from shared.stores.factory import get_store
from shared.submission import create as submission
from shared.submission import parse
from shared.submission import uploads as upload_jobs
from shared.submission.upload_routes import Routes
from shared.submission.uploads import Routed

if TYPE_CHECKING:
    from shared.claim.drain import Arrival, DrainGate
    from shared.claim.shutdown import Shutdown
    from shared.claim.slots import Slots
    from shared.events import UploadedObject
    from shared.outcome import Outcome


def list_filters() -> dict[str, str]:
    """The listing filters of the table's features, name -> help (the CLI's `list`
    options and a listing's query parameters)."""
    return {flt.name: flt.help for f in features.FEATURES for flt in f.filters}


def parse_submission(
    body: Any, settings: Settings, *, pipelines: Collection[str] | None = None
) -> parse.Submission:
    """Validate a POST /jobs body whole, with the keys of every feature in the table (pure:
    the edges call it before they touch a cloud service). InvalidSubmission lists every
    problem."""
    return parse.parse_submission(body, settings, features.FEATURES, pipelines=pipelines)


class Queue:
    """Submit, read, list, cancel, retry, sweep and run jobs."""

    def __init__(
        self,
        store: Store,
        doorbell: Ringer,
        settings: Settings,
        *,
        clock: Clock = utcnow,
        table: tuple[Feature, ...] = features.FEATURES,
        watchdog: bool = True,
    ) -> None:
        # the front door hands the features its way to create jobs (a fan-out's children)
        self.ctx = Context(store, doorbell, settings, clock, table, submission.create_records)
        self.watchdog = watchdog
        """Whether its status reads run the watchdog: a deployed function's do (the
        deployment's stale times); a process with settings of its own (the CLI) reads
        without it, so no read judges a job by a stale time that is not the deployment's."""

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def doorbell(self) -> Ringer:
        return self.ctx.doorbell

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    @classmethod
    def from_settings(cls, settings: Settings) -> Queue:
        """The queue on the process's shared Cloud Storage client and publisher."""
        return cls(get_store(settings), get_doorbell(settings), settings)

    # --- submitting

    def submit(
        self, request: parse.Submission, *, traceparent: str | None = None
    ) -> submission.SubmitResult:
        """Create the jobs of a submission and ring their doorbells. The request was
        validated whole first (shared.submission.parse.parse_submission, pure), so a bad one
        never reaches the queue. Raises Conflict, before any write, if a client id
        names a job with other content. Each job joins the trace of `traceparent`
        (the request's W3C header), or starts its own."""
        return submission.submit(self.ctx, request, self.clock(), traceparent=traceparent)

    def submit_upload(
        self,
        upload: UploadedObject,
        routes: Routes | None = None,
        *,
        traceparent: str | None = None,
    ) -> Routed:
        """The job of one uploaded object version as its route says (idempotent per
        version), a batch closed by its closing object, or nothing (why); no routes:
        an upload-digest job."""
        return upload_jobs.route_upload(
            self.ctx, routes or Routes(), upload, self.clock(), traceparent
        )

    # --- reading

    def get(self, job_id: str) -> status.JobView:
        """A job as its owner sees it, after the watchdog unless this queue reads without
        it (a silent owner's job is requeued or failed on the spot). Raises InvalidInput,
        JobNotFound, CorruptRecord."""
        return status.read_job(self.ctx, job_id, self.clock(), watchdog=self.watchdog)

    def get_batch(self, batch_id: str) -> status.BatchView:
        """Every member of a batch, each after the watchdog (unless this queue reads
        without it). Raises InvalidInput, BatchNotFound."""
        return status.read_batch(self.ctx, batch_id, self.clock(), watchdog=self.watchdog)

    def read(self, job_id: str) -> JobRecord:
        """The record as stored, without the watchdog: for watchers that must not change
        what they watch. Raises InvalidInput, JobNotFound, CorruptRecord."""
        return listing.read_record(self.store, job_id)

    def read_many(self, job_ids: Iterable[str]) -> listing.Listing:
        """Records as stored (in parallel, no watchdog); the unreadable ones listed apart."""
        return listing.read_many(self.store, job_ids)

    def list_jobs(
        self,
        *,
        status: JobStatus | None = None,
        batch: str | None = None,
        limit: int | None = None,
        where: Mapping[str, str] | None = None,
    ) -> listing.Listing:
        """Jobs by status, batch and/or the features' filters (`where`: filter name ->
        value, Feature.filters): O(batch), O(matches), O(pending), else O(history)."""
        return listing.list_jobs(self.ctx, status=status, batch=batch, limit=limit, where=where)

    def pending(self, limit: int | None = None) -> list[str]:
        """Ids of the jobs that still owe work (the pending index), in its markers' name order."""
        return listing.pending_ids(self.store, limit)

    # --- a person's transitions

    def cancel(self, job_id: str, *, by: str, reason: str | None = None) -> JobRecord:
        """queued|running -> cancelled; a running owner stops at its next write.
        Raises InvalidInput, JobNotFound, CorruptRecord, IllegalTransition, LostRace."""
        return control.cancel(self.ctx, job_id, by=by, reason=reason)

    def retry(self, job_id: str, *, by: str) -> control.Retried:
        """failed|cancelled -> queued with a fresh attempt budget, then rung. Raises
        InvalidInput, JobNotFound, CorruptRecord, IllegalTransition, LostRace."""
        return control.retry(self.ctx, job_id, by=by)

    # --- flow control (shared.features.flow)

    def pause(self, pipeline: str, *, by: str) -> bool:
        """Hold back every job of a pipeline (False: it was paused already). InvalidInput
        for an unknown pipeline."""
        return flow.pause(self.store, pipeline, by=by, now=self.clock())

    def resume(self, pipeline: str, *, by: str) -> flow.Resumed:
        """Lift a pipeline's pause and ring its parked jobs, paced; `by` is logged."""
        return flow.resume(self.store, self.doorbell, pipeline, by=by)

    # --- waits (shared.features.waits; docs/waiting.md)

    def complete_waitpoint(self, token: str, data: Any = None, *, by: str) -> waits.Completion:
        """Complete the waitpoint a token names (the first completion wins; InvalidInput
        for a token this deployment did not sign or data that is no small JSON)."""
        return waits.complete_token(self.ctx, token, data, by)

    def complete_job(self, job_id: str, data: Any = None, *, by: str) -> waits.Completion:
        """Complete the waitpoint a job is parked on now (an operator, the dashboard's
        Approve and Reject); InvalidInput when it waits for none."""
        return waits.complete_parked(self.ctx, job_id, data, by)

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        """Ring a job's doorbell again (a pending job whose rings were dead-lettered),
        in its trace when known, on its pipeline's pool (unknown: this process's pool;
        a claim there sends it on). Raises DoorbellError if Pub/Sub did not accept it."""
        self.doorbell.ring(job_id, traceparent, pipeline=pipeline)

    # --- maintenance and running

    def sweep_once(self) -> sweeper.SweepResult:
        """One pass over the pending index: rescue, re-ring, fail the exhausted, repair."""
        return sweeper.run_once(self.ctx, self.clock())

    def handle_delivery(
        self,
        job_id: str,
        *,
        owner: str | None = None,
        arrival: Arrival | None = None,
        slots: Slots | None = None,
        gate: DrainGate | None = None,
        shutdown: Shutdown | None = None,
    ) -> Outcome:
        """One doorbell: claim and run the job if it is claimable, then drain due ones
        within the push's time budget; BUSY at once when no slot is free; HANDED_BACK
        once the instance is shutting down. `arrival` (the push's delivery attempt and
        publish time) may show a backlog; `slots`, `gate` and `shutdown` default to the
        process's own. The claim machinery loads here, on claim's first push: submit, the
        dashboard and the admin function never run a job and start without it
        (bench/imports.py: a cold start pays every import)."""
        from shared.claim import runner

        return runner.handle_delivery(
            self.ctx,
            job_id,
            owner=owner,
            slots=slots,
            gate=gate,
            arrival=arrival,
            shutdown=shutdown,
        )
