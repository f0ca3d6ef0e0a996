"""The pipelines of the pools benchmark (RECLAIM_PIPELINE_MODULES of its local cloud):
`bench-light`, a job that ends at once (a webhook's share of work), and `bench-heavy`,
one stage that holds its claim slot for `hold_s` seconds (a render's), calling check()."""

import time

from shared.pipelines import Pipeline, StageContext, register


def _light(ctx: StageContext) -> None:
    ctx.result["ok"] = True


def _heavy(ctx: StageContext) -> None:
    end = time.monotonic() + float(ctx.payload.get("hold_s", 10.0))
    while time.monotonic() < end:
        ctx.check()
        time.sleep(0.1)


register(Pipeline("bench-light", stages=[("light", _light)]), replace=True)
register(Pipeline("bench-heavy", stages=[("heavy", _heavy)]), replace=True)
