"""Fan-out with join: a stage creates child jobs and its job parks until the last ends.

The children of a parent's stage are one batch, ``<fanout>`` = rules.fanout_id(parent,
stage), and their ids are derived from (parent, stage, index) alone, so a rerun of the
stage after a crash finds the children it made and creates only the missing ones. Write
order, per chunk of children: each child's ``waits/open/<fanout>/<child>`` marker, then the
child through the front door's creator (shared.seams.CreateJobs: the features' create
hooks, pending marker, create-only record, batch marker, doorbell), so a child that ends
always finds its open marker. The fan-out's spec, ``waits/fanout/<fanout>.json``, is
written before the first child: a rerun that finds it lists the batch and skips the
children already there.

The last child releases the parent exactly once, as a batch's last member creates its
callback (shared.features.workflows): each child's after-terminal hook deletes its own
open marker, then lists the fan-out's open markers with limit 1; whoever finds none
releases the parent by one compare-and-swap (shared.features.waits.release), and a parent
that parks after its children all ended lists once itself and releases itself. Object
listing is strongly consistent (https://cloud.google.com/storage/docs/consistency): the
last of them to list sees every delete. Per child: one marker written, one deleted, one
one-item listing.

"fail": the first child to fail or be cancelled writes ``waits/stop/<fanout>`` (create-only:
one wins), fails the parent naming it and cancels the siblings still open (a page now, the
rest by the sweep's pass, which lists ``waits/stop/``). A parent that ends while it waits
(a person cancelled it) stops its fan-out the same way.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared import faults, finish, job_queue, records, tracing
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    IllegalTransition,
    InvalidInput,
    LostRace,
    NotFound,
    PermanentError,
    StorageError,
    UnknownPipeline,
)
from shared.features import tags as tags_feature
from shared.features.waits import release, rules
from shared.hints import index_board
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.pipelines import get_pipeline

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import BlobInfo, Stored

log = get_logger(__name__)

CHUNK = 250
"""Children written per step: their open markers, then their records (and doorbells), so
the first children run while the rest are written."""
WORKERS = 16
STOP_BUDGET_S = 20.0
"""How long a stop cancels siblings itself; the sweep's pass cancels the rest."""
PAGE_MAX = 1000


@dataclass(frozen=True)
class ChildrenPlan:
    """The park of a fan-out (shared.seams.ParkPlan)."""

    park: dict[str, Any]
    kind: str = "children"

    def fields(self, job: JobRecord, now: datetime, max_attempts: int) -> JobRecord:
        return rules.park_fields(job, now, self.park, max_attempts)

    def after(self, ctx: Context, parked: Stored) -> bool:
        """Every child may have ended before the park: look once, release if so."""
        fanout = str(self.park["fanout"])
        if ctx.store.list_blobs(rules.open_prefix(fanout), limit=1):
            return False
        return release_parent(ctx, str(parked.record["id"]), fanout, stored=parked)


def start(
    ctx: Context,
    job: JobRecord,
    stage_index: int,
    stage: str,
    children: Sequence[Mapping[str, Any]],
    on_child_failure: str,
    max_running: int | None,
) -> ChildrenPlan:
    """Create the children of this stage (those a previous run made are kept) and return
    the park. PermanentError for children the stage cannot have meant (a bad spec, an
    unknown pipeline, a payload its pipeline refuses)."""
    try:
        specs = rules.child_specs(children)
        policy, limit = rules.check_policy(on_child_failure, max_running)
        _check_pipelines(specs)
    except ValueError as exc:
        raise PermanentError(f"fan_out: {exc}") from None
    if ctx.create_jobs is None:
        raise PermanentError("fan_out: this context cannot create jobs (no front door)")
    parent = str(job["id"])
    fanout = rules.fanout_id(parent, stage_index)
    spec = {
        "parent": parent,
        "stage": stage,
        "total": len(specs),
        "on_child_failure": policy,
        # the attempt makes each run's bytes its own: a create-only write that finds the
        # same bytes counts as its own retry landing twice (shared.stores.gcs.put_blob)
        "attempt": job_queue.attempts_of(job),
    }
    existing = _existing(ctx, fanout, spec)
    built = [
        (i, _child_record(ctx, job, stage_index, stage, fanout, i, s, policy, limit))
        for i, s in enumerate(specs)
        if rules.child_id(parent, stage_index, i) not in existing
    ]
    attempt = job_queue.attempts_of(job)
    created = 0
    for start_at in range(0, len(built), CHUNK):
        created += _create_chunk(ctx, [rec for _i, rec in built[start_at : start_at + CHUNK]])
        faults.kill_if(f"fan-out.{attempt}", parent)  # test-only: a parent killed mid-way
    log.info(
        "fan-out: children created",
        job_id=parent,
        fanout=fanout,
        total=len(specs),
        created=created,
        kept=len(specs) - created,
    )
    park = {
        **rules.base_park("children", stage, stage_index + 1, ctx.now()),
        "fanout": fanout,
        "total": len(specs),
        "on_child_failure": policy,
        "max_running": limit,
    }
    return ChildrenPlan(park)


def _check_pipelines(specs: Sequence[rules.ChildSpec]) -> None:
    for name in sorted({s.pipeline for s in specs}):
        try:
            get_pipeline(name)
        except UnknownPipeline:
            raise ValueError(f"unknown pipeline {name!r}") from None
    for i, s in enumerate(specs):
        try:
            get_pipeline(s.pipeline).check_payload(s.payload)
        except (ValueError, TypeError, LookupError) as exc:
            raise ValueError(f"children[{i}]: {s.pipeline} refuses its payload: {exc}") from None
        problems: list[str] = []
        tags_feature.parse_fields({"tags": list(s.tags)}, f"children[{i}].", problems)
        if problems:
            raise ValueError(problems[0])


def _existing(ctx: Context, fanout: str, spec: Mapping[str, Any]) -> set[str]:
    """The children a previous run of the stage made (none on a first run): the spec is
    written create-only first; finding it means a rerun, so the batch is listed."""
    body = json.dumps(dict(spec), sort_keys=True).encode()
    try:
        ctx.store.put_blob(rules.fanout_spec_name(fanout), body, generation=0)
        return set()
    except AlreadyExists:
        pass
    found: set[str] = set()
    start_at: str | None = None
    while True:
        page = ctx.store.list_batch(fanout, limit=PAGE_MAX + 1, start_at=start_at)
        ids, start_at = rules.page_of(page, PAGE_MAX)
        found.update(ids)
        if start_at is None:
            return found


def _child_record(
    ctx: Context,
    parent: JobRecord,
    stage_index: int,
    stage: str,
    fanout: str,
    index: int,
    spec: rules.ChildSpec,
    policy: str,
    max_running: int | None,
) -> JobRecord:
    parent_id = str(parent["id"])
    trace = tracing.parse(parent.get("traceparent"))
    record = records.new_record(
        rules.child_id(parent_id, stage_index, index),
        spec.pipeline,
        spec.payload,
        ctx.now(),
        batch_id=fanout,
        max_attempts=spec.max_attempts,
        traceparent=(trace.child() if trace else tracing.for_job()).traceparent,
    )
    record["parent_job"] = {
        "id": parent_id,
        "stage": stage,
        "fanout": fanout,
        "index": index,
        "on_child_failure": policy,
    }
    labels = rules.merged_tags(tags_feature.of(parent), spec.tags, tags_feature.MAX_TAGS)
    if labels:
        record["tags"] = labels  # type: ignore[typeddict-unknown-key]
    if spec.timeout_seconds is not None:
        record["timeout_seconds"] = float(spec.timeout_seconds)
    if max_running is not None:
        record["concurrency_key"] = rules.concurrency_key(fanout)
        record["max_running"] = max_running
    return record


def _create_chunk(ctx: Context, chunk: list[JobRecord]) -> int:
    """Open markers first, then the children; a child a lost run made already (its record
    there, not in the batch listing yet) is settled again if it ended meanwhile. Returns
    how many were created now."""
    assert ctx.create_jobs is not None
    names = [rules.open_name(str(r["batch_id"]), str(r["id"])) for r in chunk]
    _map(lambda name: _put_marker(ctx, name), names)
    made = ctx.create_jobs(ctx, chunk)
    for job_id, created in made:
        if not created:
            _settle_existing(ctx, job_id)
    return sum(created for _id, created in made)


def _put_marker(ctx: Context, name: str) -> None:
    with contextlib.suppress(AlreadyExists):  # a rerun's: there already
        ctx.store.put_blob(name, b"", generation=0)


def _settle_existing(ctx: Context, job_id: str) -> None:
    """A child found already there: if it ended, run what follows its end again (the open
    marker just rewritten goes, and the pending marker the creator added)."""
    try:
        record = ctx.store.read(job_id).record
    except (NotFound, CorruptRecord):
        return
    if job_queue.is_terminal(record):
        finish.after_terminal(ctx, record)


# ------------------------------------------------------------------ a child's end


def child_ended(ctx: Context, record: JobRecord) -> None:
    """After-terminal hook of every job: a fan-out's child counts down (nothing for other
    jobs); the last releases its parent. Under "fail", a failed or cancelled child first
    stops the fan-out (unless the stop is what cancelled it)."""
    link = record.get("parent_job")
    if not isinstance(link, dict):
        return
    fanout, parent, child = str(link.get("fanout")), str(link.get("id")), str(record["id"])
    status = record.get("status")
    if (
        status in (JobStatus.FAILED, JobStatus.CANCELLED)
        and link.get("on_child_failure") == "fail"
        and not record.get("stopped_by")
    ):
        error = record.get("error")
        why = error.get("message") if isinstance(error, dict) else None
        stop(ctx, fanout, parent, f"child {child} {status}" + (f": {why}" if why else ""), child)
    ctx.store.delete_blob(rules.open_name(fanout, child))
    if ctx.store.list_blobs(rules.open_prefix(fanout), limit=1):
        return
    release_parent(ctx, parent, fanout)


def release_parent(ctx: Context, parent: str, fanout: str, *, stored: Stored | None = None) -> bool:
    """Release a parent parked on this fan-out (exactly once: one CAS); a fan-out stopped
    before its parent parked fails the parent instead."""
    try:
        why = json.loads(ctx.store.read_blob(rules.stop_name(fanout)).data).get("why")
    except NotFound:
        why = None
    except ValueError:
        why = "stopped"
    if why is not None:
        _fail_parent(ctx, parent, fanout, str(why))
        return False
    ended = rules.outcome("completed", ctx.now())
    written = release.release(
        ctx, parent, lambda j: rules.parked_on(j, "children", fanout), ended, stored=stored
    )
    return written is not None


def parent_ended(ctx: Context, record: JobRecord) -> None:
    """After-terminal hook: a parent that ended while parked on its children (a person
    cancelled it) stops its fan-out: the children still open are cancelled."""
    park = record.get("park")
    if (
        isinstance(park, dict)
        and park.get("kind") == "children"
        and job_queue.is_terminal(record)
        and park.get("fanout")
    ):
        stop(ctx, str(park["fanout"]), str(record["id"]), f"parent {record['id']} ended", None)


# ------------------------------------------------------------------ stopping a fan-out


def stop(ctx: Context, fanout: str, parent: str, why: str, child: str | None) -> None:
    """Stop a fan-out once (create-only stop marker): fail its parent naming `why`, then
    cancel its children still open, for STOP_BUDGET_S (the sweep's pass does the rest)."""
    body = json.dumps({"why": why[:500], "child": child, "at": ctx.now().isoformat()}).encode()
    index_board.note(ctx.store, rules.REPAIR_ROOT)  # the sweep's pass finishes the cancels
    try:
        ctx.store.put_blob(rules.stop_name(fanout), body, generation=0)
    except AlreadyExists:
        return  # stopped already: the first failure is the one named
    log.warning("fan-out stopped", job_id=parent, fanout=fanout, why=why)
    _fail_parent(ctx, parent, fanout, why)
    cancel_open(ctx, fanout, child, budget_s=STOP_BUDGET_S)


def _fail_parent(ctx: Context, parent: str, fanout: str, why: str) -> None:
    for _ in range(release.CAS_TRIES):
        try:
            stored = ctx.store.read(parent)
        except (NotFound, CorruptRecord):
            return
        job = stored.record
        if not rules.parked_on(job, "children", fanout):
            return  # ended already, or not parked yet: it fails when it parks (stopped)
        now = ctx.now()
        ended = rules.outcome("failed", now)
        fields = rules.fail_parked_fields(
            job, now, error_type="ChildFailed", message=why, ended=ended
        )
        try:
            written = ctx.store.update({**job, **fields}, stored.generation)
        except LostRace:
            continue
        log.error("failed: a child of its fan-out failed", job_id=parent, why=why)
        finish.after_terminal(ctx, written.record)
        return


def cancel_open(ctx: Context, fanout: str, spare: str | None, *, budget_s: float) -> int:
    """Cancel the children of a stopped fan-out that have not ended (their open markers),
    page by page until none is left or the budget is spent; how many were cancelled."""
    started = time.monotonic()
    cancelled = 0
    while time.monotonic() - started < budget_s:
        page = ctx.store.list_blobs(rules.open_prefix(fanout), limit=PAGE_MAX)
        ids = [rules.last_segment(b.name) for b in page]
        todo = [i for i in ids if i != spare]
        if not todo:
            return cancelled
        now_cancelled = sum(_map(lambda i: _cancel_child(ctx, i, spare), todo))
        cancelled += now_cancelled
        if now_cancelled == 0:  # all ended already: their own hooks drop the markers
            return cancelled
    return cancelled


def _cancel_child(ctx: Context, job_id: str, cause: str | None) -> int:
    for _ in range(release.CAS_TRIES):
        try:
            stored = ctx.store.read(job_id)
        except NotFound:
            return 0
        except CorruptRecord:
            return 0
        job = stored.record
        if job_queue.is_terminal(job):
            finish.after_terminal(ctx, job)  # its end's hooks, should a crash have cut them
            return 0
        try:
            fields = job_queue.cancel_fields(job, ctx.now(), by="fan-out", reason="fan-out stopped")
        except IllegalTransition:
            return 0
        new: JobRecord = {**job, **fields, "stopped_by": cause or "parent"}  # type: ignore[typeddict-unknown-key]
        try:
            written = ctx.store.update(new, stored.generation)
        except LostRace:
            continue
        finish.after_terminal(ctx, written.record)
        return 1
    return 0


# ------------------------------------------------------------------ the join stage


def children_page(
    ctx: Context, record: Mapping[str, Any], page_token: str | None, page_size: int
) -> dict[str, Any]:
    """One page of the children of the fan-out that ended the previous stage (the join
    stage's read): each child's id, index, pipeline, status, result, outputs and error."""
    waited = record.get("waited")
    if not isinstance(waited, dict) or waited.get("kind") != "children":
        raise PermanentError("ctx.children(): the previous stage did not fan out")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= PAGE_MAX
    ):
        raise ValueError(f"page_size must be 1..{PAGE_MAX}")
    if page_token is not None:
        records.validate_job_id(page_token, "page_token")
    fanout = str(waited["fanout"])
    ids, nxt = rules.page_of(
        ctx.store.list_batch(fanout, limit=page_size + 1, start_at=page_token), page_size
    )
    return {
        "children": _map(lambda i: _child_view(ctx, i), ids),
        "next_page_token": nxt,
        "total": waited.get("total"),
        "fanout": fanout,
    }


def _child_view(ctx: Context, job_id: str) -> dict[str, Any]:
    try:
        rec = ctx.store.read(job_id).record
    except (NotFound, CorruptRecord, InvalidInput):
        return {"id": job_id, "status": None}
    link = rec.get("parent_job")
    return {
        "id": job_id,
        "index": link.get("index") if isinstance(link, dict) else None,
        "pipeline": rec.get("pipeline"),
        "status": rec.get("status"),
        "result": rec.get("result"),
        "outputs": rec.get("outputs") or [],
        "error": rec.get("error"),
    }


def remaining(ctx: Context, fanout: str, cap: int = PAGE_MAX) -> int | None:
    """How many children have not ended (up to `cap`; None when the listing fails)."""
    try:
        return len(ctx.store.list_blobs(rules.open_prefix(fanout), limit=cap))
    except StorageError:
        return None


def sweep_stop(ctx: Context, info: BlobInfo) -> int:
    """The sweep, for one stop marker: a page of the children still open cancelled, or,
    none left, the marker goes. Returns the children cancelled."""
    fanout = rules.last_segment(info.name)
    try:
        data = json.loads(ctx.store.read_blob(info.name).data)
    except (NotFound, ValueError):
        return 0
    if not ctx.store.list_blobs(rules.open_prefix(fanout), limit=1):
        ctx.store.delete_blob(info.name)
        return 0
    return cancel_open(ctx, fanout, data.get("child"), budget_s=STOP_BUDGET_S / 2)


def _map(fn: Any, items: Iterable[Any]) -> list[Any]:
    todo = list(items)
    if len(todo) <= 1:
        return [fn(i) for i in todo]
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(todo))) as pool:
        return list(pool.map(fn, todo))
