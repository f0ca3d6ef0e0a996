"""The feature table: every optional feature of the queue, one row each, in the order they
run at each seam (a gate, a hook, a sweep pass). Only the front door (shared.queue) reads it
and hands it down inside its Context; no operation and no feature imports this module
(tests/unit/test_seams.py checks). Adding a feature is a module and a row here:
docs/adding-a-feature.md walks the row of flow control.
"""

from __future__ import annotations

from shared import timing
from shared.clock import Clock, utcnow
from shared.config import Settings
from shared.features import (
    delayed,
    execution_places,
    executions,
    expiry,
    flow,
    pool_routing,
    tags,
    uniqueness,
    workflows,
)
from shared.features import flow_policy as fp
from shared.features import workflow_graph as graph
from shared.features.waits import fanout as wfan
from shared.features.waits import hooks as waits
from shared.features.waits import parking as wpark
from shared.features.waits import rules as wrules
from shared.seams import Context, CreateJobs, Feature, ListFilter, Ringer, SweepPass
from shared.storage import Store

POOLS = Feature(
    name="pools",  # docs/pools.md
    gates=(pool_routing.gate,),  # first: another pool's job is sent on before any gate acts
)

TIME = Feature(
    name="time",  # docs/time.md
    submit_keys=timing.TIME_KEYS,
    record_fields=timing.RECORD_FIELDS,
    view_fields=timing.RECORD_FIELDS,
    view=timing.view,
    index_prefixes=(timing.SCHEDULED_PREFIX, timing.UNIQUE_PREFIX, uniqueness.CURSOR_PREFIX),
    gates=(expiry.gate,),  # an expired job ends instead of running
    terminal_hooks=(uniqueness.release_on_terminal,),  # a "while pending" key is released
    sweep_checks=(expiry.sweep_check,),  # an expired job with no doorbell left still ends
    sweep_passes=(  # delayed jobs (each fan-out slot and the old names), unique keys
        SweepPass("time", delayed.sweep_pass, beside=True, indexes=delayed.INDEXES),
    ),
    indexed=delayed.delayed_ids,  # bulk cancel: delayed jobs are not in pending/
)

FLOW_CONTROL = Feature(
    name="flow control",  # docs/flow-control.md
    submit_keys=fp.FLOW_KEYS,
    parse=fp.parse_fields,
    record_fields=tuple(sorted(fp.FLOW_KEYS)),
    view_fields=(*sorted(fp.FLOW_KEYS), "paused"),
    view=flow.view,  # its fields, and `paused` on a queued job of a paused pipeline
    index_prefixes=fp.PREFIXES,
    gates=(
        flow.pause_gate,  # a paused pipeline parks the job
        flow.limit_gate,  # at its key's limit, the job waits
        flow.rate_gate,  # over its rate, deferred (last: it reserves a token)
    ),
    terminal_hooks=(
        flow.record_ended,  # the ended/ index that bulk retry and cancel read
        flow.release_hook,  # free the concurrency place, ring the oldest waiters
    ),
    requeue_hooks=(flow.release_hook,),  # a requeued, handed-back or rescued job's place
    sweep_passes=(  # parked and waiting jobs
        SweepPass("flow", flow.sweep_pass, indexes=(fp.PARKED_PREFIX, fp.WAITING_PREFIX)),
    ),
    indexed=flow.ended_ids,  # bulk retry: failed and cancelled jobs by day
)

WAITS = Feature(
    name="waits",  # docs/waiting.md
    record_fields=wrules.RECORD_FIELDS,
    view_fields=wrules.VIEW_FIELDS,
    view=waits.view,
    index_prefixes=(wrules.PREFIX,),
    terminal_hooks=(
        wfan.child_ended,  # a fan-out's child counts down; the last releases its parent
        wfan.parent_ended,  # a parent ended while it waited: its children are cancelled
    ),
    sweep_checks=(waits.sweep_check,),  # a parked job: before workflows' waiting check
    sweep_passes=(  # kept completions, stops
        SweepPass("waits", waits.sweep_pass, indexes=(wrules.REPAIR_ROOT,)),
    ),
    stage_tools=(("waits", wpark.tools_for),),  # ctx.sleep, waitpoint, wait, fan_out
    upload_hooks=(waits.upload,),  # an upload carrying a waitpoint token completes it
    wakes=(waits.wake_from_index,),  # a sleep's end, a waitpoint's timeout: the time index
    summary_fields=("park", "parent_job"),
)

WORKFLOWS = Feature(
    name="workflows",  # docs/workflows.md
    submit_keys=graph.SUBMIT_KEYS,
    record_fields=graph.RECORD_FIELDS,
    view_fields=(*graph.VIEW_FIELDS, "children"),
    view=workflows.view,
    index_prefixes=(graph.PREFIX,),
    terminal_hooks=(
        workflows.batch_hook,  # the last member of a batch with on_complete: the callback
        workflows.release_hook,  # release (or cancel) the children waiting on this job
    ),
    sweep_checks=(workflows.sweep_check,),  # a waiting child whose parents ended (a crash)
    sweep_passes=(  # batches held open
        SweepPass("workflows", workflows.sweep_pass, indexes=(graph.OPEN_ROOT,)),
    ),
)

TAGS = Feature(
    name="tags",  # docs/api.md, "Tags"
    submit_keys=frozenset({tags.KEY}),
    parse=tags.parse_fields,
    record_fields=(tags.KEY,),
    view_fields=(tags.KEY,),
    view=tags.view,
    index_prefixes=(tags.PREFIX,),
    create_hooks=(tags.index,),  # tags/<tag>/<id>, before the record
    filters=(ListFilter("tag", "only jobs with this tag", tags.tagged, tags.has),),
    summary_fields=(tags.KEY,),  # a batch's members, the dashboard's job page
)

RUN_JOBS = Feature(
    name="cloud run jobs",  # docs/long-stages.md
    record_fields=("execution",),  # the execution that runs the claimed attempt
    index_prefixes=(execution_places.PLACES_PREFIX,),  # a job pool's execution places
    terminal_hooks=(executions.cancel_hook,),  # a cancelled job's execution is cancelled
    sweep_checks=(executions.sweep_check,),  # its execution ended: rescued at once
)

FEATURES: tuple[Feature, ...] = (POOLS, TIME, FLOW_CONTROL, WAITS, WORKFLOWS, TAGS, RUN_JOBS)

INDEX_PREFIXES: tuple[str, ...] = tuple(p for f in FEATURES for p in f.index_prefixes)
"""What a store serves for the table (a Context hands them in; a bare store in a test
that reads the features' objects directly is handed them by hand)."""


def context(
    store: Store,
    doorbell: Ringer,
    settings: Settings,
    clock: Clock = utcnow,
    create_jobs: CreateJobs | None = None,
) -> Context:
    """The context with every feature of the table (the front door's, and the tests')."""
    return Context(store, doorbell, settings, clock, FEATURES, create_jobs)
