"""Pipelines that wait (docs/waiting.md), registered by import (RECLAIM_PIPELINE_MODULES)
for the waits tests and benchmarks: `nap-then` sleeps, `approval` waits for a waitpoint
(`early`: completed by its own stage before it waits), `fan` fans out `kid` children and
joins them."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from shared.pipelines import Pipeline, StageContext, register


def _after(ctx: StageContext) -> None:
    """The stage after a wait: what ended it, as the next stage reads it."""
    ctx.result.update(waited=ctx.waited, before=ctx.state.get("before"))


def _nap(ctx: StageContext) -> None:
    ctx.state["before"] = "napped"
    ctx.sleep(float(ctx.payload.get("seconds", 1.0)))


register(Pipeline("nap-then", stages=[("nap", _nap), ("after", _after)]), replace=True)


def _ask(ctx: StageContext) -> None:
    wp = ctx.waitpoint(timeout=ctx.payload.get("timeout"))
    ctx.state["before"] = "asked"
    if ctx.payload.get("early"):  # a provider that calls back before the stage waits
        body = json.dumps({"early": True}).encode()
        assert wp.url is not None
        req = urllib.request.Request(
            wp.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            ctx.state["early_status"] = resp.status
    ctx.wait(wp)


register(Pipeline("approval", stages=[("ask", _ask), ("after", _after)]), replace=True)


def _kid(ctx: StageContext) -> None:
    import time

    time.sleep(float(ctx.payload.get("sleep_s", 0.0)))
    ctx.result["i"] = ctx.payload.get("i")
    ctx.result["square"] = int(ctx.payload.get("i", 0)) ** 2


register(Pipeline("kid", stages=[("kid", _kid)]), replace=True)


def _fan(ctx: StageContext) -> None:
    n = int(ctx.payload.get("n", 10))
    sleep_s = float(ctx.payload.get("sleep_s", 0.0))
    kids = [{"pipeline": "kid", "payload": {"i": i, "sleep_s": sleep_s}} for i in range(n)]
    ctx.fan_out(
        kids,
        on_child_failure=str(ctx.payload.get("policy", "fail")),
        max_running=ctx.payload.get("max_running"),
    )


def _join(ctx: StageContext) -> None:
    seen: list[dict[str, Any]] = []
    token = None
    while True:
        page = ctx.children(page_token=token, page_size=200)
        seen += page["children"]
        token = page["next_page_token"]
        if token is None:
            break
    ctx.log.info("join ran", children=len(seen))
    ctx.result.update(
        children=len(seen),
        statuses=sorted({str(c["status"]) for c in seen}),
        squares=sum(int((c.get("result") or {}).get("square", 0)) for c in seen),
        indexes=sorted(int(c["index"]) for c in seen) == list(range(len(seen))),
    )


register(Pipeline("fan", stages=[("fan", _fan), ("join", _join)]), replace=True)
