"""Cloud Run job executions: the sweep's look at them, and a cancel that stops one.

The sweep: a job whose execution ended while its record still shows it running has lost
its owner, and is rescued at once.

A task that ends the job always writes the record first (done, failed, requeued, handed
back) and exits after, so an execution that completed (succeeded, failed, cancelled)
with the record still running under it means the task died without a word: killed
hard (SIGKILL, out of memory), cut by its task timeout, cancelled, or never started.
Cloud Run does not retry it (the job's maxRetries is 0: reclaim counts attempts), so
the sweep requeues the job (or fails it when out of attempts: shared.recovery.rescue_now)
on its next run instead of waiting out the stale time. The write is generation-matched
on the record as the sweep read it, so a task that wrote in between wins.

One Admin API read (GET {RECLAIM_RUN_API}/v2/{execution}) per running job on a Cloud Run
job per sweep run; an execution the API cannot answer for is left to the stale-time
rescue, as before. An execution still starting (dispatched, not adopted) is judged by its
pool's start grace, not its stale time (shared.pools.Pools.stale_seconds_for): nothing
heartbeats before the task starts.

The bound on a job pool's running executions is shared.features.execution_places.

A cancel (a terminal hook): the record of a job cancelled while an execution ran its
attempt names that execution; the hook asks Cloud Run to cancel it, so a stage that never
calls check() stops billing (https://cloud.google.com/run/docs/reference/rest/v2/projects.locations.jobs.executions/cancel).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from shared import job_queue, run_jobs
from shared.errors import ConfigError
from shared.jobs import JobStatus
from shared.logs import get_logger
from shared.recovery import rescue_now
from shared.seams import Settled

if TYPE_CHECKING:
    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import Stored

log = get_logger(__name__)


def current_execution(stored: Stored) -> str | None:
    """The execution that runs the record's current attempt, if it runs on a Cloud Run
    job (an older attempt's execution, left on a record a push claim took since, is not)."""
    job = stored.record
    execution = job.get("execution")
    if job.get("status") != JobStatus.RUNNING or not isinstance(execution, dict):
        return None
    name = execution.get("name")
    if execution.get("attempt") != job_queue.attempts_of(job):
        return None
    return name if run_jobs.is_execution_name(name) else None


def sweep_check(ctx: Context, stored: Stored, now: datetime) -> Settled | None:
    """Rescue a running job whose Cloud Run execution has ended (see the module doc)."""
    name = current_execution(stored)
    if name is None:
        return None
    try:
        api = run_jobs.run_settings().api
        state = run_jobs.execution_state(run_jobs.client(api).execution(name))
    except (run_jobs.RunJobsError, ConfigError) as exc:
        log.warning(
            "could not read the job's execution",
            job_id=stored.record.get("id"),
            execution=name,
            error=str(exc),
        )
        return None
    if state == "running":
        return None
    why = f"its Cloud Run execution {run_jobs.short_name(name)} {state}"
    done = rescue_now(ctx, stored, now, why)
    if done.action is None:
        return None  # the owner wrote first, or someone else acted: the record decides
    log.warning(
        "rescued a job whose execution ended",
        job_id=stored.record.get("id"),
        execution=name,
        state=state,
        action=done.action,
    )
    record = done.stored.record
    pending = None if job_queue.is_terminal(record) else record
    return Settled("rescued" if done.action == "requeue" else "failed", pending)


# --------------------------------------------------------------------------- a cancel


def cancel_hook(ctx: Context, record: JobRecord) -> None:
    """After a terminal write: a job cancelled while a Cloud Run execution ran its attempt
    gets that execution cancelled too (its task would stop only at its next write or
    check(): a stage that never checks bills until it ends). Never raises: a refused or
    failed cancel is logged (the task still stops at its next write)."""
    if record.get("status") != JobStatus.CANCELLED:
        return
    execution = record.get("execution")
    if not isinstance(execution, dict):
        return
    name = execution.get("name")
    if not isinstance(name, str) or not run_jobs.is_execution_name(name):
        return
    if execution.get("attempt") != job_queue.attempts_of(record):
        return
    try:
        api = run_jobs.run_settings().api
        run_jobs.client(api).cancel(name)
    except (run_jobs.RunJobsError, ConfigError) as exc:
        status = getattr(exc, "status", None)
        if status in (400, 404, 409):  # FAILED_PRECONDITION: it has ended already
            return
        log.warning(
            "could not cancel the job's execution",
            job_id=record.get("id"),
            execution=name,
            error=str(exc),
        )
        return
    log.info("cancelled the job's execution", job_id=record.get("id"), execution=name)
