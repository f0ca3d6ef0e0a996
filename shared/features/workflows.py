"""Batch completion callbacks and job dependencies, on the records bucket's index objects.

Layout and pure rules: shared.workflow_graph. Why it is crash-proof and exactly-once:

- Callbacks. Submit writes the seal (the on_complete spec) and one ``open`` marker per
  member BEFORE any member record exists. A member's after-terminal hook (shared.finish:
  run before its pending marker goes, repeated by the sweep after a crash) deletes its own
  open marker, then lists the batch's open markers with limit 1. Whoever sees none left
  creates the callback job under a deterministic id, create-only: racing finishers and
  repeated hooks find it already there (AlreadyExists), so there is one callback. The
  last finisher cannot miss it: each deletes before it lists, and object listing is
  strongly consistent (https://cloud.google.com/storage/docs/consistency), so whoever
  lists last sees every delete. Each member costs one delete and one one-item list,
  never a read of the batch.
- Dependencies. Submit writes, for each parent of a new child, a ``parents/<parent>``
  mark, a reverse edge ``children/<parent>/<child>`` and a ``waiting/<child>/<parent>``
  marker before the child's record (created ``waiting``, with its pending marker so the
  sweep sees it). A parent's hook reads its mark (a class B read; most jobs have no
  children and stop there) and only then lists its children: a failed parent cancels a
  "cancel" child at once; otherwise it deletes the child's waiting marker for itself
  and lists what is left with limit 1; none left: the parents are read once, the child
  is released (CAS to queued) and rung, so it starts within seconds. A child created
  after its parents ended is settled by submit itself; anything a crash leaves (and an
  edge an older submit wrote without the mark) is settled by the sweep.

Deletes here are unconditional (fake-gcs-server ignores delete preconditions anyway): a
marker deleted twice is harmless, and nothing is ever deleted that is still needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared import finish, job_queue, records, tracing
from shared.errors import (
    AlreadyExists,
    Conflict,
    CorruptRecord,
    LostRace,
    NotFound,
    ReclaimError,
    StorageError,
)
from shared.features import workflow_graph as graph
from shared.features.waits import rules as waits_rules
from shared.hints import index_board
from shared.jobs import JobRecord, JobStatus, JsonObject
from shared.logs import get_logger
from shared.pipelines.base import Reads
from shared.seams import Settled, ring_or_leave
from shared.storage import job_object

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store, Stored

log = get_logger(__name__)

_CAS_TRIES = 5


# ------------------------------------------------------------------ submit


def write_seal(store: Store, batch_id: str, spec: Mapping[str, Any]) -> None:
    """The batch's on_complete, create-only; the same spec again is a replay, another is 409."""
    data = json.dumps(dict(spec), sort_keys=True, separators=(",", ":")).encode()
    try:
        store.put_blob(graph.seal_name(batch_id), data, generation=0)
    except AlreadyExists:
        raise Conflict(
            f"batch {batch_id!r} already has another on_complete; use another batch_id"
        ) from None


def check_still_open(store: Store, batch_id: str) -> None:
    """A batch whose callback has been created is closed: new members are a 409 (the
    callback fired exactly once, for the members it had; none would cover new ones).
    A replay of the batch's own jobs creates nothing and is not refused."""
    job_id = graph.callback_id(batch_id)
    try:
        store.read(job_id)
    except NotFound:
        return
    except CorruptRecord:
        pass  # it exists
    raise Conflict(
        f"batch {batch_id!r} is complete and its on_complete callback ({job_id}) has been"
        " created; submit new jobs under another batch_id"
    )


def write_markers(store: Store, names: Iterable[str]) -> None:
    """Empty create-only markers (a replay finds the same empty bytes: success). An open
    marker's index is noted on the board first (shared.hints.index_board: the sweep's repair of
    batches held open lists it only then)."""
    names = list(names)
    if any(n.startswith(graph.OPEN_ROOT) for n in names):
        index_board.note(store, graph.OPEN_ROOT)
    for name in names:
        store.put_blob(name, b"", generation=0)


def marker_names(
    batch_id: str | None, with_callback: bool, job_id: str, parents: Iterable[str]
) -> list[str]:
    """The markers a new job needs before its record is written."""
    names = [graph.open_name(batch_id, job_id)] if with_callback and batch_id else []
    for parent in parents:  # the mark first: a parent that sees no mark has no child yet
        names += [
            graph.parent_mark_name(parent),
            graph.child_name(parent, job_id),
            graph.waiting_name(job_id, parent),
        ]
    return names


def settle_new(ctx: Context, job_ids: Iterable[str]) -> None:
    """After submit created waiting children: release those whose parents already ended
    (a parent that ended before the child's record existed could not release it)."""
    for job_id in job_ids:
        try:
            settle(ctx, ctx.store.read(job_id))
        except (StorageError, CorruptRecord) as exc:  # the sweep settles it
            log.warning("could not settle a new child", job_id=job_id, error=str(exc))


# ------------------------------------------------------------------ after-terminal hooks


def batch_hook(ctx: Context, record: JobRecord) -> None:
    """A member of a batch with on_complete ended: the last one creates the callback."""
    batch_id = record.get("batch_id")
    if not batch_id or not record.get("batch_has_callback"):
        return  # no I/O for every other job
    ctx.store.delete_blob(graph.open_name(batch_id, str(record["id"])))
    if ctx.store.list_blobs(graph.open_prefix(batch_id), limit=1):
        return
    create_callback(ctx, batch_id)


def release_hook(ctx: Context, record: JobRecord) -> None:
    """A job ended: settle each child waiting on it (one read when it has none)."""
    parent = str(record["id"])
    status = str(record.get("status"))
    for child in children_of(ctx.store, parent):
        try:
            stored = ctx.store.read(child)
        except NotFound:  # submit in flight: it settles the child once the record exists
            continue
        except CorruptRecord as exc:
            log.error("child record unreadable; left for a person", job_id=child, reason=exc.reason)
            continue
        _parent_ended(ctx, stored, parent, status)


def _parent_ended(ctx: Context, stored: Stored, parent: str, status: str) -> None:
    child = stored.record
    if child.get("status") != JobStatus.WAITING or waits_rules.is_parked(child):
        return  # released already (a parked job waits for its own stage's wait)
    if status in ("failed", "cancelled") and child.get("on_parent_failure") != "run":
        _apply(ctx, stored, "cancel", {"parent": parent, "status": status})
        return
    ctx.store.delete_blob(graph.waiting_name(str(child["id"]), parent))
    if ctx.store.list_blobs(graph.waiting_prefix(str(child["id"])), limit=1):
        return
    settle(ctx, stored)


# ------------------------------------------------------------------ settling a child


def settle(ctx: Context, stored: Stored) -> JobRecord:
    """Drop the waiting markers of parents that ended; once none is left (or a parent
    failed under "cancel"), read the parents and release or cancel the child. Idempotent:
    the sweep and submit call it on any waiting child. Returns the record afterwards."""
    child = stored.record
    if child.get("status") != JobStatus.WAITING or waits_rules.is_parked(child):
        return child  # a parked job is the waits feature's (shared.features.waits)
    child_id = str(child["id"])
    policy = str(child.get("on_parent_failure") or graph.DEFAULT_PARENT_FAILURE)
    listed = [
        graph.last_segment(b.name) for b in ctx.store.list_blobs(graph.waiting_prefix(child_id))
    ]
    statuses = _statuses(ctx.store, listed)
    for parent, status in statuses.items():
        if status in job_queue.TERMINAL_STATUSES:
            ctx.store.delete_blob(graph.waiting_name(child_id, parent))
    verdict, _ = graph.parent_verdict(statuses, policy)
    if verdict == "wait":
        return child
    all_parents = _statuses(ctx.store, _parents_of(child))
    verdict, failed = graph.parent_verdict(all_parents, policy)
    if verdict == "wait":  # a parent was retried and runs again: its hook settles later
        return child
    return _apply(ctx, stored, verdict, failed)


def _apply(
    ctx: Context,
    stored: Stored,
    verdict: str,
    failed: dict[str, str] | None,
) -> JobRecord:
    """The CAS that releases or cancels a waiting child (re-read on a lost race)."""
    for _ in range(_CAS_TRIES):
        job = stored.record
        if job.get("status") != JobStatus.WAITING or waits_rules.is_parked(job):
            return job
        now = datetime.now(UTC)
        if verdict == "cancel":
            assert failed is not None
            fields = job_queue.cancel_fields(
                job,
                now,
                by=graph.CALLBACK_BY,
                reason=f"parent {failed['parent']} {failed['status']}",
            )
            fields["parent_failure"] = {"parent": failed["parent"], "status": failed["status"]}
        else:
            fields = job_queue.release_fields(job, now, parent_failure=failed)
        try:
            written = ctx.store.update({**job, **fields}, stored.generation)
        except LostRace:
            stored = ctx.store.read(str(job["id"]))
            continue
        if verdict == "cancel":
            log.info("cancelled: a parent ended badly", job_id=job.get("id"), parent=failed)
            finish.after_terminal(ctx, written.record)
        else:
            log.info("released: every parent ended", job_id=job.get("id"))
            child = written.record
            ring_or_leave(
                ctx.doorbell,
                str(child["id"]),
                child.get("traceparent"),
                pipeline=child.get("pipeline"),
            )
        return written.record
    raise LostRace(f"job {stored.record.get('id')}: kept losing the release race")


def _parents_of(record: Mapping[str, Any]) -> list[str]:
    found = record.get("depends_on")
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def _statuses(store: Store, job_ids: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for job_id in job_ids:
        try:
            out[job_id] = str(store.read(job_id).record.get("status"))
        except (NotFound, CorruptRecord):
            out[job_id] = None  # never terminal: the child keeps waiting for a person
    return out


# ------------------------------------------------------------------ callbacks


def create_callback(ctx: Context, batch_id: str) -> str | None:
    """Create the batch's callback job (create-only, deterministic id); its id, or None
    when the batch has no seal."""
    try:
        spec = json.loads(ctx.store.read_blob(graph.seal_name(batch_id)).data)
    except NotFound:
        log.error("batch has open markers but no seal; left for a person", batch_id=batch_id)
        return None
    job_id = graph.callback_id(batch_id)
    record = records.new_record(
        job_id,
        str(spec["pipeline"]),
        dict(spec.get("payload") or {}),
        datetime.now(UTC),
        traceparent=tracing.for_job().traceparent,
    )
    record["callback_of"] = batch_id
    ctx.store.add_pending(
        job_id, pool=ctx.settings.marker_pool(record), pipeline=record.get("pipeline")
    )
    try:
        ctx.store.create(record)
    except AlreadyExists:
        return job_id  # created by a racing finisher or an earlier run of this hook
    log.info("batch complete: callback created", batch_id=batch_id, job_id=job_id)
    ring_or_leave(ctx.doorbell, job_id, record.get("traceparent"), pipeline=record["pipeline"])
    return job_id


def sweep_open(
    ctx: Context,
    pending: set[str],
    now: datetime,
    *,
    grace_s: float,
    limit: int,
) -> int:
    """The sweep's repair of complete batches left without their callback: an open marker
    whose member is not pending (terminal with its marker already gone, or never
    created) holds its batch open for ever. A terminal member's batch hook is run again;
    a marker without a record older than `grace_s` (a submit that died before writing
    it) is dropped and its batch checked. Pending members (the sweep's own listing) are
    skipped without a read, so the cost is one listing plus a read per stray. Returns
    the number of markers repaired."""
    repaired = 0
    for info in index_board.sweep_list(ctx.store, graph.OPEN_ROOT, limit):  # none noted: none
        parsed = graph.parse_open_name(info.name)
        if parsed is None or parsed[1] in pending or parsed[1] == graph.HOLD_ID:
            continue  # an upload batch's hold: only its closing object removes it
        batch_id, job_id = parsed
        try:
            record = ctx.store.read(job_id).record
        except NotFound:
            created = info.created
            if created is None or (now - created).total_seconds() <= grace_s:
                continue  # a submit may be writing it right now
            ctx.store.delete_blob(info.name)
            if not ctx.store.list_blobs(graph.open_prefix(batch_id), limit=1):
                create_callback(ctx, batch_id)
            repaired += 1
            continue
        except CorruptRecord:
            continue
        if job_queue.is_terminal(record) and record.get("batch_id") == batch_id:
            batch_hook(ctx, record)
            repaired += 1
    return repaired


def reopen_for_retry(store: Store, record: JobRecord) -> None:
    """An operator retries a member: if the callback has not been created yet, the batch
    is open again until this member ends again. Once it exists, the callback has fired
    (exactly once) and the retried member's end changes nothing."""
    batch_id = record.get("batch_id")
    if not batch_id or not record.get("batch_has_callback"):
        return
    write_markers(store, [graph.open_name(batch_id, str(record["id"]))])
    try:
        store.read(graph.callback_id(batch_id))
    except NotFound:
        return
    except CorruptRecord:
        pass
    store.delete_blob(graph.open_name(batch_id, str(record["id"])))


# ------------------------------------------------------------------ the sweep


def sweep_check(ctx: Context, stored: Stored, _now: datetime) -> Settled | None:
    """A waiting child whose parents ended without releasing it (a crash): settle it."""
    if stored.record.get("status") != JobStatus.WAITING:
        return None
    return Settled(None, settle(ctx, stored))


def sweep_pass(ctx: Context, now: datetime, pending: frozenset[str]) -> dict[str, int]:
    """Batches whose callback a stray open marker holds back (sweep_open); a failure is
    only logged, and the next run tries again."""
    s = ctx.settings
    try:
        repaired = sweep_open(
            ctx, set(pending), now, grace_s=s.orphan_marker_grace_seconds, limit=s.sweep_max_jobs
        )
    except ReclaimError as exc:
        log.warning("workflow repair failed", error=f"{type(exc).__name__}: {exc}")
        return {}
    return {"repaired": repaired}


# ------------------------------------------------------------------ views and context


def view(ctx: Context, record: Mapping[str, Any]) -> dict[str, Any]:
    """A job's view: parents, children and what a parent's failure did, when it has them."""
    out: dict[str, Any] = {k: record.get(k) for k in graph.VIEW_FIELDS if record.get(k) is not None}
    children = children_of(ctx.store, str(record.get("id")))
    if children:
        out["children"] = children
    return out


def batch_on_complete(store: Store, batch_id: str) -> dict[str, Any] | None:
    """GET /batches/<id>'s on_complete: the spec's pipeline and the callback's id and
    status (both null until it exists); None when the batch has none."""
    try:
        spec = json.loads(store.read_blob(graph.seal_name(batch_id)).data)
    except NotFound:
        return None
    job_id = graph.callback_id(batch_id)
    try:
        status: str | None = str(store.read(job_id).record.get("status"))
    except NotFound:
        return {"pipeline": spec.get("pipeline"), "id": None, "status": None}
    except CorruptRecord:
        status = "unreadable"
    return {"pipeline": spec.get("pipeline"), "id": job_id, "status": status}


def reads_for(store: Store, record: Mapping[str, Any]) -> Reads:
    """What a stage of this job may read (StageContext): its parents' results, its
    batch's members when it is a callback, the parent failure it runs despite."""
    batch_id = record.get("callback_of")
    failure = record.get("parent_failure")
    return Reads(
        parents=lambda: parent_results(store, record),
        batch_members=lambda: batch_members(store, str(batch_id)) if batch_id else [],
        parent_failure=failure if isinstance(failure, Mapping) else None,
    )


def children_of(store: Store, job_id: str) -> list[str]:
    """Jobs that named this one in depends_on (from the reverse edges), listed only when
    its parent mark says it has any: a read (class B) instead of a list (class A) for the
    jobs that have none. An edge an older submit wrote without the mark is missed here;
    the sweep settles its child (sweep_check)."""
    try:
        store.read_blob(graph.parent_mark_name(job_id))
    except NotFound:
        return []
    return [graph.last_segment(b.name) for b in store.list_blobs(graph.children_prefix(job_id))]


def parent_results(store: Store, record: Mapping[str, Any]) -> dict[str, JsonObject]:
    """Each parent's id -> status, result and outputs, for the stages (StageContext)."""
    out: dict[str, JsonObject] = {}
    for parent in _parents_of(record):
        try:
            rec = store.read(parent).record
        except (NotFound, CorruptRecord):
            out[parent] = {"status": None, "result": None, "outputs": []}
            continue
        out[parent] = {
            "status": rec.get("status"),
            "result": rec.get("result"),
            "outputs": rec.get("outputs") or [],
        }
    return out


def batch_members(store: Store, batch_id: str) -> list[JsonObject]:
    """The callback's view of its batch: each member's id, status and result reference
    (the record name, whose result and outputs a stage may read), read when it runs."""
    out: list[JsonObject] = []
    for job_id in store.list_batch(batch_id):
        try:
            status: str | None = str(store.read(job_id).record.get("status"))
        except (NotFound, CorruptRecord):
            status = None
        out.append({"id": job_id, "status": status, "result_ref": job_object(job_id)})
    return out
