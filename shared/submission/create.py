"""POST /jobs: create each job of a request shared.submission.parse validated whole.

Each job is created in the
order the sweep can repair: pending marker, create-only record, batch marker
(only a record that names the batch proves membership), doorbell. A client id
is the idempotency key: a replay with the same content returns the existing job;
different content is a 409 and nothing is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from shared import records, timing, tracing
from shared.errors import (
    AlreadyExists,
    Conflict,
    CorruptRecord,
    DoorbellError,
    InvalidInput,
    InvalidRecord,
    InvalidSubmission,
    NotFound,
)
from shared.features import delayed, uniqueness, workflows
from shared.jobs import JobRecord, JobStatus, JsonObject
from shared.logs import get_logger
from shared.seams import Context, Feature, Ringer, ring_or_leave
from shared.storage import Store
from shared.submission import batch_days
from shared.submission.parse import MAX_PROBLEMS, JobSpec, Submission, names_text

log = get_logger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")

_WORKERS = 16  # calls of one request in flight (terraform/README.md, "Sizing submit")
RING_EVERY = 50
"""A batch rings the jobs written so far every this many records, so its first jobs run
while the rest are still being written (each is complete before its doorbell rings)."""


@dataclass(frozen=True)
class SubmittedJob:
    """What became of one job of a submission: created now, or found already there."""

    job_id: str
    status: JobStatus | str  # a JobStatus; "unknown" if the existing record cannot be read
    created: bool
    batch_id: str | None = None
    traceparent: str | None = None  # the job's trace (logs, doorbell); not in the answer
    duplicate_of: str | None = None  # time: the job holding its unique key
    scheduled: bool = False  # time: delayed, so its doorbell is not rung now
    pipeline: str | None = None  # its doorbell goes to this pipeline's pool; not in the answer

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.job_id,
            "status": self.status,
            "status_url": f"/jobs/{self.job_id}",
            "created": self.created,
        }
        if self.batch_id is not None:
            out["batch_id"] = self.batch_id
        if self.duplicate_of is not None:
            out["duplicate_of"] = self.duplicate_of
        return out


@dataclass(frozen=True)
class SubmitResult:
    """What a submission did: each job, in the order submitted."""

    jobs: tuple[SubmittedJob, ...]
    batch_id: str | None
    is_batch: bool

    @property
    def created(self) -> bool:
        """At least one job was created (else every one already existed)."""
        return any(job.created for job in self.jobs)

    def to_json(self) -> dict[str, Any]:
        """POST /jobs's answer: the job, or the batch and its jobs."""
        if not self.is_batch:
            body = self.jobs[0].to_json()
            if self.jobs[0].batch_id is not None:
                body["batch_url"] = f"/batches/{self.jobs[0].batch_id}"
            return body
        return {
            "batch_id": self.batch_id,
            "batch_url": f"/batches/{self.batch_id}",
            "created": sum(job.created for job in self.jobs),
            "existing": sum(not job.created for job in self.jobs),
            "jobs": [job.to_json() for job in self.jobs],
        }


# ------------------------------------------------------------------ creation


def submit(
    ctx: Context, submission: Submission, now: datetime, *, traceparent: str | None = None
) -> SubmitResult:
    """Create the jobs of a validated submission; Conflict before any write if a
    client id names a job with other content.

    Each new job is a trace of its own; the request's `traceparent` (the W3C header) is
    logged with it as submit_trace (shared.tracing)."""
    store = ctx.store
    planned = _plan(store, submission, _replay_keys(ctx.features))
    todo = [(job_id, spec) for job_id, spec, found in planned if found is None]
    _check_parents(store, submission)  # workflows: an unknown parent is a 400, nothing written
    if todo and submission.batch_id is not None:  # workflows: no member after the callback
        workflows.check_still_open(store, submission.batch_id)
    traces = {job_id: tracing.for_job().traceparent for job_id, _ in todo}
    # every record is built (and so checked and encoded) before the first write
    built = [
        (
            spec,
            _with_workflow(
                _new_record(job_id, spec, now, traces[job_id], traceparent), spec, submission
            ),
        )
        for job_id, spec in todo
    ]
    # time: unique keys first; a duplicate is answered with its holder and writes nothing
    duplicates = _take_unique_keys(store, submission, [record for _s, record in built])
    built = [(spec, rec) for spec, rec in built if str(rec["id"]) not in duplicates]
    todo = [(job_id, spec) for job_id, spec in todo if job_id not in duplicates]
    try:
        _write_workflow_markers(store, submission, todo)  # before any record (workflows)
    except Conflict:  # another on_complete for this batch: the keys taken go back
        _map(lambda r: uniqueness.give_back(store, r), [r for _s, r in built])
        raise
    _map(lambda p: _mark_batch(store, p[0], p[1]), [(i, s) for i, s, f in planned if f])
    if built and submission.batch_id is not None:  # the dashboard browses batches by day
        batch_days.note(store, submission.batch_id, now)
    created: dict[str, SubmittedJob] = dict(duplicates)
    for start in range(0, len(built), RING_EVERY):  # a big batch starts running while it
        part = built[start : start + RING_EVERY]
        chunk = _create_all(ctx, part)  # is written
        created.update((str(rec["id"]), o) for (_s, rec), o in zip(part, chunk, strict=True))
        due = [o for o in chunk if o.created and not o.scheduled and o.status != JobStatus.WAITING]
        _ring(ctx.doorbell, due, submission.is_batch)
    waiting = [o.job_id for o in created.values() if o.created and o.status == JobStatus.WAITING]
    workflows.settle_new(ctx, waiting)  # parents that ended before the child existed
    jobs = tuple(found or created[job_id] for job_id, _spec, found in planned)
    for job in jobs:
        log.info(
            "job created" if job.created else "job already existed",
            job_id=job.job_id,
            batch_id=job.batch_id,
            traceparent=job.traceparent,
            submit_trace=tracing.trace_id(traceparent),
        )
    return SubmitResult(jobs, submission.batch_id, submission.is_batch)


def create_upload_job(
    ctx: Context,
    *,
    source: dict[str, Any],
    pipeline: str,
    payload: JsonObject,
    now: datetime,
    batch_id: str | None = None,
    with_callback: bool = False,
    traceparent: str | None = None,
) -> SubmittedJob:
    """The job of one uploaded object version (`source`: bucket, name, generation), as
    its route says (shared.submission.uploads); a redelivered event finds it. Pending marker,
    create-only record, batch marker, doorbell, as for POST /jobs. Its trace is its own;
    the push's `traceparent` is logged as submit_trace."""
    job_id = records.upload_job_id(source["bucket"], source["name"], source["generation"])
    store = ctx.store
    found = find_upload_job(store, job_id)
    if found is not None:
        return found
    trace = tracing.for_job().traceparent
    record = records.new_record(
        job_id,
        pipeline,
        payload,
        now,
        source=source,
        batch_id=batch_id,
        traceparent=trace,
        submit_traceparent=traceparent,
    )
    if with_callback:
        record["batch_has_callback"] = True
    for hook in ctx.create_hooks():  # the features' indexes of the job, before its record
        hook(ctx, record)
    store.add_pending(
        job_id, pool=ctx.settings.marker_pool(record), pipeline=record.get("pipeline")
    )
    try:
        stored = store.create(record)
    except AlreadyExists:
        return SubmittedJob(job_id, _status_of(store, job_id), created=False, batch_id=batch_id)
    if batch_id is not None:
        store.add_to_batch(batch_id, job_id)
    job = SubmittedJob(
        job_id,
        stored.record["status"],
        created=True,
        batch_id=batch_id,
        traceparent=trace,
        pipeline=pipeline,
    )
    log.info(
        "job created", job_id=job_id, traceparent=trace, submit_trace=tracing.trace_id(traceparent)
    )
    _ring(ctx.doorbell, [job], batch=False)
    return job


def create_records(ctx: Context, built: Sequence[JobRecord]) -> list[tuple[str, bool]]:
    """Create jobs from records a feature built (a fan-out's children: shared.seams
    .CreateJobs), in the order POST /jobs writes them: the features' create hooks, pending
    marker, create-only record, batch marker; then one doorbell each, in groups. (id,
    created) per record, created False when a record was there already (left as it is)."""

    def one(record: JobRecord) -> SubmittedJob:
        job_id = str(record["id"])
        for hook in ctx.create_hooks():
            hook(ctx, record)
        ctx.store.add_pending(
            job_id, pool=ctx.settings.marker_pool(record), pipeline=record.get("pipeline")
        )
        try:  # fresh: a feature's own ids (a fan-out's children), which no reclaim from
            # before the hash segment wrote under its old names (storage.Store.create)
            stored = ctx.store.create(record, fresh_id=True)
        except AlreadyExists:
            return SubmittedJob(job_id, "unknown", created=False)
        batch_id = record.get("batch_id")
        if batch_id:
            ctx.store.add_to_batch(str(batch_id), job_id)
        return SubmittedJob(
            job_id,
            stored.record["status"],
            created=True,
            batch_id=batch_id,
            traceparent=record.get("traceparent"),
            pipeline=str(record.get("pipeline")),
        )

    out: list[tuple[str, bool]] = []
    records_ = list(built)
    for start in range(0, len(records_), RING_EVERY):
        made = _map(one, records_[start : start + RING_EVERY])
        _ring(ctx.doorbell, [m for m in made if m.created], batch=True)
        out += [(m.job_id, m.created) for m in made]
    return out


def find_upload_job(store: Store, job_id: str) -> SubmittedJob | None:
    """The job a redelivered notification names, if it exists (its batch marker is added
    again: a crash may have left it out)."""
    try:
        existing = store.read(job_id).record
    except NotFound:
        return None
    except CorruptRecord as exc:
        raise Conflict(f"job {job_id} exists but its record is unreadable: {exc.reason}") from None
    batch_id = existing.get("batch_id")
    if batch_id:
        store.add_to_batch(batch_id, job_id)
    return SubmittedJob(
        job_id,
        existing["status"],
        created=False,
        batch_id=batch_id,
        traceparent=existing.get("traceparent"),
    )


def _replay_keys(features: Sequence[Feature]) -> frozenset[str]:
    """The record fields the features' own parsing writes: a replay must ask for them too."""
    return frozenset(k for f in features if f.parse is not None for k in f.record_fields)


def _plan(
    store: Store, submission: Submission, keys: frozenset[str] = frozenset()
) -> list[tuple[str, JobSpec, SubmittedJob | None]]:
    """(job id, spec, existing job or None) per job; raises Conflict before any write."""
    ids = [spec.client_id or records.new_job_id() for spec in submission.jobs]
    pairs = list(zip(ids, submission.jobs, strict=True))
    found: list[SubmittedJob | str | None] = _map(
        lambda pair: _existing(store, *pair, keys) if pair[1].client_id else None, pairs
    )
    conflicts = [f for f in found if isinstance(f, str)]
    if conflicts:
        raise Conflict(conflicts[0], conflicts[:MAX_PROBLEMS])
    return [
        (job_id, spec, f if isinstance(f, SubmittedJob) else None)
        for (job_id, spec), f in zip(pairs, found, strict=True)
    ]


def _existing(
    store: Store, job_id: str, spec: JobSpec, keys: frozenset[str]
) -> SubmittedJob | str | None:
    """The existing job, None if absent, or a conflict reason."""
    try:
        stored = store.read(job_id)
    except NotFound:
        return None
    except CorruptRecord as exc:
        return f"id {job_id!r} names an existing record that is unreadable ({exc.reason})"
    return _compare(job_id, spec, stored.record, keys)


def _compare(
    job_id: str, spec: JobSpec, record: JobRecord, keys: frozenset[str] = frozenset()
) -> SubmittedJob | str:
    """A replay of an id is the same job only if it asks for everything the job was
    submitted with; else a 409 naming every field that differs (docs/api.md).

    max_attempts is not compared: an operator's retry may have raised it. A relative time
    (delay_seconds, ttl_seconds) resolves against the first submit's clock, so a replay
    that asks for one matches a job that has that time at all. `keys` are the features'
    own record fields (flow control's concurrency_key, max_running, rate).
    """
    t = spec.times
    given = dict(spec.fields)
    waits = bool(spec.depends_on)

    def when(absolute: datetime | None, relative: float | None, stored: object) -> object:
        if relative:
            return timing.read_time(stored) or "a relative time"
        return absolute

    asked: dict[str, object] = {
        "pipeline": spec.pipeline,
        "payload": spec.payload,
        "batch_id": spec.batch_id,
        "depends_on": list(spec.depends_on),  # workflows: the same parents and callback
        "on_parent_failure": ("run" if spec.on_parent_failure == "run" else "cancel")
        if waits
        else None,
        "on_complete": spec.with_callback,
        "run_at": when(t.run_at, t.delay_s, record.get("run_at")),  # time
        "expires_at": when(t.expires_at, t.ttl_s, record.get("expires_at")),
        "timeout_seconds": t.timeout_s,
        "unique_key": t.unique_key,
        **{key: given.get(key) for key in sorted(keys | given.keys())},  # features' own
    }
    theirs: dict[str, object] = {
        "pipeline": record.get("pipeline"),
        "payload": record.get("payload"),
        "batch_id": record.get("batch_id"),
        "depends_on": record.get("depends_on") or [],
        "on_parent_failure": record.get("on_parent_failure") if record.get("depends_on") else None,
        "on_complete": bool(record.get("batch_has_callback")),
        "run_at": timing.read_time(record.get("run_at")),
        "expires_at": timing.read_time(record.get("expires_at")),
        "timeout_seconds": record.get("timeout_seconds"),
        "unique_key": record.get("unique_key"),
        **{key: record.get(key) for key in sorted(keys | given.keys())},
    }
    differing = [key for key, mine in asked.items() if theirs[key] != mine]
    if differing:
        return (
            f"id {job_id!r} already names a job submitted with a different "
            f"{', '.join(differing)}; use another id or resubmit the original request"
        )
    return SubmittedJob(
        job_id,
        record["status"],
        created=False,
        batch_id=record.get("batch_id"),
        traceparent=record.get("traceparent"),
    )


def _new_record(
    job_id: str, spec: JobSpec, now: datetime, traceparent: str, request_trace: str | None
) -> JobRecord:
    """The record to create; InvalidSubmission (400) before anything is written."""
    fields, problems = timing.resolve(spec.times, now)  # time
    if problems:
        raise InvalidSubmission(f"{spec.client_id or 'job'}: {problems[0]}", problems)
    try:
        record = records.new_record(
            job_id,
            spec.pipeline,
            spec.payload,
            now,
            batch_id=spec.batch_id,
            client_id=spec.client_id,
            max_attempts=spec.max_attempts,
            traceparent=traceparent,
            submit_traceparent=request_trace,
        )
    except InvalidInput as exc:
        raise InvalidSubmission(exc.reason) from None
    merged: JobRecord = {**record, **fields, **dict(spec.fields)}  # type: ignore[typeddict-item]
    try:
        records.encode(merged)  # what could not be stored is refused before any write
    except InvalidRecord as exc:
        raise InvalidSubmission(f"{spec.client_id or 'job'}: {exc.reason}") from None
    return merged


def _create_all(ctx: Context, jobs: list[tuple[JobSpec, JobRecord]]) -> list[SubmittedJob]:
    outcomes = _map(lambda pair: _create_one(ctx, pair[0], pair[1]), jobs)
    conflicts = [o for o in outcomes if isinstance(o, str)]
    if conflicts:  # lost a race with a concurrent submit of the same id
        raise Conflict(conflicts[0], conflicts[:MAX_PROBLEMS])
    return [o for o in outcomes if isinstance(o, SubmittedJob)]


def _create_one(ctx: Context, spec: JobSpec, record: JobRecord) -> SubmittedJob | str:
    """The features' index objects (Feature.create_hooks), pending marker, create-only
    record, then the batch marker (its unique key, if any, is already taken:
    _take_unique_keys).

    The batch marker comes last: only a record that names the batch proves the
    membership, so a submit that loses a race for its id (409) writes none.
    """
    store = ctx.store
    job_id = str(record["id"])
    for hook in ctx.create_hooks():  # the features' indexes of the job, before its record
        hook(ctx, record)
    scheduled = delayed.place(store, record, record_now(record))  # else the pending marker
    if not scheduled:
        store.add_pending(
            job_id, pool=ctx.settings.marker_pool(record), pipeline=record.get("pipeline")
        )
    try:  # an id drawn here (no client id) is random: no old record name can hold it
        stored = store.create(record, fresh_id=not spec.client_id)
    except AlreadyExists:
        try:
            found = _compare(job_id, spec, store.read(job_id).record, _replay_keys(ctx.features))
        except (NotFound, CorruptRecord) as exc:
            return f"id {job_id!r} was created concurrently and cannot be read: {exc}"
        if isinstance(found, SubmittedJob):  # the same job: its marker may not be there yet
            _mark_batch(store, job_id, spec)
        return found
    _mark_batch(store, job_id, spec)
    return SubmittedJob(
        job_id,
        stored.record["status"],
        created=True,
        batch_id=spec.batch_id,
        traceparent=record.get("traceparent"),
        scheduled=scheduled,
        pipeline=str(record["pipeline"]),
    )


def record_now(record: JobRecord) -> datetime:
    """The submit's clock, as stamped on the new record (created_at)."""
    return datetime.fromisoformat(str(record["created_at"]))


# ------------------------------------------------------- workflows (shared.features.workflows)


def _check_parents(store: Store, submission: Submission) -> None:
    """Parents outside this submit must exist: InvalidSubmission lists those that do not."""
    here = {spec.client_id for spec in submission.jobs if spec.client_id is not None}
    outside = sorted({p for spec in submission.jobs for p in spec.depends_on} - here)
    found = _map(lambda p: _exists(store, p), outside)
    missing = [p for p, ok in zip(outside, found, strict=True) if not ok]
    if missing:
        raise InvalidSubmission(
            f"depends_on names unknown job(s): {names_text(missing[:MAX_PROBLEMS])}",
            [f"unknown parent {p!r}" for p in missing[:MAX_PROBLEMS]],
        )


def _exists(store: Store, job_id: str) -> bool:
    try:
        store.read(job_id)
    except NotFound:
        return False
    except CorruptRecord:
        return True  # it exists; the child waits until a person repairs it
    return True


def _take_unique_keys(
    store: Store, submission: Submission, built: list[JobRecord]
) -> dict[str, SubmittedJob]:
    """Take the unique key of each new job that has one (one create-only write each,
    shared.features.uniqueness) before any marker or record: job id -> the holder's answer, for
    each job whose key another job holds. Such a job is never created, so a member of
    this submit that depends on it would wait for ever: that is a 409 naming the holder
    (depend on it instead), and the keys this submit took are given back."""
    keyed = [record for record in built if record.get("unique_key") is not None]
    holders = _map(lambda r: uniqueness.acquire(store, r, record_now(r)), keyed)
    taken = {str(r["id"]): h for r, h in zip(keyed, holders, strict=True) if h is not None}
    needed = [
        (spec.client_id or "", parent)
        for spec in submission.jobs
        for parent in spec.depends_on
        if parent in taken and spec.client_id not in taken
    ]
    if needed:
        ours = [r for r in keyed if str(r["id"]) not in taken]
        _map(lambda r: uniqueness.give_back(store, r), ours)
        reasons = [
            f"{child or 'a job'} depends on {parent!r}, whose unique_key is held by job"
            f" {taken[parent]!r}: it will not be created; depend on {taken[parent]!r} instead"
            for child, parent in needed
        ]
        raise Conflict(reasons[0], reasons[:MAX_PROBLEMS])
    statuses = _map(lambda holder: uniqueness.holder_status(store, holder), list(taken.values()))
    return {
        job_id: SubmittedJob(holder, status, created=False, duplicate_of=holder)
        for (job_id, holder), status in zip(taken.items(), statuses, strict=True)
    }


def _with_workflow(record: JobRecord, spec: JobSpec, submission: Submission) -> JobRecord:
    """A child waits for its parents; a member of a batch with on_complete says so."""
    if spec.depends_on:
        record["status"] = JobStatus.WAITING
        record["depends_on"] = list(spec.depends_on)
        record["on_parent_failure"] = "run" if spec.on_parent_failure == "run" else "cancel"
    if spec.with_callback:
        record["batch_has_callback"] = True
    return record


def _write_workflow_markers(
    store: Store, submission: Submission, todo: list[tuple[str, JobSpec]]
) -> None:
    """The one writer of a submit's workflow markers: the seal, open markers and
    dependency edges of the jobs it will create (`todo`, after the unique checks: a
    duplicate gets none), all before the first record. Nothing to create, no seal: a
    batch of duplicates only has no members, so it has no callback."""
    with_callback = submission.on_complete is not None
    if with_callback and submission.batch_id is not None and todo:
        assert submission.on_complete is not None
        workflows.write_seal(store, submission.batch_id, submission.on_complete)
    names = [
        workflows.marker_names(spec.batch_id, with_callback, job_id, spec.depends_on)
        for job_id, spec in todo
    ]
    _map(lambda group: workflows.write_markers(store, group), [n for n in names if n])


def _mark_batch(store: Store, job_id: str, spec: JobSpec) -> None:
    """Idempotent: a replay re-adds a marker that a crash after the record left out."""
    if spec.batch_id is not None:
        store.add_to_batch(spec.batch_id, job_id)


def _ring(doorbell: Ringer, jobs: list[SubmittedJob], batch: bool) -> None:
    """A failed ring is only a warning: the record is durable and the sweep re-rings."""
    if not jobs:
        return
    if not batch:
        ring_or_leave(doorbell, jobs[0].job_id, jobs[0].traceparent, pipeline=jobs[0].pipeline)
        return
    job_ids = [job.job_id for job in jobs]
    traces = {job.job_id: job.traceparent for job in jobs if job.traceparent}
    pipelines = {job.job_id: job.pipeline for job in jobs if job.pipeline}
    try:
        failed = doorbell.ring_many(job_ids, traces, pipelines=pipelines)
    except DoorbellError as exc:  # the records already exist; the sweep rings them
        log.warning(
            "doorbell failed; the sweep will ring again", count=len(job_ids), error=exc.reason
        )
        return
    if failed:
        log.warning(
            "doorbell failed; the sweep will ring again",
            job_id=failed[0] if len(failed) == 1 else None,
            count=len(failed),
            failed=failed[:MAX_PROBLEMS],
        )


def _status_of(store: Store, job_id: str) -> JobStatus | str:
    try:
        return store.read(job_id).record["status"]
    except (NotFound, CorruptRecord):
        return "unknown"


# ------------------------------------------------------------------ helpers


def _map(fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
    """Map in a small thread pool: a batch's GCS round trips overlap."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items))) as pool:
        return list(pool.map(fn, items))
