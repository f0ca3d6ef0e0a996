"""A deployment's own pipeline, registered by import (RECLAIM_PIPELINE_MODULES)."""

from shared.pipelines import Pipeline, StageContext, register


def _shout(ctx: StageContext) -> None:
    ctx.result["text"] = str(ctx.payload.get("text", "")).upper()


register(Pipeline("shout", stages=[("shout", _shout)]), replace=True)
