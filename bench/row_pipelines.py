"""Pipelines of the benchmark rows (RECLAIM_PIPELINE_MODULES of their local clouds):

- `bench-coalesced` (bench/calls.py): `demo`'s stages with their boundaries coalesced
  into one checkpoint write per CHECKPOINT_EVERY_S (Pipeline.checkpoint_every_s), as a
  pipeline of short stages may ask;
- `bench-first` (bench/first_stage.py): one stage that notes when it started (the wall
  clock of the machine the whole local cloud runs on) in the job's result.
"""

import time

from shared.pipelines import Pipeline, StageContext, demo, register

CHECKPOINT_EVERY_S = 3.0
"""Three stages of 1.2 s: one checkpoint write (at 3 s) instead of two (at 1.2 and 2.4 s)."""
STARTED = "stage_started_at"
"""The result field `bench-first` writes: time.time() as its stage began."""


def _first(ctx: StageContext) -> None:
    ctx.result[STARTED] = time.time()


register(
    Pipeline(
        "bench-coalesced",
        plan=demo.plan,
        validate=demo.validate,
        checkpoint_every_s=CHECKPOINT_EVERY_S,
    ),
    replace=True,
)
register(Pipeline("bench-first", stages=[("first", _first)]), replace=True)
