"""Runner "job": the claim's stages run in a Cloud Run job execution, not in the push.

A claim instance of a pool whose runner is "job" (RECLAIM_RUNNER=job) does everything a
push claim does up to and including the claim's compare-and-swap (the features' gates,
the attempt counted, the owner stamped), then, instead of running the stages:

1. starts an execution of RECLAIM_RUN_JOB whose environment overrides carry the job's id
   and the generation the claim wrote (shared.run_jobs);
2. records the execution on the job (a write matched on that generation, so the sweep
   can watch it: shared.features.executions); a task that adopted the claim first wins this race
   and the record already names it;
3. acks the push.

The execution's task (shared.claim.task) adopts the claim by CAS and runs the stages
through the same code as a push. A :run the Admin API refuses is a failed attempt like
a stage error (requeued with backoff, failed when out of attempts), so a misnamed job
or a missing grant ends in a failed job with the API's answer, never in a loop.
"""

from __future__ import annotations

from collections.abc import Callable

from shared import job_queue, run_jobs, tracing
from shared.errors import LostRace, NotFound, StorageError
from shared.logs import JobLogger
from shared.outcome import Outcome, OutcomeKind
from shared.seams import Context
from shared.storage import Stored
from shared.traces.spans import attempt_span_id

Fallback = Callable[[Exception], Outcome]
"""The claim's way to end an attempt that could not start (the runner's retry-or-fail)."""


def wanted() -> bool:
    """True when this process's stages run on a Cloud Run job; ConfigError if the
    runner settings are bad (asked before the claim's CAS, so nothing is claimed then)."""
    return run_jobs.run_settings().on_jobs


TRACEPARENT_ENV = "TRACEPARENT"
"""The task's W3C trace context, as OpenTelemetry carries one in the environment
(https://opentelemetry.io/docs/specs/otel/context/env-carriers/): the attempt's span, so
what the task's own code traces joins the job's trace."""


def task_env(claimed: Stored) -> dict[str, str]:
    """The overrides an execution carries: the job it runs, the claim it adopts, and the
    attempt's trace context."""
    record = claimed.record
    env = {
        run_jobs.JOB_ID_ENV: str(record["id"]),
        run_jobs.CLAIM_GENERATION_ENV: str(claimed.generation),
    }
    context = tracing.parse(record.get("traceparent"))
    if context is not None:
        span = attempt_span_id(context, str(record["id"]), job_queue.attempts_of(record))
        env[TRACEPARENT_ENV] = context.with_span(span).traceparent
    return env


def start(
    ctx: Context, claimed: Stored, *, owner: str, jlog: JobLogger, fallback: Fallback
) -> Outcome:
    """Start the execution for a claim just written (`claimed`), record it, answer."""
    settings = run_jobs.run_settings()
    job_id = str(claimed.record["id"])
    attempt = job_queue.attempts_of(claimed.record)
    try:
        execution = run_jobs.client(settings.api).run(settings.job, task_env(claimed))
    except run_jobs.RunJobsError as exc:
        jlog.error("could not start the Cloud Run job execution", job=settings.job, error=str(exc))
        return fallback(exc)
    fields = job_queue.dispatched_fields(
        claimed.record,
        ctx.now(),
        job_name=settings.job,
        execution=execution,
        claim_generation=claimed.generation,
    )
    recorded = True
    try:
        ctx.store.update({**claimed.record, **fields}, claimed.generation)
    except (LostRace, NotFound):
        recorded = False  # its task adopted the claim first, or a person ended the job
    except StorageError as exc:  # the task adopts the claim's own generation all the same
        recorded = False
        jlog.warning("could not record the execution", execution=execution, error=str(exc))
    jlog.info("dispatched to a Cloud Run job", execution=execution, recorded=recorded)
    return Outcome(
        job_id, OutcomeKind.DISPATCHED, run_jobs.short_name(execution), owner=owner, attempt=attempt
    )
