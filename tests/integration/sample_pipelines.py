"""A deployment's own pipelines, registered by import (RECLAIM_PIPELINE_MODULES):
`shout`, `nap`, whose middle stage sleeps without ever calling check(), `collect`
(workflows) and `until_handed_back`, which holds its slot until another job is handed
back."""

import time

from shared.pipelines import Pipeline, StageContext, register


def _shout(ctx: StageContext) -> None:
    ctx.result["text"] = str(ctx.payload.get("text", "")).upper()


register(Pipeline("shout", stages=[("shout", _shout)]), replace=True)


def _first(ctx: StageContext) -> None:
    ctx.state["first"] = ctx.attempt


def _nap(ctx: StageContext) -> None:
    """One long call that never calls check() (a blocking library call, say)."""
    time.sleep(float(ctx.payload.get("nap_s", 1.0)))
    ctx.state["napped"] = ctx.attempt


def _last(ctx: StageContext) -> None:
    ctx.result.update(state=dict(ctx.state), attempt=ctx.attempt)


register(Pipeline("nap", stages=[("first", _first), ("nap", _nap), ("last", _last)]), replace=True)


def _collect(ctx: StageContext) -> None:
    """Workflows: the parents' results as the context gives them, and its own tag."""
    ctx.result.update(
        tag=ctx.payload.get("tag"),
        parents={p: v.get("result") for p, v in ctx.parents().items()},
        members=len(ctx.batch_members()),
    )


register(Pipeline("collect", stages=[("collect", _collect)]), replace=True)


def _until_handed_back(ctx: StageContext) -> None:
    """Hold this job's slot until the job named in the payload has been handed back (a
    test's way to keep every slot busy through a hand-back, by state, not by time)."""
    other = str(ctx.payload["job"])
    deadline = time.monotonic() + float(ctx.payload.get("limit_s", 60.0))
    while time.monotonic() < deadline:
        history = ctx.store.read(other).record.get("history") or []
        if any(e.get("event") == "handed back" for e in history):
            ctx.result["released_by"] = other
            return
        ctx.check()
        time.sleep(0.05)
    raise TimeoutError(f"{other} was not handed back")


register(Pipeline("until_handed_back", stages=[("hold", _until_handed_back)]), replace=True)
