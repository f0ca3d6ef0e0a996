"""A deployment's own pipelines, registered by import (RECLAIM_PIPELINE_MODULES):
`shout`, and `nap`, whose middle stage sleeps without ever calling check()."""

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
