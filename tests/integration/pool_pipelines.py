"""Pipelines of the pools tests (RECLAIM_PIPELINE_MODULES; never imported by the test
process): `pool-quick`, done at once, and `pool-heavy`, which holds its claim slot until
the job its payload names has ended (a test's way to keep a pool saturated by state, not
by time)."""

import time

from shared import job_queue
from shared.pipelines import Pipeline, StageContext, register


def _quick(ctx: StageContext) -> None:
    ctx.result["quick"] = True


register(Pipeline("pool-quick", stages=[("quick", _quick)]), replace=True)


def _hold(ctx: StageContext) -> None:
    """Hold this slot until the job named `until` has ended (or `limit_s` passed)."""
    other = str(ctx.payload["until"])
    deadline = time.monotonic() + float(ctx.payload.get("limit_s", 60.0))
    while time.monotonic() < deadline:
        try:
            record = ctx.store.read(other).record
        except Exception:  # not created yet
            record = {}
        if job_queue.is_terminal(record):
            ctx.result["held_until"] = other
            return
        ctx.check()
        time.sleep(0.05)
    raise TimeoutError(f"{other} did not end while this job held its slot")


register(Pipeline("pool-heavy", stages=[("hold", _hold)]), replace=True)
