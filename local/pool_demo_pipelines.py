"""The pipelines of `make demo-pools` (RECLAIM_PIPELINE_MODULES of its local cloud; named,
never imported by the launcher): `notify`, a quick job (a webhook's share of work), and
`render`, one stage that works `seconds` seconds (calling check(), reporting progress)."""

import time

from shared.pipelines import Pipeline, StageContext, register


def _notify(ctx: StageContext) -> None:
    ctx.result["notified"] = ctx.payload.get("wave")


def _render(ctx: StageContext) -> None:
    seconds = float(ctx.payload.get("seconds", 6.0))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.check()
        time.sleep(0.2)
    ctx.result["rendered_s"] = seconds


register(Pipeline("notify", stages=[("notify", _notify)]), replace=True)
register(Pipeline("render", stages=[("render", _render)]), replace=True)
