"""A job pool's bound on its running Cloud Run job executions (docs/long-stages.md).

A job pool runs at most `job.max_executions` executions at once (the pools file; a
project has 1,000 per region: https://cloud.google.com/run/quotas). Before its :run, the
claim (shared.claim.dispatch) takes one of the pool's N place objects, executions/<pool>/
<k>, as flow control takes a key's places (create-only or compare-and-swap writes, no
counter object: one object takes about one write a second,
https://cloud.google.com/storage/quotas); the execution's task frees it when it ends
(RECLAIM_TASK_PLACE names it) and rings its pool's oldest jobs due. A place whose holder's
record no longer runs that attempt (a task killed, a job rescued) is free by that rule,
so nothing leaks. A claim that finds no place hands the job back, due after a backoff, at
no cost: the excess waits queued, never failed.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from shared import job_queue
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidInput,
    LostRace,
    NotFound,
    ReclaimError,
)
from shared.jobs import JobStatus
from shared.logs import get_logger
from shared.seams import ring_or_leave

if TYPE_CHECKING:
    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import Store

log = get_logger(__name__)

PLACES_PREFIX = "executions/"
HOLDERS_READ = 8
"""Holders one take checks at most when every place is written (a record read each): a
full pool answers "no place" after that many, and the job waits its backoff."""


@dataclass(frozen=True)
class Place:
    """One of a pool's execution places, as its taker wrote it (the generation fences the
    release: a place someone took over since is left alone)."""

    name: str
    generation: int

    def token(self) -> str:
        return f"{self.name}@{self.generation}"

    @classmethod
    def of_token(cls, token: str) -> Place | None:
        name, _, generation = token.rpartition("@")
        if not name.startswith(PLACES_PREFIX) or not generation.isdigit():
            return None
        return cls(name, int(generation))


def place_name(pool: str, k: int) -> str:
    return f"{PLACES_PREFIX}{pool}/{k:04d}"


def take_place(ctx: Context, pool: str, bound: int, job: JobRecord, now: datetime) -> Place | None:
    """A free place of the pool's `bound` for this claimed attempt, or None when all are
    held (see the module doc). A place is never deleted, only emptied."""
    store = ctx.store
    job_id = str(job.get("id"))
    me = json.dumps(
        {"job": job_id, "attempt": job_queue.attempts_of(job), "at": now.isoformat()}
    ).encode()
    present = {b.name for b in store.list_blobs(f"{PLACES_PREFIX}{pool}/")}
    shift = zlib.crc32(job_id.encode()) % bound  # spread first choices over the places
    order = [place_name(pool, (shift + i) % bound) for i in range(bound)]
    for name in order:
        if name not in present and (taken := _put(store, name, me, 0)) is not None:
            return taken
    checked = 0
    for name in order:
        if name not in present:
            continue
        try:
            blob = store.read_blob(name)
        except NotFound:
            if (taken := _put(store, name, me, 0)) is not None:
                return taken
            continue
        if blob.data:
            if checked >= HOLDERS_READ:
                continue
            checked += 1
            if _holds(store, blob.data):
                continue
        if (taken := _put(store, name, me, blob.generation)) is not None:
            return taken
    return None


def release_place(store: Store, token: str | None) -> None:
    """Empty the place `token` names (a compare-and-swap on the generation it was taken
    at: a place taken over since is left alone); nothing for no token."""
    place = Place.of_token(token) if token else None
    if place is None:
        return
    try:
        store.put_blob(place.name, b"", generation=place.generation)
    except (LostRace, NotFound):
        pass  # taken over by another claim since: not ours to free
    except ReclaimError as exc:  # the holder rule frees it once this attempt ends
        log.warning("could not free the execution place", place=place.name, error=str(exc))


WAKE = 2
"""Due jobs of its pool a task rings when it frees its place (the oldest due first; a
second covers one that is gone or taken)."""
WAKE_LISTING = 200


def wake(ctx: Context, token: str) -> int:
    """After a task freed its place: ring the oldest jobs of its pool marked due by now
    (a job held back at the bound is marked due when its backoff ends), so a place freed
    is taken without waiting for a push or the sweep. How many were rung."""
    place = Place.of_token(token)
    if place is None:
        return 0
    pool = place.name[len(PLACES_PREFIX) :].split("/", 1)[0]
    now = ctx.now()
    try:
        entries = ctx.store.list_pending(limit=WAKE_LISTING, pool=pool)
    except ReclaimError as exc:  # the drains and the sweep start them all the same
        log.warning("could not list the pool's due jobs", pool=pool, error=str(exc))
        return 0
    due = sorted(
        (e.due, e.job_id, e.pipeline) for e in entries if e.due is not None and e.due <= now
    )
    for _due, job_id, pipeline in due[:WAKE]:
        ring_or_leave(ctx.doorbell, job_id, pipeline=pipeline)
    return len(due[:WAKE])


def _put(store: Store, name: str, data: bytes, generation: int) -> Place | None:
    try:
        return Place(name, store.put_blob(name, data, generation=generation))
    except (AlreadyExists, LostRace, NotFound):
        return None


def _holds(store: Store, data: bytes) -> bool:
    """Does this place still count? Only while its holder's record runs that attempt."""
    try:
        holder = json.loads(data)
        job_id, attempt = str(holder["job"]), int(holder["attempt"])
    except (ValueError, KeyError, TypeError):
        return False
    try:
        record = store.read(job_id).record
    except (NotFound, CorruptRecord, InvalidInput):
        return False  # no readable record holds anything
    except ReclaimError:
        return True  # storage trouble: no proof it ended, so it still counts
    return bool(
        record.get("status") == JobStatus.RUNNING and job_queue.attempts_of(record) == attempt
    )
