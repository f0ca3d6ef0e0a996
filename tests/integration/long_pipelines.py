"""The Cloud Run jobs tests' pipeline, registered by the functions and the jobs' tasks
only (RECLAIM_PIPELINE_MODULES); the test process never imports it.

`long`: "first" notes its attempt; "hold" calls check() every 50 ms until the test
releases the job (an object release/<job id> in the uploads bucket) or, with `hold_s`,
until that many seconds have passed; with `sleep_s` it sleeps that long without ever
calling check() (a stage that cannot be stopped: a GPU kernel, a long library call);
"last" reports what the stages saw. The same stages run as `bounded`, `timed`, `slow` and
`stale`, each the pipeline of one job pool of the tests' pools file (test_run_jobs.py).
"""

import time

from shared.errors import NotFound
from shared.pipelines import Pipeline, StageContext, register

RELEASE_PREFIX = "release/"


def _first(ctx: StageContext) -> None:
    ctx.state["first"] = ctx.attempt


def _released(ctx: StageContext) -> bool:
    try:
        ctx.store.read_object(str(ctx.payload["bucket"]), RELEASE_PREFIX + ctx.job_id)
    except NotFound:
        return False
    return True


def _hold(ctx: StageContext) -> None:
    started = time.monotonic()
    if "sleep_s" in ctx.payload:
        time.sleep(float(ctx.payload["sleep_s"]))
        ctx.state["held"] = {
            "attempt": ctx.attempt,
            "seconds": round(time.monotonic() - started, 3),
        }
        return
    hold_s = float(ctx.payload.get("hold_s", 0))
    while not (hold_s and time.monotonic() - started >= hold_s):
        if not hold_s and _released(ctx):
            break
        ctx.check()
        time.sleep(0.05)
    ctx.state["held"] = {"attempt": ctx.attempt, "seconds": round(time.monotonic() - started, 3)}


def _last(ctx: StageContext) -> None:
    ctx.result.update(state=dict(ctx.state), attempt=ctx.attempt)


STAGES = [("first", _first), ("hold", _hold), ("last", _last)]
for _name in ("long", "bounded", "timed", "slow", "stale"):
    register(Pipeline(_name, stages=list(STAGES)), replace=True)
