"""A cron schedule's tick becomes exactly one job.

Cloud Scheduler delivers at least once. The tick's scheduled time comes in the
`X-CloudScheduler-ScheduleTime` header ("the job schedule time in RFC3339 UTC 'Zulu'
format"), which the API reference documents for App Engine targets
(https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs,
AppEngineHttpTarget `headers`); our jobs use HTTP targets, and a manual "force run" is
not a tick ("if the schedule is manually triggered, this field will be the function
execution time", https://firebase.google.com/docs/reference/functions/2nd-gen/node/firebase-functions.scheduler.scheduledevent).
So the tick is the header's time when that is a tick of the schedule; otherwise the
newest tick at or before the header's time, or at or before now when there is no
header. The job id is derived from the schedule name and the tick
(shared.timing.tick_job_id) and the record is create-only, so a retried, duplicated or
forced delivery lands on one job per tick (a force run re-delivers the newest tick:
it creates that tick's job if it was missed, and finds it otherwise).

A tick is accepted only within a window around the receiver's clock (check_window): at
most TICK_LATE_S late (Cloud Scheduler's retries, a cold start) and at most the clock skew
early. Anything else (a far-future tick, a calendar edge) is a 400: it creates no job and
never becomes the schedule's last run.

Overlap `skip`: a tick while the schedule's previous run is still pending creates
nothing. The guard is ONE create-only write, `schedules/<name>/running`, the unique-key
lock of shared.features.uniqueness under another name: of two ticks posted at once one creates it
and the other finds it held, so two runs are never pending together. A lock whose run
ended (or never got a record, past a grace) is taken over by a generation-matched write.
`schedules/<name>/last` names the newest run for GET /schedules (a small pointer written
by compare-and-swap after each created run; one write per tick, far below GCS's ~1
write/s per object).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import timing
from shared.cron.schedules import Schedule
from shared.errors import AlreadyExists, InvalidInput, LostRace, NotFound
from shared.features import uniqueness
from shared.logs import get_logger
from shared.submission import create as submission
from shared.submission import parse

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store

log = get_logger(__name__)

SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
TICK_LATE_S = 24 * 3600.0
"""How late a tick may arrive: Cloud Scheduler's retries (terraform/schedules.tf: 3, with
backoff, each up to the attempt deadline, at most 5 retries by the API:
https://cloud.google.com/scheduler/docs/configuring/retry-jobs) end well within a day."""


@dataclass(frozen=True)
class Tick:
    """What one delivered tick did."""

    schedule: str
    tick: datetime
    job_id: str
    created: bool
    skipped_for: str | None = None  # overlap "skip": the run still pending

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schedule": self.schedule,
            "scheduled_time": self.tick.isoformat(),
            "id": self.job_id,
            "created": self.created,
            "skipped": self.skipped_for is not None,
        }
        if self.skipped_for is not None:
            out["running"] = self.skipped_for
        else:
            out["status_url"] = f"/jobs/{self.job_id}"
        return out


def parse_tick_time(schedule: Schedule, header: str | None, now: datetime) -> datetime:
    """The tick a delivery stands for: the header's time when it is a tick, else the newest
    tick at or before it (a force run), else at or before `now` (no header). InvalidInput
    for a header that is not an RFC 3339 time with a zone, or that has no tick within the
    calendar."""
    if not header:
        return schedule.last_at_or_before(now)
    try:
        when = timing.parse_zoned(header, SCHEDULE_TIME_HEADER)
    except ValueError as exc:
        raise InvalidInput(str(exc), "schedule time") from None
    try:
        return schedule.last_at_or_before(when.replace(microsecond=0))
    except (OverflowError, ValueError):  # the schedule's zone takes it past year 1 or 9999
        raise InvalidInput(
            f"{header} has no tick of schedule {schedule.name!r} ({schedule.cron}) within"
            " the calendar (years 1-9999)",
            "schedule time",
        ) from None


def check_window(tick: datetime, now: datetime, skew_s: float) -> None:
    """InvalidInput unless `tick` is at most TICK_LATE_S before `now` and at most `skew_s`
    (RECLAIM_CLOCK_SKEW_SECONDS) after it: a tick is a time that has just come."""
    if now - timedelta(seconds=TICK_LATE_S) <= tick <= now + timedelta(seconds=skew_s):
        return
    raise InvalidInput(
        f"{SCHEDULE_TIME_HEADER} {tick.isoformat()} is not a tick that has just come: a tick"
        f" is accepted from {TICK_LATE_S / 3600:g} hours before to {skew_s:g} seconds after"
        " this function's clock (docs/time.md)",
        "schedule time",
    )


def fire(ctx: Context, schedule: Schedule, tick: datetime, now: datetime) -> Tick:
    """Create (or find) the job of one tick, unless a `skip` schedule's run is pending;
    InvalidInput, with nothing written, for a tick outside the window (check_window)."""
    check_window(tick, now, ctx.settings.clock_skew_seconds)
    store = ctx.store
    job_id = timing.tick_job_id(schedule.name, tick)
    if schedule.overlap == "skip":
        lock = timing.lock_data(job_id, schedule.name, None, now)
        running = uniqueness.take(store, _running(schedule.name), lock, now, "the schedule")
        if running is not None:
            log.info("tick skipped: the previous run is pending", schedule=schedule.name)
            return Tick(schedule.name, tick, job_id, False, skipped_for=running)
    spec = parse.JobSpec(schedule.pipeline, schedule.payload, client_id=job_id)
    result = submission.submit(
        ctx, parse.Submission(jobs=(spec,), batch_id=None, is_batch=False), now
    )
    _set_last(store, schedule.name, job_id, tick)
    return Tick(schedule.name, tick, job_id, result.created)


def last_run(store: Store, name: str) -> dict[str, Any] | None:
    """{"job_id", "tick"} of the schedule's newest run, or None."""
    try:
        data = json.loads(store.read_blob(_pointer(name)).data)
    except (NotFound, ValueError):
        return None
    return data if isinstance(data, dict) and "job_id" in data else None


def _set_last(store: Store, name: str, job_id: str, tick: datetime) -> None:
    """Point at this run unless a newer tick is already recorded (a late retry)."""
    data = json.dumps({"job_id": job_id, "tick": tick.isoformat()}).encode()
    for _ in range(3):
        try:
            blob = store.read_blob(_pointer(name))
        except NotFound:
            try:
                store.put_blob(_pointer(name), data, generation=0)
                return
            except AlreadyExists:
                continue
        try:
            old = json.loads(blob.data)
            if str(old.get("tick", "")) >= tick.isoformat():
                return
        except (ValueError, AttributeError):
            pass
        try:
            store.put_blob(_pointer(name), data, generation=blob.generation)
            return
        except LostRace:
            continue


def _pointer(name: str) -> str:
    return f"schedules/{name}/last"


def _running(name: str) -> str:
    """A `skip` schedule's overlap guard: the lock naming its pending run."""
    return f"schedules/{name}/running"
