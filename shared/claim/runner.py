"""Claim and run one job, then drain due ones: the heart of the claim function.

A delivery is only a doorbell; the record decides. Order of business:
backlog sign (shared.claim.drain) -> slot (none: "busy", answered 429 at once; Cloud
Run never sends an instance more requests than its concurrency, so this is a
guard for direct callers) -> read -> claimable? -> CAS claim -> stages from the
checkpoint, each boundary a coalesced CAS checkpoint, a heartbeat thread during
long stages -> one final CAS (done, requeued with backoff, or failed) -> drop the
pending marker -> drain, within the push's time budget (shared.claim.budget).

Every write of the owner goes through shared.claim.owned.OwnedRecord, so a LostRace
anywhere (re-claimed, rescued, cancelled) stops the job at once: no further
write, no result, outputs refused. The generation is the fencing token.

Once the instance is shutting down (shared.claim.shutdown), a job is handed back at its
next stage boundary or check() (queued, due now, no attempt spent, doorbell rung),
and a delivery that arrives meanwhile rings its doorbell again instead of claiming.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from shared import faults, finish, job_queue, metrics, records, resume, timing
from shared.claim import dispatch, due_wait, stage_errors
from shared.claim.budget import PushBudget, unlimited
from shared.claim.drain import GATE, Arrival, DrainGate, backlog_sign, drain
from shared.claim.owned import Heartbeat, OwnedRecord
from shared.claim.shutdown import SHUTDOWN, Running, Shutdown
from shared.claim.slots import Slots, get_slots
from shared.claim.stage_outputs import StageOutputs
from shared.claim.stage_times import STAGE_TIMES, StageTimes
from shared.claim.timeouts import Deadline, TimedOut
from shared.errors import (
    CorruptRecord,
    IllegalTransition,
    LostRace,
    NotFound,
    OwnerLost,
    Parked,
    PermanentError,
    PipelineChanged,
    PipelineUnavailable,
    ShuttingDown,
    Stopped,
    Unavailable,
    UnknownPipeline,
)
from shared.features import workflows
from shared.jobs import HistoryEntry, JobRecord, JobStatus, JsonObject
from shared.logs import JobLogger, get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.pipelines import Pipeline, Stage, StageContext, get_pipeline
from shared.recovery import mark_due, recover, silent_since, with_newest
from shared.seams import Context, ParkPlan, ring_or_leave
from shared.storage import Stored
from shared.traces import export as trace_export
from shared.traces.stage import StageSpans

log = get_logger(__name__)


# --------------------------------------------------------------------------- owner ids

_INSTANCE: str | None = None
_CLAIMS = itertools.count(1)


def instance_id() -> str:
    """This process's id: host, pid and randomness (a restarted pid is a new instance)."""
    global _INSTANCE
    if _INSTANCE is None:
        host = socket.gethostname().split(".")[0][:40] or "host"
        _INSTANCE = f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
    return _INSTANCE


def new_owner(instance: str | None = None) -> str:
    """A per-claim owner id, so two claims by one instance are told apart."""
    return f"{instance or instance_id()}.{next(_CLAIMS)}"


# --------------------------------------------------------------------------- entry point


def handle_delivery(
    ctx: Context,
    job_id: str,
    *,
    owner: str | None = None,
    slots: Slots | None = None,
    gate: DrainGate | None = None,
    arrival: Arrival | None = None,
    shutdown: Shutdown | None = None,
) -> Outcome:
    """Handle one doorbell for job_id; never waits for a slot.

    `owner` is the instance id (default: this process's); each claim appends a
    suffix. `arrival` is what the push
    said of its doorbell (a backlog sign); `slots`, `gate` and `shutdown` default to
    the process's own. Raises InvalidInput for a malformed id, and lets storage
    errors propagate (the function answers 503 and Pub/Sub redelivers; the record is
    still the truth).
    """
    records.validate_job_id(job_id)
    settings = ctx.settings
    budget = PushBudget(settings.push_deadline_seconds)
    pool = slots if slots is not None else get_slots(settings.max_concurrent)
    gate = gate if gate is not None else GATE
    if shutdown is None:
        shutdown = SHUTDOWN
        shutdown.use_grace(settings.shutdown_grace_seconds)  # the platform's SIGKILL
    runner = _Runner(ctx, owner or instance_id(), shutdown, budget)
    if shutdown.requested:
        return runner.decline(job_id)
    if arrival is not None and (sign := backlog_sign(arrival, ctx.now())) is not None:
        _note_backlog(gate, settings.backlog_window_seconds, job_id, sign)
    slot = pool.try_acquire()
    if slot is None:
        retry = settings.busy_retry_after_seconds
        return Outcome(job_id, OutcomeKind.BUSY, "no free slot", retry_after_s=retry)
    with slot:
        outcome = runner.attempt(job_id, wait=True)
        _note_drain_hints(gate, outcome)
        outcome.drained = drain(
            ctx.store,
            settings,
            ctx.clock,
            runner.attempt,
            gate,
            skip=job_id,
            budget=budget,
            shutdown=shutdown,
            push_gap=pool.push_gap,
        )
    return outcome


def _note_backlog(gate: DrainGate, window_s: float, job_id: str, sign: str) -> None:
    """A push shows doorbells held back: the process counts as backlogged (the drain
    takes due jobs itself). Said at INFO when a backlog begins, at DEBUG for each push
    that keeps it going (in a backlog that is every push)."""
    began = not gate.backlogged(window_s)
    (log.info if began else log.debug)(
        "doorbells are being held back: draining", job_id=job_id, sign=sign
    )
    gate.note_backlog()


def _note_drain_hints(gate: DrainGate, outcome: Outcome) -> None:
    """This delivery's watchdog sent a stale job back to the queue marked due: the next
    freed slot of this process lists the index for it (other processes learn it from the
    pool's due hint, shared.hints.due_hint)."""
    if outcome.kind == OutcomeKind.RECOVERED and outcome.detail == "requeue":
        gate.note_marked()


# --------------------------------------------------------------------------- the runner


class _Runner:
    """One request's worth of work: a job, then maybe a few drained ones."""

    def __init__(
        self, ctx: Context, instance: str, shutdown: Shutdown, budget: PushBudget | None = None
    ) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.settings = ctx.settings
        self.clock = ctx.clock
        self.instance = instance
        self.shutdown = shutdown
        self.budget = budget if budget is not None else unlimited()  # the push's time
        # this instance's revision, as Cloud Run sets it
        # (https://cloud.google.com/run/docs/container-contract#services-env-vars)
        self.revision = os.environ.get("K_REVISION")

    def decline(
        self, job_id: str, traceparent: str | None = None, pipeline: str | None = None
    ) -> Outcome:
        """Shutting down: ring the job's doorbell again so a live instance takes it, and
        ack this delivery (a failed ring asks Pub/Sub to redeliver this one instead).
        Unread (no `pipeline`), it is rung on this pool's own topic, where it came from."""
        rang = ring_or_leave(self.ctx.doorbell, job_id, traceparent, pipeline=pipeline) is None
        log.info("shutting down: delivery passed on", job_id=job_id, rang=rang)
        detail = "shutting down: " + ("doorbell rung again" if rang else "redeliver")
        return Outcome(job_id, OutcomeKind.HANDED_BACK, detail, redeliver=not rang)

    def attempt(self, job_id: str, stored: Stored | None = None, *, wait: bool = False) -> Outcome:
        """Read (unless given), decide, claim and run one job. With `wait` (the push's own
        job), a job backing off that is due soon is waited for (shared.claim.due_wait)."""
        if stored is None:
            try:
                stored = self.store.read(job_id)
            except NotFound:
                log.info("no such record; acked", job_id=job_id)
                return Outcome(job_id, OutcomeKind.MISSING, "no record")
            except CorruptRecord as exc:
                log.error("corrupt record left untouched", job_id=job_id, reason=exc.reason)
                return Outcome(job_id, OutcomeKind.CORRUPT, exc.reason)
        job = stored.record
        now = self.clock()
        s = self.settings
        max_attempts = job_queue.max_attempts_of(job, s.max_attempts)
        skew = s.clock_skew_seconds
        stale = s.stale_seconds_of(job)  # its pool's, when a claim meets another pool's job
        if not job_queue.claimable(job, now, stale, max_attempts, skew_s=skew):
            wait_s = due_wait.wait_seconds(job, now, s, self.budget) if wait else None
            if wait_s is not None:
                return self._wait_for_due(job_id, stored, wait_s)
            return self._not_claimable(job_id, stored, now)
        for gate in self.ctx.gates():  # the features' gates, in table order: the first
            held = gate(self.ctx, stored, now)  # that decides answers the delivery
            if held is not None:
                return held
        # the claim is stamped after the gates: a flow-control place is held by then, and
        # the rate gate checked its window against the clock as it left (shared.features.flow)
        return self._claim_and_run(job_id, stored, self.clock())

    def _wait_for_due(self, job_id: str, stored: Stored, wait_s: float) -> Outcome:
        """The job backs off and is due within the window: sleep until then inside this
        push, then read and attempt it again (a few times at most: due_wait.WAITS_MAX); a
        shutdown meanwhile passes the delivery on."""
        job = stored.record
        for _ in range(due_wait.WAITS_MAX):
            log.info(
                "waiting for the job's backoff inside the push",
                job_id=job_id,
                wait_s=round(wait_s, 3),
                traceparent=job.get("traceparent"),
            )
            if self.shutdown.sleep(wait_s):
                return self.decline(job_id, job.get("traceparent"), job.get("pipeline"))
            try:
                stored = self.store.read(job_id)
            except (NotFound, CorruptRecord):
                return self.attempt(job_id)  # the usual answers for these
            job, now = stored.record, self.clock()
            again = due_wait.wait_seconds(job, now, self.settings, self.budget)
            if again is None:
                return self.attempt(job_id, stored)
            wait_s = again
        return self._not_claimable(job_id, stored, self.clock())

    def _not_claimable(self, job_id: str, stored: Stored, now: datetime) -> Outcome:
        """A duplicate or early doorbell does nothing; a stale exhausted job is failed."""
        job = stored.record
        s = self.settings
        action = job_queue.stale_action(
            job,
            now,
            s.stale_seconds_of(job),
            job_queue.max_attempts_of(job, s.max_attempts),
            skew_s=s.clock_skew_seconds,
        )
        if action is not None:
            recovered = recover(self.ctx, stored, now)
            if recovered.action is not None:
                return Outcome(job_id, OutcomeKind.RECOVERED, recovered.action)
        status = job.get("status")
        reason = str(status)
        if status == JobStatus.QUEUED and not job_queue.is_due(
            job, now, skew_s=s.clock_skew_seconds
        ):
            reason = "backing off"
        elif status == JobStatus.RUNNING:
            reason = "running and fresh"
        log.info(
            "not claimable; acked",
            job_id=job_id,
            reason=reason,
            traceparent=job.get("traceparent"),
        )
        return Outcome(job_id, OutcomeKind.SKIPPED, reason)

    def _claim_and_run(self, job_id: str, stored: Stored, now: datetime) -> Outcome:
        if self.shutdown.requested:
            job = stored.record
            return self.decline(job_id, job.get("traceparent"), job.get("pipeline"))
        job = stored.record
        plan = _plan(job, self.revision)
        if plan.resume is not None and plan.resume.kind == "skew":
            return self._defer(job_id, stored, now, plan.resume.reason)
        if plan.resume is not None and plan.resume.kind == "end":
            return self._unrunnable(job_id, stored, now, PipelineChanged(plan.resume.reason))
        owner = new_owner(self.instance)
        on_jobs = (
            plan.error is None and plan.pipeline is not None and dispatch.wanted(self.settings)
        )
        try:
            stamp = job_queue.claim_fields(
                job,
                owner,
                now,
                version=plan.resume.version if plan.resume is not None else None,
                resumed=plan.resume.kind if plan.resume is not None else None,
                revision=self.revision,
                stage=plan.first_stage(),
            )
            if job.get("status") == JobStatus.RUNNING:  # over a silent owner (issue 46)
                stamp = with_newest(stamp, silent_since(job, self.settings.stale_seconds_of(job)))
            new: JobRecord = {**job, **stamp}
        except IllegalTransition as exc:
            return Outcome(job_id, OutcomeKind.SKIPPED, str(exc))
        try:
            claimed = self.store.update(new, stored.generation)
        except (LostRace, NotFound):
            log.info(
                "lost the claim race; acked",
                job_id=job_id,
                owner=owner,
                traceparent=job.get("traceparent"),
            )
            return Outcome(job_id, OutcomeKind.RACED, "another owner won", owner=owner)
        attempt = int(claimed.record["attempts"])
        jlog = JobLogger(job_id, owner, attempt, job.get("traceparent"))
        jlog.info("claimed", rescues=job.get("rescues"), **metrics.claimed(job, now, attempt))
        s = self.settings
        owned = OwnedRecord(
            self.store,
            claimed,
            owner=owner,
            attempt=attempt,
            clock=self.clock,
            min_interval_s=s.min_write_interval_seconds,
            heartbeat_s=s.heartbeat_seconds,
            log=jlog,
        )
        try:
            if on_jobs:  # RECLAIM_RUNNER=job: a Cloud Run job execution runs the stages
                return dispatch.start(
                    self.ctx,
                    claimed,
                    owner=owner,
                    jlog=jlog,
                    fallback=lambda exc: _Job(self, owned, jlog, plan)._retry_or_fail(
                        exc, stage=None
                    ),
                    owned=owned,  # a refused :run or a pool at its bound hands it back
                )
            return _Job(self, owned, jlog, plan).run()
        finally:
            owned.close()

    # --- rollout skew and changed pipelines (shared.resume): no attempt is spent

    def _defer(self, job_id: str, stored: Stored, now: datetime, reason: str) -> Outcome:
        """This revision lacks the job's code: leave the job as it is (noting since when,
        once) and ask for the push again, for a revision that has it; past the
        RECLAIM_ROLLOUT_SKEW_SECONDS bound the job fails, naming what was missing."""
        job = stored.record
        bound = self.settings.rollout_skew_seconds
        if job_queue.deferred_too_long(job, now, bound):
            why = f"{reason}, and no revision that knows it claimed the job within {bound:g} s"
            return self._unrunnable(job_id, stored, now, PipelineUnavailable(why))
        if not job.get("skew_since"):
            try:
                self.store.update(
                    {**job, **job_queue.deferred_fields(job, now, reason)}, stored.generation
                )
            except (LostRace, NotFound):
                return Outcome(job_id, OutcomeKind.RACED, "changed while deferring")
        log.warning(
            "this revision lacks the job's code: left for one that has it",
            job_id=job_id,
            reason=reason,
            revision=self.revision,
            traceparent=job.get("traceparent"),
        )
        return Outcome(job_id, OutcomeKind.DEFERRED, reason, redeliver=True)

    def _unrunnable(self, job_id: str, stored: Stored, now: datetime, exc: Exception) -> Outcome:
        """End a job no revision can run as it stands, by CAS on the record as read: failed,
        no stage started, checkpoint cleared so that a retry runs it from the start."""
        job = stored.record
        attempt = job_queue.attempts_of(job)
        error = job_queue.error_info(exc, stage=None, attempt=attempt, now=now, retryable=False)
        try:
            final = self.store.update(
                {**job, **job_queue.unrunnable_fields(job, now, error)}, stored.generation
            )
        except (LostRace, NotFound):
            return Outcome(job_id, OutcomeKind.RACED, "changed while ending it")
        log.error(
            "failed: its pipeline cannot run here",
            job_id=job_id,
            error_type=error["type"],
            error=error["message"],
            revision=self.revision,
            traceparent=job.get("traceparent"),
        )
        finish.after_terminal(self.ctx, final.record)
        return Outcome(job_id, OutcomeKind.FAILED, error["message"])


def run_adopted(
    ctx: Context,
    owned: OwnedRecord,
    jlog: JobLogger,
    *,
    instance: str,
    shutdown: Shutdown,
    revision: str | None = None,
    limit_s: float | None = None,
    unrunnable: Callable[[str], Outcome | None] | None = None,
) -> Outcome:
    """Run the stages of a claim a Cloud Run job's task adopted (shared.claim.task), by the
    same code as a push: checkpoints, heartbeats, check(), the hand-back on SIGTERM and
    the final write. --- Cloud Run jobs (shared.claim.task; docs/long-stages.md):
    `revision` is the task image's (a job has no K_REVISION); `limit_s` caps the attempt
    below the job's task timeout (a timed-out stage, as the pipeline's own timeout);
    `unrunnable(reason)` answers a pipeline or version this image lacks (handed back for
    a newer image); when it answers None, or without it, the attempt fails naming why."""
    runner = _Runner(ctx, instance, shutdown)
    if revision:
        runner.revision = revision
    plan = _plan(owned.stored.record, runner.revision)
    if plan.resume is not None and not plan.resume.runs and plan.error is None:
        deferred = unrunnable(plan.resume.reason) if unrunnable is not None else None
        if deferred is not None:
            return deferred
        plan.error = PipelineUnavailable(plan.resume.reason)
    job = _Job(runner, owned, jlog, plan)
    job.cap_s = limit_s
    return job.run()


class _Plan:
    """What a claim runs: the pipeline, the stages of the version decided, from where."""

    def __init__(
        self,
        pipeline: Pipeline | None,
        stages: list[tuple[str, Stage]],
        decision: resume.Resume | None,
        error: Exception | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.stages = stages
        self.resume = decision
        self.error = error  # planning failed: a permanent failure of the claimed job

    def first_stage(self) -> str | None:
        """The name of the stage the claim runs first (the record's running stage)."""
        index = self.resume.next_stage if self.resume is not None else 0
        return self.stages[index][0] if 0 <= index < len(self.stages) else None


def _plan(job: JobRecord, revision: str | None) -> _Plan:
    """Resolve the job's pipeline and version on this revision (the decision is pure:
    shared.resume.decide)."""
    name = str(job.get("pipeline"))
    try:
        pipeline = get_pipeline(name)
    except UnknownPipeline:
        reason = f"pipeline {name!r} is not known to revision {revision}"
        return _Plan(None, [], resume.Resume("skew", None, 0, reason))
    try:
        payload = job.get("payload") or {}
        versions = pipeline.versions_for(payload)
        current = next(iter(versions))  # versions_for puts this version first: planned once
    except Exception as exc:  # planning is a pure function of the record: permanent
        return _Plan(pipeline, [], None, exc)
    names = {v: [n for n, _ in stages] for v, stages in versions.items()}
    decision = resume.decide(resume.stamp_of(job), current, names, revision=revision, pipeline=name)
    return _Plan(pipeline, versions.get(decision.version or "", []), decision)


def _kill_deadline(shutdown: Shutdown, now: datetime) -> datetime:
    """The latest this instance lives, on the record's clock: the platform's SIGKILL
    comes its grace after the SIGTERM (shared.claim.shutdown)."""
    began = shutdown.began_at if shutdown.began_at is not None else time.monotonic()
    left = max(0.0, began + shutdown.grace_s - time.monotonic())
    return now + timedelta(seconds=left)


def _coalesce_checkpoints(owned: OwnedRecord, plan: _Plan) -> None:
    """The pipeline's checkpoint interval (Pipeline.checkpoint_every_s): boundaries of
    short stages coalesce into one write per interval (shared.claim.owned)."""
    if plan.pipeline is not None:
        owned.coalesce_checkpoints(plan.pipeline.checkpoint_every_s)


class _StageClock:
    """The running stage of one job and how long it has run; each run that completes is
    recorded (shared.claim.stage_times), so that on SIGTERM a stage expected to end within
    the grace finishes instead of being thrown away (shared.claim.shutdown)."""

    def __init__(self, pipeline: str, times: StageTimes = STAGE_TIMES) -> None:
        self._pipeline = pipeline
        self._times = times
        self._stage: str | None = None
        self._started = 0.0

    @contextlib.contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        """Around a stage's call: its duration is recorded only when it returns."""
        self._started, self._stage = time.monotonic(), stage
        try:
            yield
            self._times.record(self._pipeline, stage, time.monotonic() - self._started)
        finally:
            self._stage = None

    def left(self) -> float | None:
        """Expected seconds until the running stage ends; None between stages, without a
        record, or past its expected end (an overrunning stage says nothing)."""
        stage = self._stage
        if stage is None:
            return None
        expected = self._times.expected(self._pipeline, stage)
        if expected is None:
            return None
        left = expected - (time.monotonic() - self._started)
        return left if left >= 0 else None


def _finishing(registered: Running | None) -> bool:
    """The shutdown lets this job's running stage finish (shared.claim.shutdown)."""
    return registered is not None and registered.finishing


def _require_plain(state: JsonObject, result: JsonObject) -> None:
    """A stage must leave state and result the record can hold (a stage error if not)."""
    depth = records.MAX_RECORD_DEPTH - 2  # state sits at level 3 of the record
    for where, value in (("state", state), ("result", result)):
        problem = records.json_problem(value, depth, where)
        if problem is not None:
            raise ValueError(f"the stage left a {where} the record cannot hold: {problem}")


class _Job:
    """One claimed attempt: stages from the checkpoint, then the final write."""

    def __init__(self, runner: _Runner, owned: OwnedRecord, jlog: JobLogger, plan: _Plan) -> None:
        self.r = runner
        self.plan = plan
        self.owned = owned
        self.log = jlog
        self.job = owned.stored.record
        self.job_id = str(self.job["id"])
        self.confirm_s = runner.settings.ownership_confirm_seconds
        # outputs of committed stages, earlier attempts' included: the job's deliverables
        self.outputs = job_queue.checkpoint_outputs(self.job)
        self.started = time.monotonic()  # the attempt's run time (a metric) counts from here
        trace = self.job.get("traceparent")
        self._trace = trace if isinstance(trace, str) else None
        self._pipeline = str(self.job.get("pipeline"))  # its doorbell goes to its pool
        self.spans = StageSpans(trace, self.job_id, owned.attempt, runner.clock)  # ctx.span
        self.cap_s: float | None = None  # a Cloud Run task's own limit (run_adopted)
        _coalesce_checkpoints(owned, plan)
        self._clock = _StageClock(self._pipeline)  # the running stage, for the SIGTERM path
        self._registered: Running | None = None

    def run(self) -> Outcome:
        """Run the attempt, then export what it adds to the job's trace before the request
        answers (shared.traces.export: one call; a failure is logged, never the job's)."""
        outcome = self._run()
        final = self.owned.stored.record  # this owner's last write: its end, if it wrote one
        if final.get("status") != JobStatus.RUNNING:
            trace_export.attempt_ended(final, self.owned.attempt, self.spans.spans)
        return outcome

    def _run(self) -> Outcome:
        plan = self.plan
        if plan.error is not None or plan.pipeline is None or plan.resume is None:
            return self._fail(plan.error or PermanentError("no plan"), stage=None)
        pipeline, stages = plan.pipeline, plan.stages
        next_stage = plan.resume.next_stage
        if plan.resume.kind not in ("first", "legacy", "same"):
            self.log.info(
                "resumed on a changed pipeline",
                resume=plan.resume.kind,
                version=plan.resume.version,
                next_stage=next_stage,
            )
        state = copy.deepcopy(job_queue.checkpoint_of(self.job)[1])
        result: JsonObject = {}
        heartbeat = Heartbeat(self.owned, self.r.settings.heartbeat_tick_seconds, self.log)
        limit = timing.timeout_of(self.job, pipeline.timeout_seconds)  # time
        if self.cap_s is not None:  # below a Cloud Run job's task timeout (run_adopted)
            limit = self.cap_s if limit is None else min(limit, self.cap_s)
        deadline = Deadline(limit, lambda: self._time_out(limit or 0.0))
        shutdown = self.r.shutdown.running(self._hand_back_from_outside, self._clock.left)
        with heartbeat, deadline, shutdown as self._registered:
            for index in range(next_stage, len(stages)):
                if self.r.shutdown.requested:  # a stage boundary: the checkpoint is saved
                    return self._hand_back("at a stage boundary")
                if self._lease_lost():  # issue 46: no stage starts without its lease
                    return self._lost("ownership not proven at a stage boundary")
                name, fn = stages[index]
                outcome = self._stage(pipeline, index, len(stages), name, fn, state, result)
                if outcome is not None:
                    return outcome
            return self._done(result)

    def _stage(
        self,
        pipeline: Pipeline,
        index: int,
        total: int,
        name: str,
        fn: Callable[[StageContext], None],
        state: JsonObject,
        result: JsonObject,
    ) -> Outcome | None:
        """Run one stage and its checkpoint; an Outcome ends the job, None goes on."""
        self.log.stage = name
        self.spans.enter_stage(index)
        outputs = StageOutputs(self.r.store, self.owned, self.job_id, self.confirm_s)
        self.log.debug("stage started", index=index, pipeline=pipeline.name)
        try:  # the context too: whatever the payload holds ends in the stage error mapping
            ctx = StageContext(
                self.job_id,
                self.job.get("payload") or {},
                state,
                self.owned.attempt,
                self.log,
                outputs,
                self.r.store,
                stopped=self._stopped,
                result=result,
                reads=workflows.reads_for(self.r.store, self.job),  # parents, the batch
                report=self.owned.report_progress,
                spans=self.spans,
                # the features' helpers (waits: sleep, waitpoints, fan-out): shared.seams
                tools=self.r.ctx.stage_tools(self.job, self.owned.attempt, index, name),
            )
            with self._clock.timing(name):
                fn(ctx)
            _require_plain(state, result)
        except Parked as parked:  # the stage ended early to wait (shared.features.waits)
            return self._park(parked, index, name, state, outputs)
        except ShuttingDown:
            return self._hand_back("the stage called check()")
        except Stopped:
            return self._lost("stage stopped")
        except PermanentError as exc:
            return self._fail(exc, stage=name, trace=self._stage_raised(exc))
        except Exception as exc:  # the stage is the pipeline's own code: whatever it
            # raises is a stage error, retried with backoff until attempts run out
            return self._retry_or_fail(exc, stage=name, trace=self._stage_raised(exc))
        finally:
            self._discard_open_streams(outputs)
        self.log.debug("stage finished", index=index, outputs=outputs.written or None)
        self.outputs.extend(outputs.written)
        if index + 1 >= total:
            return None  # the final write follows at once
        try:
            written = self.owned.checkpoint(
                name,
                index + 1,
                state,
                self.outputs,
                version=self.plan.resume.version if self.plan.resume else None,
                completed=[n for n, _ in self.plan.stages[: index + 1]],
                running=self.plan.stages[index + 1][0],  # the record's stage; a span's name
            )
        except OwnerLost:
            return self._lost("checkpoint refused")
        self.log.debug("checkpoint", next_stage=index + 1, written=written)
        return None

    # --- waits (docs/waiting.md): a stage that ended early parks the job at its boundary

    def _park(
        self, parked: Parked, index: int, name: str, state: JsonObject, outputs: StageOutputs
    ) -> Outcome:
        """Write the park (shared.seams.ParkPlan): the checkpoint at the next stage and
        the park in one write, the attempt given back; the concurrency place goes back
        (the requeue hooks), then the plan's own follow-up (index it, or release it at
        once when what it waits for came first). The slot frees as this returns."""
        plan: ParkPlan = parked.plan  # type: ignore[assignment]
        try:
            _require_plain(state, {})
        except ValueError as exc:
            return self._retry_or_fail(exc, stage=name)
        self.outputs.extend(outputs.written)
        now = self.r.clock()
        version = self.plan.resume.version if self.plan.resume else None
        completed = [n for n, _ in self.plan.stages[: index + 1]]
        budget = self.r.settings.max_attempts

        def build(job: JobRecord) -> JobRecord:
            point = job_queue.checkpoint_fields(
                job, now, name, index + 1, state, self.outputs, version, completed
            )
            return {**point, **plan.fields({**job, **point}, now, budget)}

        try:
            written = self.owned.finish(build, "parked", fold=False)
        except OwnerLost:
            return self._lost("park refused")
        finish.after_requeue(self.r.ctx, written.record, logger=self.log)
        try:
            resumed = plan.after(self.r.ctx, written)
        except Exception as exc:  # parked all the same: the sweep looks at it (its marker)
            self.log.warning("after the park", error=f"{type(exc).__name__}: {exc}")
            resumed = False
        self.log.info(
            "parked",
            why=parked.why,
            resumed=resumed,
            next_stage=index + 1,
            **self._finished(metrics.Ending.PARKED),
        )
        return self._outcome(OutcomeKind.PARKED, parked.why)

    def _stopped(self) -> bool:
        """check(): True once this owner lost the job; ShuttingDown once the instance
        is going away (the stage stops and the job is handed back)."""
        if self._lease_lost():
            return True
        if self.r.shutdown.requested and not _finishing(self._registered):
            raise ShuttingDown(f"job {self.job_id}: the instance is shutting down")
        return False

    def _lease_lost(self) -> bool:
        """True once this owner lost the job, or cannot prove it holds it within its
        lease (issue 46): others take a silent owner's record (and its concurrency place)
        once its last proof of life is older than the stale time, so past two thirds of
        it with no proof landing, the owner stops of its own accord. A storage hiccup
        before then is no proof of loss: the CAS writes decide."""
        try:
            self.owned.confirm(self.confirm_s)
        except OwnerLost:
            return True
        except Unavailable as exc:
            lease = self.r.settings.stale_seconds_of(self.job) * 2 / 3
            if self.owned.proof_age() >= lease:
                self.log.warning("no proof of ownership within its lease", error=str(exc))
                return True
            self.log.warning("could not confirm ownership", error=str(exc))
        return False

    # --- final writes

    def _done(self, result: JsonObject) -> Outcome:
        now = self.r.clock()
        try:
            final = self.owned.finish(
                lambda job: job_queue.done_fields(
                    job,
                    now,
                    result,
                    self.outputs,
                    stage=self.log.stage,
                    stages=len(self.plan.stages),
                ),
                "done",
                fold=False,
            )
        except OwnerLost:
            return self._lost("done refused")
        self.log.info("done", **self._finished(metrics.Ending.DONE))
        self._after_terminal(final)
        return self._outcome(OutcomeKind.DONE)

    def _discard_open_streams(self, outputs: StageOutputs) -> None:
        """An output stream the stage did not close is discarded (nothing is created)."""
        left = outputs.discard_open()
        if left:
            self.log.warning("output streams the stage left open were discarded", outputs=left)

    def _stage_raised(self, exc: BaseException) -> stage_errors.StageTrace:
        """The stage's traceback, logged once with its place in the pipeline's code as
        the line's source location (Cloud Logging's sourceLocation; Error Reporting reads
        stack_trace), and kept for the record's error."""
        trace = stage_errors.describe(exc)
        self.log.error(
            "the stage raised",
            error_type=type(exc).__name__,
            error=str(exc)[: job_queue.ERROR_MESSAGE_LIMIT],
            stack_trace=trace.text,
            source_location=trace.where,
        )
        return trace

    def _fail(
        self,
        exc: BaseException,
        *,
        stage: str | None,
        trace: stage_errors.StageTrace | None = None,
        out_of_attempts: bool = False,
    ) -> Outcome:
        now = self.r.clock()
        error = job_queue.error_info(
            exc,
            stage=stage,
            attempt=self.owned.attempt,
            now=now,
            retryable=False,
            out_of_attempts=out_of_attempts,
            traceback=trace.text if trace is not None else None,
            where=trace.where if trace is not None else None,
        )
        try:
            final = self.owned.finish(lambda job: job_queue.fail_fields(job, now, error), "failed")
        except OwnerLost:
            return self._lost("fail refused")
        self.log.error(
            "failed",
            error_type=error["type"],
            error=error["message"],
            **self._finished(metrics.Ending.FAILED),
        )
        self._after_terminal(final)
        return self._outcome(OutcomeKind.FAILED, error["message"])

    def _retry_or_fail(
        self,
        exc: BaseException,
        *,
        stage: str | None,
        trace: stage_errors.StageTrace | None = None,
    ) -> Outcome:
        s = self.r.settings
        if self.owned.attempt >= job_queue.max_attempts_of(self.job, s.max_attempts):
            return self._fail(exc, stage=stage, trace=trace, out_of_attempts=True)
        now = self.r.clock()
        error = job_queue.error_info(
            exc,
            stage=stage,
            attempt=self.owned.attempt,
            now=now,
            retryable=True,
            traceback=trace.text if trace is not None else None,
            where=trace.where if trace is not None else None,
        )
        delay = job_queue.backoff_seconds(
            self.owned.attempt, s.backoff_base_seconds, s.backoff_max_seconds
        )

        def build(job: JobRecord) -> JobRecord:
            return job_queue.requeue_fields(job, now, delay_s=delay, error=error)

        try:
            requeued = self.owned.finish(build, "requeued")
        except OwnerLost:
            return self._lost("requeue refused")
        finish.after_requeue(self.r.ctx, requeued.record, logger=self.log)
        self.log.warning(
            "requeued after a stage error",
            error_type=error["type"],
            error=error["message"],
            delay_s=round(delay, 3),
            **self._finished(metrics.Ending.REQUEUED),
        )
        self._ring_retry(delay, requeued.record)
        return self._outcome(OutcomeKind.REQUEUED, error["message"])

    def _ring_retry(self, delay: float, requeued: JobRecord) -> None:
        """A retry on time (shared.claim.due_wait): a backoff the claim that gets the
        doorbell can wait out inside its push is rung at once (a longer one is the sweep's
        to ring ahead of time); a delayed one's marker is marked due at its not_before, so
        a slot freed anywhere then takes it whatever became of the doorbell."""
        s = self.r.settings
        not_before = job_queue.parse_time(requeued.get("not_before"))
        if delay > 0 and not_before is not None:
            mark_due(self.r.ctx.store, self.job_id, not_before, pool=s.marker_pool(requeued))
        if delay <= 0 or due_wait.rung_at_requeue(delay, s):
            ring_or_leave(
                self.r.ctx.doorbell,
                self.job_id,
                self._trace,
                pipeline=self._pipeline,
                logger=self.log,
            )

    def _hand_back(self, why: str, *, stage_running: bool = False) -> Outcome:
        """The instance is shutting down: queue the job again at no cost (the pending
        checkpoint goes into the same write), ring its doorbell, answer the push.
        `stage_running`: written from outside while the stage runs on; its history entry
        says so, and that it runs at the latest until the platform's SIGKILL."""
        now = self.r.clock()
        budget = self.r.settings.max_attempts
        until = _kill_deadline(self.r.shutdown, now) if stage_running else None

        # issue 46: flow control keeps the attempt's concurrency place until `until`
        # (shared.features.flow_policy.running_until)
        said: HistoryEntry = {}
        if until is not None:
            said = {"stage_running": True, "stopped_by": job_queue.format_time(until)}

        def build(job: JobRecord) -> JobRecord:
            return with_newest(job_queue.handback_fields(job, now, max_attempts=budget), said)

        try:
            handed = self.owned.finish(build, "handed back")
        except OwnerLost:
            return self._lost("hand-back refused")
        finish.after_requeue(self.r.ctx, handed.record, logger=self.log)
        # the doorbell is a hint that may pend, back off or be lost (every slot busy:
        # Cloud Run's 429, then Pub/Sub's backoff); the mark lets the next freed slot of
        # any instance take the job from the pending listing (shared.claim.drain)
        mark_due(self.r.ctx.store, self.job_id, now, pool=self.r.settings.marker_pool(self.job))
        rang = (
            ring_or_leave(
                self.r.ctx.doorbell,
                self.job_id,
                self._trace,
                pipeline=self._pipeline,
                logger=self.log,
            )
            is None
        )
        self.log.warning(
            "handed back: the instance is shutting down",
            why=why,
            rang=rang,
            **self._finished(metrics.Ending.HANDED_BACK),
        )
        outcome = self._outcome(OutcomeKind.HANDED_BACK, why)
        outcome.redeliver = not rang  # no doorbell rang: this push must come back instead
        return outcome

    def _hand_back_from_outside(self) -> None:
        """Called by the shutdown's thread when the stage reached neither a boundary nor
        check() in time: the stage cannot be stopped, but its owner's writes are refused
        from now on (a finished job refuses the hand-back instead)."""
        self._hand_back("the stage did not stop in time", stage_running=True)

    def _time_out(self, limit: float) -> None:
        """Time, on the deadline's thread: end this attempt by CAS while the
        stage still runs (shared.claim.timeouts), as a stage error would (requeued with backoff,
        or failed on the last attempt); the stage's later writes are all refused."""
        stage = self.log.stage
        self.log.warning("timed out: the stage's late writes will be refused", limit_s=limit)
        try:
            self._retry_or_fail(
                TimedOut(f"timed out after {limit:g} s (stage {stage})"), stage=stage
            )
        except Exception as exc:  # a storage outage: the job goes stale and is rescued
            self.owned.close()
            self.log.error("timeout write failed; the watchdog rescues the job", error=repr(exc))

    def _finished(self, outcome: metrics.Ending) -> dict[str, Any]:
        return metrics.finished(self.job, outcome, run_s=time.monotonic() - self.started)

    def _lost(self, why: str) -> Outcome:
        self.owned.close()
        self.log.warning("stopped: this owner lost the job", why=why)
        return self._outcome(OutcomeKind.LOST, why)

    def _after_terminal(self, final: Stored) -> None:
        """What follows the terminal write, then the pending marker (the sweep repeats
        whatever a crash here leaves undone: shared.finish)."""
        faults.kill_if("after-terminal", self.job_id)  # test-only (shared.faults)
        finish.after_terminal(self.r.ctx, final.record, logger=self.log)

    def _outcome(self, kind: OutcomeKind, detail: str = "") -> Outcome:
        return Outcome(
            self.job_id, kind, detail, owner=self.owned.owner, attempt=self.owned.attempt
        )
