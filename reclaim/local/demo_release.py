"""The demo pipeline's next release, rolled out mid-batch by `make demo`, the chaos suite
and `make bench`: `demo` with one stage appended (`receipt`), registered by the new claim
revision's RECLAIM_PIPELINE_MODULES. A job the old release left mid-pipeline resumes by
stage name on it (shared.resume; docs/pipelines.md "Deploying a change")."""

from collections.abc import Mapping, Sequence
from typing import Any

from shared.pipelines import Pipeline, Stage, StageContext, demo, register

MODULE = __name__
ADDED = "receipt"


def _receipt(ctx: StageContext) -> None:
    """The added stage, now the last: the demo's result again, from `state` (a job resumed
    here by name starts with an empty result), and the receipt."""
    ctx.check()
    completed = ctx.state.get("completed", [])
    ctx.result.update(
        stages=len(completed),
        attempt=ctx.attempt,
        completed=completed,
        outputs=ctx.state.get("outputs", []),
        receipt=True,
    )


def plan(payload: Mapping[str, Any]) -> Sequence[tuple[str, Stage]]:
    return [*demo.plan(payload), (ADDED, _receipt)]


register(
    Pipeline(name="demo", plan=plan, validate=demo.validate, doc=demo.PIPELINE.doc),
    replace=True,
)
