"""A Cloud Run job's task: adopt one claim, run its stages as a push would, exit.

The claim (shared.claim.dispatch) started this execution with two overrides: the job's
id and the generation its claim wrote. The task:

- adopts the claim by CAS (job_queue.adoption_refused decides, job_queue.adopted_fields
  writes): the record must be running and either untouched since the claim or naming
  that claim without an adopter. Its owner becomes this execution, the attempt stays the
  claim's. A second execution for the same claim (a duplicate :run, an execution of an
  older claim) is fenced: it writes nothing and exits 0;
- runs the stages through shared.claim.runner.run_adopted, the push's own code:
  heartbeats, coalesced checkpoints, check(), timeouts, the final write and whatever
  follows it, with the settings of its job's pool (its stale time: the heartbeat), read
  from the job's pipeline, whatever the job's environment says;
- ends the attempt itself shortly before the job's task timeout
  (RECLAIM_TASK_TIMEOUT_SECONDS), as a timed-out stage: requeued with backoff, failed when
  out of attempts. A stage longer than the task timeout is the stage's failure; were it
  left to the platform, whose stop may come as a SIGTERM, it would be handed back at no
  cost and started again forever;
- hands a job its image lacks the pipeline or version of back at no cost, due after a
  backoff (a claim of newer code dispatched it to this older image during a deploy:
  rollout skew, as a push claim defers it), for RECLAIM_ROLLOUT_SKEW_SECONDS at most;
- on SIGTERM (a cancel, a GPU task's maintenance) hands the job back at its next boundary
  or check() as an instance does (queued at no cost, its doorbell rung, so a claim starts
  a new execution that resumes from the checkpoint). A CPU task's maintenance is a pause,
  SIGTSTP then SIGCONT (https://cloud.google.com/run/docs/configuring/task-timeout): the
  task logs it and runs on;
- frees its pool's execution place when it ends and rings the pool's oldest jobs due
  (shared.features.executions), which may have waited for a place.

Every ending a task decides is a normal exit (0): reclaim, not Cloud Run, counts
attempts (the job's maxRetries is 0). A task that dies without a word (SIGKILL, out of
memory, a crash before adopting) fails its execution; the sweep sees that and rescues the
job (shared.features.executions). Cloud Run names the execution in CLOUD_RUN_EXECUTION
(https://cloud.google.com/run/docs/container-contract#jobs-env-vars).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from shared import finish, job_queue, records, run_jobs
from shared.claim.dispatch import held_back_fields, mark_due_at
from shared.claim.owned import OwnedRecord
from shared.claim.runner import run_adopted
from shared.claim.shutdown import SHUTDOWN, Shutdown
from shared.errors import ConfigError, InvalidInput, LostRace, NotFound, OwnerLost
from shared.features import execution_places as places
from shared.jobs import JobRecord
from shared.logs import JobLogger, get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.seams import Context
from shared.storage import Stored

log = get_logger(__name__)

EXECUTION_ENV = "CLOUD_RUN_EXECUTION"
ADOPT_TRIES = 5
"""Reads an adoption may take: a claim's own record write (the execution's name) can
land between the task's read and its CAS; the next read sees it."""
EXIT_MISCONFIGURED = 2
TIMEOUT_MARGIN_S = (2.0, 60.0)
"""How long before the task timeout the task ends its attempt: 5 % of it, within these
bounds (time for the final write before the platform stops the task)."""
SKEWED = "this image lacks the job's code"
"""How a hand-back to a newer image starts its reason (its history entry)."""
SKEW_DELAY_S = 10.0
"""How long a job handed back to a newer image waits (Pub/Sub's first redelivery backoff
of a push claim's deferral, terraform's claim_push.minimum_backoff)."""


@dataclass(frozen=True)
class TaskEnv:
    """What one execution was started for."""

    job_id: str
    claim_generation: int
    execution: str
    """The execution's full name: RECLAIM_RUN_JOB/executions/CLOUD_RUN_EXECUTION."""
    job_name: str
    place: str = ""
    """The execution place the claim took (RECLAIM_TASK_PLACE; "" without a bound)."""
    task: run_jobs.TaskSettings = dataclasses.field(default_factory=run_jobs.TaskSettings)
    started: float = dataclasses.field(default_factory=time.monotonic)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], run: run_jobs.RunSettings, started: float | None = None
    ) -> TaskEnv:
        """Read the overrides and the platform's variables; ConfigError names a bad one."""
        try:
            job_id = records.validate_job_id(env.get(run_jobs.JOB_ID_ENV, ""))
        except InvalidInput as exc:
            raise ConfigError(f"{run_jobs.JOB_ID_ENV}: {exc.reason}") from None
        raw = env.get(run_jobs.CLAIM_GENERATION_ENV, "")
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"{run_jobs.CLAIM_GENERATION_ENV}={raw!r} must be a generation")
        short = env.get(EXECUTION_ENV, "")
        if not run.job or not short or "/" in short:
            raise ConfigError(f"a task needs RECLAIM_RUN_JOB and {EXECUTION_ENV}")
        place = env.get(run_jobs.PLACE_ENV, "")
        if place and places.Place.of_token(place) is None:
            raise ConfigError(f"{run_jobs.PLACE_ENV}={place!r} names no execution place")
        return cls(
            job_id,
            int(raw),
            f"{run.job}/executions/{short}",
            run.job,
            place,
            run_jobs.TaskSettings.from_env(env),
            process_started() if started is None else started,
        )

    @property
    def margin_s(self) -> float:
        """How long before the task timeout the attempt ends (TIMEOUT_MARGIN_S)."""
        low, high = TIMEOUT_MARGIN_S
        return min(max(low, self.task.task_timeout_seconds * 0.05), high)

    def remaining_s(self) -> float | None:
        """Seconds left before the task ends its attempt itself: the task timeout less a
        margin for the final write, less the time the process has run (`started`: when
        the task's entry point began; None: no timeout known)."""
        timeout = self.task.task_timeout_seconds
        if timeout <= 0:
            return None
        return timeout - self.margin_s - (time.monotonic() - self.started)

    def limit_s(self) -> float | None:
        """The longest this attempt may still run (remaining_s, at least a moment)."""
        left = self.remaining_s()
        return None if left is None else max(left, 0.1)

    def at_timeout(self) -> bool:
        """A SIGTERM now is the task timeout's (it comes within a margin of the deadline,
        or after it), not a cancel's: the attempt ends as timed out (its deadline), never
        as a hand-back that would start it again at no cost."""
        left = self.remaining_s()
        return left is not None and left <= self.margin_s

    @property
    def owner(self) -> str:
        """The owner the task writes: the execution's own id (unique per execution)."""
        return run_jobs.short_name(self.execution)


def adopt(ctx: Context, task: TaskEnv) -> Stored | str:
    """Take the claim over by CAS: the adopted record, or why this task is fenced."""
    for _ in range(ADOPT_TRIES):
        try:
            stored = ctx.store.read(task.job_id)
        except NotFound:
            return "the job has no record"
        job = stored.record
        refused = job_queue.adoption_refused(job, stored.generation, task.claim_generation)
        if refused is not None:
            return refused
        fields = job_queue.adopted_fields(
            job,
            ctx.now(),
            owner=task.owner,
            job_name=task.job_name,
            execution=task.execution,
            claim_generation=task.claim_generation,
        )
        try:
            return ctx.store.update({**job, **fields}, stored.generation)
        except (LostRace, NotFound):
            continue  # the claim recorded its execution, or another task adopted: read again
    return "the record kept changing under the adoption"


def run_task(ctx: Context, task: TaskEnv, shutdown: Shutdown = SHUTDOWN) -> Outcome:
    """Adopt the claim and run it to an ending (see the module doc); the execution place
    is freed whatever the ending."""
    shutdown.use_grace(ctx.settings.shutdown_grace_seconds)  # the platform's SIGKILL
    try:
        return _run(ctx, task, shutdown)
    finally:
        places.release_place(ctx.store, task.place)
        if task.place:
            places.wake(ctx, task.place)


def _run(ctx: Context, task: TaskEnv, shutdown: Shutdown) -> Outcome:
    adopted = adopt(ctx, task)
    if isinstance(adopted, str):
        log.warning(
            "fenced: this execution does not own the job",
            job_id=task.job_id,
            execution=task.execution,
            reason=adopted,
        )
        return Outcome(task.job_id, OutcomeKind.FENCED, adopted, owner=task.owner)
    ctx = for_job(ctx, adopted.record)
    attempt = job_queue.attempts_of(adopted.record)
    trace = adopted.record.get("traceparent")
    jlog = JobLogger(task.job_id, task.owner, attempt, trace if isinstance(trace, str) else None)
    jlog.info(
        "adopted the claim",
        execution=task.execution,
        revision=task.task.revision or None,
        limit_s=task.limit_s(),
    )
    s = ctx.settings
    owned = OwnedRecord(
        ctx.store,
        adopted,
        owner=task.owner,
        attempt=attempt,
        clock=ctx.clock,
        min_interval_s=s.min_write_interval_seconds,
        heartbeat_s=s.heartbeat_seconds,
        log=jlog,
    )
    try:
        return run_adopted(
            ctx,
            owned,
            jlog,
            instance=task.owner,
            shutdown=shutdown,
            revision=task.task.revision or None,
            limit_s=task.limit_s(),
            unrunnable=lambda reason: newer_code(ctx, owned, jlog, reason),
        )
    finally:
        owned.close()


def for_job(ctx: Context, job: JobRecord) -> Context:
    """The context with the settings of the job's pool (its stale time, hence the
    heartbeat), whatever RECLAIM_POOL the job's environment holds: a task runs its own
    pool's job, and an environment that lacks its pool (a job deployed without it) must
    not make a healthy task look silent to the sweep."""
    s = ctx.settings
    pipeline = job.get("pipeline")
    pool = s.pools.name_of(pipeline)
    stale = s.pools.stale_seconds_of(pipeline, s.stale_seconds)
    if (pool, stale) == (s.pool, s.stale_seconds):
        return ctx
    return dataclasses.replace(ctx, settings=dataclasses.replace(s, pool=pool, stale_seconds=stale))


def newer_code(ctx: Context, owned: OwnedRecord, jlog: JobLogger, reason: str) -> Outcome | None:
    """A job whose pipeline or version this image lacks (a claim of newer code sent it
    here during a deploy): handed back at no cost, due after SKEW_DELAY_S, its skew noted
    since the first time; None (the attempt fails, naming why) once that is older than
    RECLAIM_ROLLOUT_SKEW_SECONDS, as a push claim's deferral is bounded."""
    s = ctx.settings
    now = ctx.now()
    job = owned.stored.record
    first = skewed_since(job)
    if first is not None and (now - first).total_seconds() >= s.rollout_skew_seconds:
        return None
    why = f"{SKEWED}: {reason}"

    def build(record: JobRecord) -> JobRecord:
        return held_back_fields(
            record, now, max_attempts=s.max_attempts, delay_s=SKEW_DELAY_S, why=why
        )

    try:
        handed = owned.finish(build, "handed back", fold=False)
    except OwnerLost:
        return Outcome(owned.stored.record["id"], OutcomeKind.LOST, "hand-back refused")
    finish.after_requeue(ctx, handed.record, logger=jlog)
    job_id = str(job["id"])
    due = job_queue.parse_time(handed.record.get("not_before")) or now
    mark_due_at(ctx, job, due, jlog)
    jlog.warning("handed back to a newer image", why=why, delay_s=SKEW_DELAY_S)
    return Outcome(job_id, OutcomeKind.HANDED_BACK, why, owner=owned.owner, attempt=owned.attempt)


def process_started() -> float:
    """When this process started, on time.monotonic()'s clock: the task timeout counts
    from the container's start, and the imports before the task reads its settings take
    seconds. Linux's /proc (Cloud Run's and the local runner's); elsewhere, now."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime", encoding="ascii") as uptime:
            since_boot = float(uptime.read().split()[0])
        age = since_boot - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    return time.monotonic() - min(max(age, 0.0), 3600.0)


def skewed_since(job: Mapping[str, object]) -> datetime | None:
    """When this job was first handed back to a newer image, in the streak that ends with
    its latest attempts (claims, dispatches and adoptions between them do not break it;
    any other event does): the rollout skew bound counts from there."""
    first = None
    history = job.get("history")
    for entry in reversed(history if isinstance(history, list) else []):
        if not isinstance(entry, Mapping):
            break
        event = entry.get("event")
        if event in ("claimed", "dispatched", "adopted"):
            continue
        if event != "handed back" or not str(entry.get("reason") or "").startswith(SKEWED):
            break
        first = job_queue.parse_time(entry.get("at")) or first
    return first
