"""`fresh`, a pipeline a later revision adds: submit may learn it before claim does."""

from shared.pipelines import Pipeline, StageContext, register


def _greet(ctx: StageContext) -> None:
    ctx.result["greeting"] = f"hello {ctx.payload.get('name', 'world')}"


register(Pipeline("fresh", stages=[("greet", _greet)]), replace=True)
