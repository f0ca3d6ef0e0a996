"""A delivery that reached the wrong pool is sent on to the right one, not run.

Each pool's claim function serves its own topic (shared.pools), but a doorbell may reach
the wrong one: a rollout moved a pipeline to another pool while its jobs' doorbells were
on their way (or a ring that could not name the pipeline went to the ringer's own pool).
Running it here would size it wrong (the memory, timeout and stale time of another
pool), so the claim's first gate rings the job on its pool's topic and acks: no attempt
spent, nothing written. When the ring fails the push is redelivered instead, so the job
is never left without a doorbell (the sweep would find it anyway).

The gate runs after "claimable" (a duplicate of a running job is acked as ever) and
before every other gate (flow control reserves places and tokens: only the pool that
runs the job may take them). It is the `pools` row of shared.features.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.seams import ring_or_leave

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Stored

log = get_logger(__name__)


def gate(ctx: Context, stored: Stored, now: datetime) -> Outcome | None:
    """None when the job's pipeline runs in this claim's pool; else ring it on its own
    pool's topic and answer REROUTED."""
    job = stored.record
    pipeline = job.get("pipeline")
    settings = ctx.settings
    right = settings.pools.name_of(pipeline)
    if right == settings.pool:
        return None
    job_id = str(job.get("id"))
    trace = job.get("traceparent")
    failed = ring_or_leave(
        ctx.doorbell, job_id, trace, pipeline=pipeline if isinstance(pipeline, str) else None
    )
    log.info(
        "delivered to the wrong pool: sent on",
        job_id=job_id,
        pipeline=pipeline,
        pool=settings.pool,
        to_pool=right,
        rang=failed is None,
        traceparent=trace,
    )
    detail = f"pipeline {pipeline} runs in pool {right}, not {settings.pool}"
    return Outcome(job_id, OutcomeKind.REROUTED, detail, redeliver=failed is not None)
