"""Runner "job": the claim's stages run in a Cloud Run job execution, not in the push.

A claim instance of a pool whose runner is "job" (RECLAIM_RUNNER=job) does everything a
push claim does up to and including the claim's compare-and-swap (the features' gates,
the attempt counted, the owner stamped), then, instead of running the stages:

1. takes one of its pool's `job.max_executions` execution places
   (shared.features.executions); with none free, the job is handed back;
2. starts an execution of RECLAIM_RUN_JOB whose environment overrides carry the job's id,
   the generation the claim wrote and the place (shared.run_jobs);
3. records the execution on the job (a write matched on that generation, so the sweep
   can watch it: shared.features.executions); a task that adopted the claim first wins
   this race and the record already names it;
4. acks the push.

The execution's task (shared.claim.task) adopts the claim by CAS and runs the stages
through the same code as a push.

A :run Cloud Run refuses, and a pool at its bound, cost the job nothing: it is handed back
(queued, its attempt given back as a SIGTERM hand-back gives it back, history "handed
back" with the reason), due after a backoff that grows with each such hand-back in a row,
its pending marker marked due then, so the next freed slot of the pool, or the sweep,
starts it (docs/long-stages.md). That holds for what passes (no answer, 429: the run
quota or the project's 1,000 running executions, https://cloud.google.com/run/quotas;
5xx) and, for RECLAIM_ROLLOUT_SKEW_SECONDS from the first refusal in a row, for what a
fresh grant or a job the same apply made answers while it propagates (403, 404:
https://cloud.google.com/iam/docs/access-change-propagation). Anything else, and a 403 or
404 past that bound, is a failed attempt like a stage error (requeued with backoff, failed
when out of attempts), so a misnamed job or a missing grant ends in a failed job with the
API's answer, never in a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from shared import finish, job_queue, metrics, run_jobs, tracing
from shared.claim.owned import OwnedRecord
from shared.config import Settings
from shared.errors import ConfigError, LostRace, NotFound, OwnerLost, StorageError
from shared.features import execution_places as places
from shared.jobs import JobRecord, format_time
from shared.logs import JobLogger
from shared.outcome import Outcome, OutcomeKind
from shared.seams import Context
from shared.storage import Stored
from shared.traces.spans import attempt_span_id

Fallback = Callable[[Exception], Outcome]
"""The claim's way to end an attempt that could not start (the runner's retry-or-fail)."""

RUN_REFUSED = "Cloud Run did not start the execution"
"""How a hand-back for a refused :run starts its reason (the history says which)."""
AT_BOUND = "the pool runs its max_executions"
AT_BOUND_DELAY_MAX_S = 30.0
"""A job waiting for a place is tried again within this (a place frees when a task ends,
at any time; a refused :run backs off up to RECLAIM_BACKOFF_MAX_SECONDS instead)."""


def wanted(settings: Settings | None = None) -> bool:
    """True when this process's stages run on a Cloud Run job; ConfigError if the
    runner settings are bad, or the pool's GPU job is outside the GPU regions (asked
    before the claim's CAS, so nothing is claimed then)."""
    run = run_jobs.run_settings()
    problem = run_jobs.gpu_region_problem(settings, run) if settings is not None else None
    if problem is not None:
        raise ConfigError(problem)
    return run.on_jobs


TRACEPARENT_ENV = "TRACEPARENT"
"""The task's W3C trace context, as OpenTelemetry carries one in the environment
(https://opentelemetry.io/docs/specs/otel/context/env-carriers/): the attempt's span, so
what the task's own code traces joins the job's trace."""


def task_env(claimed: Stored, place: places.Place | None = None) -> dict[str, str]:
    """The overrides an execution carries: the job it runs, the claim it adopts, the
    execution place it frees when it ends and the attempt's trace context."""
    record = claimed.record
    env = {
        run_jobs.JOB_ID_ENV: str(record["id"]),
        run_jobs.CLAIM_GENERATION_ENV: str(claimed.generation),
    }
    if place is not None:
        env[run_jobs.PLACE_ENV] = place.token()
    context = tracing.parse(record.get("traceparent"))
    if context is not None:
        span = attempt_span_id(context, str(record["id"]), job_queue.attempts_of(record))
        env[TRACEPARENT_ENV] = context.with_span(span).traceparent
    return env


def start(
    ctx: Context,
    claimed: Stored,
    *,
    owner: str,
    jlog: JobLogger,
    fallback: Fallback,
    owned: OwnedRecord,
) -> Outcome:
    """Start the execution for a claim just written (`claimed`), record it, answer."""
    settings = run_jobs.run_settings()
    job = claimed.record
    job_id = str(job["id"])
    attempt = job_queue.attempts_of(job)
    sizing = ctx.settings.pools.pool_of(job.get("pipeline"))
    place = None
    if sizing.job is not None:
        bound = sizing.job.max_executions
        try:
            place = places.take_place(ctx, sizing.name, bound, job, ctx.now())
        except StorageError as exc:
            return hand_back(ctx, owned, jlog, f"no execution place could be taken: {exc}")
        if place is None:
            return hand_back(ctx, owned, jlog, f"{AT_BOUND} ({bound}) executions already")
    try:
        execution = run_jobs.client(settings.api).run(settings.job, task_env(claimed, place))
    except run_jobs.RunJobsError as exc:
        places.release_place(ctx.store, place.token() if place is not None else None)
        kind = run_jobs.refusal_kind(exc)
        jlog.warning(RUN_REFUSED, job=settings.job, error=str(exc), refusal=kind)
        bound_s = ctx.settings.rollout_skew_seconds
        if kind == "permanent" or (kind == "grant" and refused_too_long(job, ctx.now(), bound_s)):
            return fallback(exc)
        return hand_back(ctx, owned, jlog, f"{RUN_REFUSED} ({kind}): {exc}")
    fields = job_queue.dispatched_fields(
        job,
        ctx.now(),
        job_name=settings.job,
        execution=execution,
        claim_generation=claimed.generation,
    )
    recorded = True
    try:
        ctx.store.update({**job, **fields}, claimed.generation)
    except (LostRace, NotFound):
        recorded = False  # its task adopted the claim first, or a person ended the job
    except StorageError as exc:  # the task adopts the claim's own generation all the same
        recorded = False
        jlog.warning("could not record the execution", execution=execution, error=str(exc))
    jlog.info("dispatched to a Cloud Run job", execution=execution, recorded=recorded)
    return Outcome(
        job_id, OutcomeKind.DISPATCHED, run_jobs.short_name(execution), owner=owner, attempt=attempt
    )


# --------------------------------------------------------------------------- hand-backs


def held_back_fields(
    job: JobRecord, now: datetime, *, max_attempts: int, delay_s: float, why: str
) -> JobRecord:
    """running -> queued at no cost, as a SIGTERM hand-back (job_queue.handback_fields:
    the attempt given back), but due only after `delay_s`, its history entry saying why."""
    fields = job_queue.handback_fields(job, now, max_attempts=max_attempts)
    due = format_time(now + timedelta(seconds=delay_s)) if delay_s > 0 else None
    history = list(fields.get("history") or [])
    entry: dict[str, Any] = dict(history[-1]) if history else {}
    entry["reason"] = why
    if due is not None:
        entry["not_before"] = due
    history[-1:] = [entry]  # type: ignore[list-item]
    return {**fields, "not_before": due, "history": history}


def held_back_streak(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The hand-backs before an execution started, newest first, back to the last attempt
    that started one (a claim between them does not break the streak)."""
    streak: list[Mapping[str, Any]] = []
    for entry in reversed(job.get("history") or []):
        if not isinstance(entry, Mapping):
            break
        event, reason = entry.get("event"), str(entry.get("reason") or "")
        if event == "claimed":
            continue
        if event == "handed back" and reason.startswith((RUN_REFUSED, AT_BOUND)):
            streak.append(entry)
            continue
        break
    return streak


def refused_too_long(job: Mapping[str, Any], now: datetime, bound_s: float) -> bool:
    """True once the job's :run has been refused for `bound_s` in a row (a 403 or 404
    that outlasts any grant's propagation: a missing grant, a misnamed job)."""
    refused = [e for e in held_back_streak(job) if str(e.get("reason")).startswith(RUN_REFUSED)]
    first = job_queue.parse_time(refused[-1].get("at")) if refused else None
    return first is not None and (now - first).total_seconds() >= bound_s


def hand_back(ctx: Context, owned: OwnedRecord, jlog: JobLogger, why: str) -> Outcome:
    """Give the claimed attempt back before any execution started (see the module doc):
    queued, due after a backoff, its marker marked due then."""
    s = ctx.settings
    now = ctx.now()
    job = owned.stored.record
    job_id = str(job["id"])
    streak = len(held_back_streak(job)) + 1
    jitter = job_queue.backoff_seconds(streak, s.backoff_base_seconds, s.backoff_max_seconds)
    cap = s.backoff_max_seconds
    if why.startswith(AT_BOUND):
        cap = min(cap, AT_BOUND_DELAY_MAX_S)
    delay = min(max(s.backoff_base_seconds, jitter), max(cap, 0.0))

    def build(record: JobRecord) -> JobRecord:
        return held_back_fields(record, now, max_attempts=s.max_attempts, delay_s=delay, why=why)

    try:
        handed = owned.finish(build, "handed back")
    except OwnerLost:
        jlog.warning("stopped: this owner lost the job", why="hand-back refused")
        return Outcome(job_id, OutcomeKind.LOST, "hand-back refused", owner=owned.owner)
    finish.after_requeue(ctx, handed.record, logger=jlog)
    mark_due_at(ctx, job, now + timedelta(seconds=delay), jlog)
    jlog.warning(
        "handed back before an execution started",
        why=why,
        delay_s=round(delay, 3),
        **metrics.finished(job, metrics.Ending.HANDED_BACK, run_s=0.0),
    )
    return Outcome(job_id, OutcomeKind.HANDED_BACK, why, owner=owned.owner, attempt=owned.attempt)


def mark_due_at(ctx: Context, job: Mapping[str, Any], due: datetime, jlog: JobLogger) -> None:
    """Mark the job's pending marker due at `due` (shared.recovery.mark_due's write, made
    here without that module: the claim's import depth), so the next freed slot of its
    pool takes it then; a failed write is logged (the sweep still rings it)."""
    job_id = str(job.get("id"))
    try:
        ctx.store.mark_due(job_id, due, pool=ctx.settings.marker_pool(job))
    except StorageError as exc:
        jlog.warning("could not mark the job due on its marker", job_id=job_id, error=str(exc))
