"""The seams a feature plugs into, and the one context every operation is handed.

A feature (time, flow control, workflows) is one value, a `Feature`, naming what it adds
at each seam. The table of them lives in shared.features.table and only the front door
(shared.queue) reads it: it builds one `Context` (store, doorbell, settings, clock and the
table) and hands it down, so an operation loops over `ctx.features` and a feature reaches
the queue through the context it was given, never by import. This module imports no
feature and no operation, so both may import it.

The shape follows River's hooks given as a value in the client's config, and dramatiq's
named middleware hooks with their defaults in one list.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from shared.clock import Clock, utcnow
from shared.errors import DoorbellError
from shared.logs import get_logger

if TYPE_CHECKING:
    from shared.config import Settings
    from shared.jobs import JobRecord, JobStatus
    from shared.outcome import Outcome
    from shared.storage import Store, Stored


log = get_logger(__name__)


class Ringer(Protocol):
    """The doorbell seam, as the queue uses it: shared.doorbell.Doorbell on Pub/Sub; the
    unit tests pass a recorder."""

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        """Publish one doorbell to the pool of `pipeline`; DoorbellError if Pub/Sub did
        not accept it."""
        ...

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Publish several at once (each with its trace, if known, to its pipeline's
        pool); returns the ids whose ring failed."""
        ...


def ring_or_leave(
    doorbell: Ringer,
    job_id: str,
    traceparent: str | None = None,
    *,
    pipeline: str | None = None,
    logger: logging.LoggerAdapter[logging.Logger] | None = None,
) -> str | None:
    """Ring a job whose record and pending marker are written, or leave it to the sweep:
    a refusal is only logged, since the sweep rings every queued job whose doorbell was
    lost. Returns the refusal's message, or None when Pub/Sub accepted."""
    try:
        doorbell.ring(job_id, traceparent, pipeline=pipeline)
    except DoorbellError as exc:
        (logger or log).warning(
            "doorbell failed; the sweep will ring",
            job_id=job_id,
            error=exc.reason,
            traceparent=traceparent,
        )
        return str(exc)
    return None


Gate = Callable[["Context", "Stored", datetime], "Outcome | None"]
"""Between "claimable" and the claim, in the claim function only: None lets the claim go
on; an Outcome answers the delivery instead (the gate has parked, deferred or ended the
job). A gate may hold a due job back without burning an attempt."""

Hook = Callable[["Context", "JobRecord"], None]
"""After a write: a terminal one (idempotent and cheap, see shared.finish) or one that
sent a running job back to the queue (requeue, hand-back, rescue)."""

Parse = Callable[[Mapping[str, Any], str, list[str]], dict[str, Any]]
"""At submit, pure: check the feature's keys of one job (`where` prefixes each problem
appended to the list) and return the record fields they become."""

View = Callable[["Context", "JobRecord"], dict[str, Any]]
"""A job's view (GET /jobs/<id>, `reclaim status`): the feature's fields the record has."""


CreateHook = Callable[["Context", "JobRecord"], None]
"""At submit, for each new job, before its record is created (after its unique key is
taken, beside its pending marker): write the feature's index objects for the job, so an
index never misses a record. Idempotent: a retried submit writes them again. A marker
whose record never came is a hint the readers check against the record."""


@dataclass(frozen=True)
class ListFilter:
    """A filter of job listings the feature answers from its own index, never by reading
    every record: `reclaim list --<name> VALUE` and the listing operation's `where`.
    `ids` gives the candidate ids (InvalidInput for a bad value); `matches` lets the
    record decide, so a stale marker never shows a job that does not match."""

    name: str
    help: str
    ids: Callable[[Context, str], list[str]]
    matches: Callable[[JobRecord, str], bool]


Indexed = Callable[["Context", "tuple[JobStatus, ...]", datetime, datetime], "list[str]"]
"""Bulk selection (bulk retry and cancel): the ids of jobs in these statuses that the
feature indexes outside pending/, since a time, up to now (a hint: the record decides)."""


@dataclass(frozen=True)
class Settled:
    """What a sweep check did with one pending record: the SweepResult count it adds to
    (or None), and the record if the job still owes work afterwards."""

    count: str | None
    pending: JobRecord | None = None


SweepCheck = Callable[["Context", "Stored", datetime], Settled | None]
"""The sweep, per pending record, before the watchdog: None leaves the record to the
watchdog; a Settled means the feature took it (an expired job ended, a waiting child
settled)."""


@dataclass(frozen=True)
class SweepPass:
    """One of a feature's maintenance passes in the sweep (River keeps one maintenance
    service per file, started from one list). `run` answers counts named like
    SweepResult's fields (ints add up, booleans or); its failure is counted, never stops
    the sweep. `beside` passes run on their own thread during the pending pass (their
    listings overlap it) and see no pending ids; the others run after it and see the ids
    it examined."""

    name: str
    run: Callable[[Context, datetime, frozenset[str]], Mapping[str, int | bool]]
    beside: bool = False
    indexes: tuple[str, ...] = ()
    """The index prefixes the pass lists (shared.hints.index_board): the sweep skips a pass none
    of whose indexes the board says may hold anything (an idle run lists none of them)."""


class ParkPlan(Protocol):
    """What a stage's early end writes and what follows it (a feature's; carried by
    shared.errors.Parked, written by the runner at the stage boundary)."""

    kind: str

    def fields(self, job: JobRecord, now: datetime, max_attempts: int) -> JobRecord:
        """The fields of the park, merged into the running record (the stage's checkpoint
        is already in `job`); `max_attempts` is the deployment's default budget."""
        ...

    def after(self, ctx: Context, parked: Stored) -> bool:
        """After the park's write (its concurrency place given back): index it, and
        release it at once if what it waits for already happened. True: released."""
        ...


StageTools = Callable[["Context", "JobRecord", int, int, str], object]
"""The runner, for each stage (record, attempt, stage index, stage name): a helper the
stage reaches through its StageContext by the name the feature gives it (waits: sleep,
waitpoints, fan-out). Built when the stage starts; it does no I/O until the stage asks."""

CreateJobs = Callable[["Context", Sequence["JobRecord"]], "list[tuple[str, bool]]"]
"""Create jobs from records a feature built (a fan-out's children), in submit's write
order (the features' create hooks, pending marker, create-only record, batch marker,
doorbell): (id, created) each, False when its record was there already. The front door
hands it down in the Context (shared.submission.create.create_records), so a feature
creates jobs without importing an operation."""

Wake = Callable[["Context", "Stored", str, datetime], "str | None"]
"""The time index (shared.features.delayed) found an entry whose record is not a delayed
queued job: a feature that put it there answers "resumed" (its time came: released),
"later" (not yet), "stale" (not its entry any more: dropped), or None (not its record)."""

UploadHook = Callable[["Context", Any], "Mapping[str, Any] | None"]
"""An uploaded object (shared.submission.upload_routes.Uploaded) before its route: a
feature may take it (waits: an object that carries a waitpoint token in its metadata
completes that waitpoint); what it did, as JSON, or None to leave it to the routes."""


@dataclass(frozen=True)
class Feature:
    """Everything one feature adds, seam by seam (docs/adding-a-feature.md walks a row)."""

    name: str
    submit_keys: frozenset[str] = frozenset()
    """Keys of a job in POST /jobs the feature owns (any other key is a 400)."""
    parse: Parse | None = None
    """Validates `submit_keys` and gives the record fields (None: submission does it)."""
    record_fields: tuple[str, ...] = ()
    """Fields the feature writes into a job's record."""
    view_fields: tuple[str, ...] = ()
    """The fields its `view` may add to a job's view (the API schema lists them)."""
    view: View | None = None
    index_prefixes: tuple[str, ...] = ()
    """Top-level prefixes of the small index objects it keeps beside the records."""
    gates: tuple[Gate, ...] = ()
    terminal_hooks: tuple[Hook, ...] = ()
    requeue_hooks: tuple[Hook, ...] = ()
    sweep_checks: tuple[SweepCheck, ...] = ()
    sweep_passes: tuple[SweepPass, ...] = ()
    indexed: Indexed | None = None
    create_hooks: tuple[CreateHook, ...] = ()
    filters: tuple[ListFilter, ...] = ()
    summary_fields: tuple[str, ...] = ()
    """Record fields shown wherever a job is summarised: a batch's members (GET
    /batches/<id>) and the dashboard's job page, as stored, when the record has them."""
    stage_tools: tuple[tuple[str, StageTools], ...] = ()
    """Helpers a stage reaches by name through its StageContext (waits: "waits")."""
    upload_hooks: tuple[UploadHook, ...] = ()
    """An uploaded object, before the upload routes (the first that takes it answers)."""
    wakes: tuple[Wake, ...] = ()
    """Its entries of the time index (scheduled/): what the sweep's time pass does with one."""


@dataclass(frozen=True)
class Context:
    """What an operation or a feature may use: handed down from the front door."""

    store: Store
    doorbell: Ringer
    settings: Settings
    clock: Clock = utcnow
    features: tuple[Feature, ...] = ()
    create_jobs: CreateJobs | None = None
    """How a feature creates jobs (a fan-out's children): the front door's, else None."""

    def __post_init__(self) -> None:
        """The store serves the index prefixes of the table it is handed with (the store
        itself knows no feature: shared.storage)."""
        self.store.allow_index_prefixes(p for f in self.features for p in f.index_prefixes)

    def now(self) -> datetime:
        """The current time by the injected clock."""
        return self.clock()

    def gates(self) -> Iterator[Gate]:
        """Every feature's gates, in table order."""
        return (g for f in self.features for g in f.gates)

    def terminal_hooks(self) -> Iterator[Hook]:
        """Every feature's hooks after a terminal write, in table order."""
        return (h for f in self.features for h in f.terminal_hooks)

    def requeue_hooks(self) -> Iterator[Hook]:
        """Every feature's hooks after a requeue, hand-back or rescue, in table order."""
        return (h for f in self.features for h in f.requeue_hooks)

    def sweep_checks(self) -> Iterator[SweepCheck]:
        """Every feature's per-record sweep checks, in table order."""
        return (c for f in self.features for c in f.sweep_checks)

    def indexed(self) -> Iterator[Indexed]:
        """Every feature's index of jobs by status outside pending/, in table order."""
        return (f.indexed for f in self.features if f.indexed is not None)

    def sweep_passes(self) -> Iterator[SweepPass]:
        """Every feature's sweep passes, in table order."""
        return (p for f in self.features for p in f.sweep_passes)

    def create_hooks(self) -> Iterator[CreateHook]:
        """Every feature's hooks before a new job's record is created, in table order."""
        return (h for f in self.features for h in f.create_hooks)

    def list_filters(self) -> dict[str, ListFilter]:
        """Every feature's listing filters, by name."""
        return {flt.name: flt for f in self.features for flt in f.filters}

    def stage_tools(
        self, job: JobRecord, attempt: int, stage_index: int, stage: str
    ) -> dict[str, object]:
        """Every feature's helpers for one stage of `job`, by name."""
        return {
            name: make(self, job, attempt, stage_index, stage)
            for f in self.features
            for name, make in f.stage_tools
        }

    def wakes(self) -> Iterator[Wake]:
        """Every feature's answers to its own time-index entries, in table order."""
        return (w for f in self.features for w in f.wakes)

    def upload_hooks(self) -> Iterator[UploadHook]:
        """Every feature's hooks on an uploaded object, in table order."""
        return (h for f in self.features for h in f.upload_hooks)

    def summary_fields(self) -> tuple[str, ...]:
        """Every feature's summary fields, in table order."""
        return tuple(name for f in self.features for name in f.summary_fields)
