"""The pipelines of `make demo-pools` (RECLAIM_PIPELINE_MODULES of its local cloud; named,
never imported by the launcher): `notify`, a quick job (a webhook's share of work), and
`render`, one stage that works `seconds` seconds (calling check(), reporting progress);
`film`, whose middle stage outlasts its pool's claim timeout (the Cloud Run job runs it)."""

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


def _prepare(ctx: StageContext) -> None:
    ctx.state["prepared_in_attempt"] = ctx.attempt


def _film(ctx: StageContext) -> None:
    """A stage longer than its pool's claim timeout: it runs on the Cloud Run job."""
    seconds = float(ctx.payload.get("seconds", 15.0))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.check()  # answers the task's SIGTERM: the job is handed back, not lost
        time.sleep(0.2)
    ctx.state["filmed_in_attempt"] = ctx.attempt


def _deliver(ctx: StageContext) -> None:
    ctx.result.update(state=dict(ctx.state), attempt=ctx.attempt)


register(
    Pipeline("film", stages=[("prepare", _prepare), ("film", _film), ("deliver", _deliver)]),
    replace=True,
)
