"""What a stage calls to wait (the "waits" tools the runner hands its StageContext), and
the parks they end the stage with (shared.seams.ParkPlan, carried by shared.errors.Parked).

Each call ends the stage by raising Parked; the runner then writes the park at that stage
boundary (shared.claim.runner: the checkpoint at the next stage and the park in one
write) and runs the plan's ``after``. Index first, as everywhere: a sleep's or a timeout's
entry in the time index (``scheduled/<slot>/<hour>/<id>``, the delayed jobs' index:
shared.features.delayed) is written before the park, so the sweep's time pass always
finds a parked job whose time came.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from shared import timing
from shared.errors import AlreadyExists, Parked
from shared.features import delayed
from shared.features.waits import fanout, keys, release, rules
from shared.pipelines.base import Waitpoint

if TYPE_CHECKING:
    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import Stored


@dataclass(frozen=True)
class TimedPlan:
    """The park of a sleep or a waitpoint (shared.seams.ParkPlan)."""

    park: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.park["kind"])

    def fields(self, job: JobRecord, now: datetime, max_attempts: int) -> JobRecord:
        return rules.park_fields(job, now, self.park, max_attempts)

    def after(self, ctx: Context, parked: Stored) -> bool:
        """A completion that came first, or a time already past, releases it at once.
        Its pending marker is left as it is: a wait shorter than the stale time costs the
        sweep nothing; a longer one is read once and marked ahead (hooks.sweep_check)."""
        now = ctx.now()
        if self.kind == "token" and release.release_early(ctx, parked):
            return True
        return release.is_due(parked.record, now) and release.wake(ctx, parked, now)


class Tools:
    """One stage's waits (StageContext.sleep, waitpoint, wait, fan_out, waited, children):
    made when the stage starts, doing no I/O until the stage asks."""

    def __init__(
        self, ctx: Context, job: JobRecord, attempt: int, stage_index: int, stage: str
    ) -> None:
        self.ctx = ctx
        self.job = job
        self.job_id = str(job["id"])
        self.attempt = attempt
        self.stage_index = stage_index
        self.stage = stage
        self._seq = 0

    def now(self) -> datetime:
        return self.ctx.now()

    # --- sleep

    def sleep_until(self, when: datetime) -> NoReturn:
        now = self.ctx.now()
        until = rules.check_when(when, now)
        self._index_time(until, now)
        park = {**rules.base_park("sleep", self.stage, self.stage_index + 1, now)}
        park["until"] = until.isoformat()
        raise Parked(TimedPlan(park), rules.reason(park))

    # --- waitpoints

    def waitpoint(self, timeout: float | None) -> Waitpoint:
        seconds = None if timeout is None else rules.check_seconds(timeout, "timeout")
        self._seq += 1
        ref = rules.ref_of(self.attempt, self.stage_index, self._seq)
        token = rules.sign(self._key(), self.job_id, ref)
        at = None if seconds is None else self.ctx.now() + timedelta(seconds=seconds)
        return Waitpoint(token, rules.completion_url(keys.base_url(), token), ref, at)

    def wait(self, waitpoint: Waitpoint) -> NoReturn:
        if not isinstance(waitpoint, Waitpoint):
            raise TypeError("ctx.wait takes a Waitpoint made by ctx.waitpoint()")
        found = rules.verify(self._key(), waitpoint.token)
        if found is None or found != (self.job_id, waitpoint.ref):
            raise ValueError("ctx.wait: that waitpoint is not one of this job's")
        now = self.ctx.now()
        park = rules.base_park("token", self.stage, self.stage_index + 1, now)
        park.update(ref=waitpoint.ref, token=waitpoint.token, url=waitpoint.url, until=None)
        if waitpoint.timeout_at is not None:
            until = max(waitpoint.timeout_at, now)
            self._index_time(until, now)
            park["until"] = until.isoformat()
        raise Parked(TimedPlan(park), rules.reason(park))

    def waited(self) -> dict[str, Any] | None:
        """The last wait's outcome, if it ended the stage just before this one."""
        found = self.job.get("waited")
        if isinstance(found, dict) and found.get("next_stage") == self.stage_index:
            return dict(found)
        return None

    # --- fan-out

    def fan_out(
        self, children: Sequence[Mapping[str, Any]], on_child_failure: str, max_running: int | None
    ) -> NoReturn:
        plan = fanout.start(
            self.ctx,
            self.job,
            self.stage_index,
            self.stage,
            children,
            on_child_failure,
            max_running,
        )
        raise Parked(plan, rules.reason(plan.park))

    def children(self, page_token: str | None, page_size: int) -> dict[str, Any]:
        return fanout.children_page(self.ctx, self.job, page_token, page_size)

    # --- helpers

    def _key(self) -> bytes:
        key = keys.signing_key(self.ctx.store)
        assert key is not None  # created on first use
        return key

    def _index_time(self, until: datetime, now: datetime) -> None:
        """The time index's entry, before the park (a leftover is dropped by the sweep)."""
        if until <= now:
            return
        with contextlib.suppress(AlreadyExists):  # there already: this park's own
            delayed.write_entry(self.ctx.store, timing.scheduled_name(self.job_id, until), now)


def tools_for(ctx: Context, job: JobRecord, attempt: int, stage_index: int, stage: str) -> Tools:
    """The feature table's stage tools (shared.seams.StageTools)."""
    return Tools(ctx, job, attempt, stage_index, stage)
