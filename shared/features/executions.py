"""The sweep's look at Cloud Run job executions: a job whose execution ended while its
record still shows it running has lost its owner, and is rescued at once.

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
rescue, as before.
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
