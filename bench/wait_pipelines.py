"""The pipelines of the waits benchmarks (RECLAIM_PIPELINE_MODULES of their local clouds,
and imported in-process for the call counts): `bench-wait` waits for a waitpoint,
`bench-nowait` is the same two stages back to back (the baseline), `bench-fan` fans out
`bench-kid` children (in the `gpu` pool when the cloud has one) and joins them."""

from __future__ import annotations

import time
from typing import Any

from shared.pipelines import Pipeline, StageContext, register


def _ask(ctx: StageContext) -> None:
    ctx.state["asked"] = True
    ctx.wait(ctx.waitpoint())


def _prepare(ctx: StageContext) -> None:
    ctx.state["asked"] = True


def _after(ctx: StageContext) -> None:
    ctx.result["waited"] = (ctx.waited or {}).get("status")


register(Pipeline("bench-wait", stages=[("ask", _ask), ("after", _after)]), replace=True)
register(Pipeline("bench-nowait", stages=[("ask", _prepare), ("after", _after)]), replace=True)


def _kid(ctx: StageContext) -> None:
    time.sleep(float(ctx.payload.get("sleep_s", 0.0)))
    ctx.result["i"] = ctx.payload.get("i")


def _fan(ctx: StageContext) -> None:
    n = int(ctx.payload.get("n", 10))
    sleep_s = float(ctx.payload.get("sleep_s", 0.0))
    kids = [{"pipeline": "bench-kid", "payload": {"i": i, "sleep_s": sleep_s}} for i in range(n)]
    ctx.fan_out(kids, on_child_failure="continue")  # the children are read by the join


def _join(ctx: StageContext) -> None:
    if ctx.payload.get("read") is False:  # the fan-out's own cost, without the join's reads
        ctx.result["children"] = (ctx.waited or {}).get("total")
        return
    seen: list[dict[str, Any]] = []
    token = None
    while True:
        page = ctx.children(page_token=token, page_size=1000)
        seen += page["children"]
        token = page["next_page_token"]
        if token is None:
            break
    ctx.result["children"] = len(seen)


register(Pipeline("bench-kid", stages=[("kid", _kid)]), replace=True)
register(Pipeline("bench-fan", stages=[("fan", _fan), ("join", _join)]), replace=True)
