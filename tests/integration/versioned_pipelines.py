"""`steps`, a pipeline whose stage list each revision sets (TEST_STEPS, comma-separated
names), so a test can insert or remove a stage by deploying a revision. The stage named
by TEST_HOLD keeps calling check() for up to a minute: where a rollout finds a job."""

import os
import time

from shared.pipelines import Pipeline, StageContext, register

HOLD_S = 60.0


def _step(name: str):  # type: ignore[no-untyped-def]
    def run(ctx: StageContext) -> None:
        if os.environ.get("TEST_HOLD") == name:
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                ctx.check()  # a rollout's SIGTERM hands the job back here
                time.sleep(0.05)
        ctx.state.setdefault("ran", []).append(name)
        ctx.outputs.write(f"{name}.json", {"stage": name, "attempt": ctx.attempt})
        ctx.result["ran"] = list(ctx.state["ran"])

    return (name, run)


STEPS = [s for s in os.environ.get("TEST_STEPS", "one,two,three").split(",") if s]
register(Pipeline("steps", stages=[_step(s) for s in STEPS]), replace=True)
