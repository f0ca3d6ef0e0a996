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
  follows it;
- on SIGTERM (a cancel, a maintenance event, the task timeout's first signal) hands the
  job back at its next boundary or check() as an instance does (queued at no cost, its
  doorbell rung, so a claim starts a new execution that resumes from the checkpoint).

Every ending a task decides is a normal exit (0): reclaim, not Cloud Run, counts
attempts (the job's maxRetries is 0). A task that dies without a word (SIGKILL, out of
memory, a crash before adopting) fails its execution; the sweep sees that and rescues the
job (shared.features.executions). Cloud Run names the execution in CLOUD_RUN_EXECUTION
(https://cloud.google.com/run/docs/container-contract#jobs-env-vars).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared import job_queue, records, run_jobs
from shared.claim.owned import OwnedRecord
from shared.claim.runner import run_adopted
from shared.claim.shutdown import SHUTDOWN, Shutdown
from shared.errors import ConfigError, InvalidInput, LostRace, NotFound
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


@dataclass(frozen=True)
class TaskEnv:
    """What one execution was started for."""

    job_id: str
    claim_generation: int
    execution: str
    """The execution's full name: RECLAIM_RUN_JOB/executions/CLOUD_RUN_EXECUTION."""
    job_name: str

    @classmethod
    def from_env(cls, env: Mapping[str, str], run: run_jobs.RunSettings) -> TaskEnv:
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
        return cls(job_id, int(raw), f"{run.job}/executions/{short}", run.job)

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
    """Adopt the claim and run it to an ending (see the module doc)."""
    adopted = adopt(ctx, task)
    if isinstance(adopted, str):
        log.warning(
            "fenced: this execution does not own the job",
            job_id=task.job_id,
            execution=task.execution,
            reason=adopted,
        )
        return Outcome(task.job_id, OutcomeKind.FENCED, adopted, owner=task.owner)
    attempt = job_queue.attempts_of(adopted.record)
    trace = adopted.record.get("traceparent")
    jlog = JobLogger(task.job_id, task.owner, attempt, trace if isinstance(trace, str) else None)
    jlog.info("adopted the claim", execution=task.execution)
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
        return run_adopted(ctx, owned, jlog, instance=task.owner, shutdown=shutdown)
    finally:
        owned.close()
