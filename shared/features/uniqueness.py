"""Unique jobs: one lock object per key, `unique/<sha256(key)>`, naming the job holding it.

Submit takes the lock create-only before it writes the job (so of two racing submits one
wins and the other answers with the winner's job). A lock that no longer holds (window
over, "while pending" holder ended, or a holder that never got a record: a crash between
lock and record, past a grace) is taken over by compare-and-swap on its generation, so a
key can never block forever. The after-terminal hook drops a "while pending" lock when its
job ends; the sweep walks the locks (a bounded page per run, from a cursor) and deletes
the ones that no longer hold. The policy is shared.timing.lock_holds (pure).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared import timing
from shared.errors import AlreadyExists, Conflict, CorruptRecord, LostRace, NotFound
from shared.hints import index_board
from shared.logs import get_logger

if TYPE_CHECKING:
    from shared.config import Settings
    from shared.jobs import JobRecord
    from shared.seams import Context
    from shared.storage import Store

log = get_logger(__name__)

GRACE_S = 120.0
"""How long a lock naming a job without a record still holds (a submit in flight)."""
CURSOR_PREFIX = "unique-sweep/"
CURSOR = CURSOR_PREFIX + "cursor"
"""Where the sweep's walk over the locks resumes (a hint, overwritten)."""
_TRIES = 4


def acquire(store: Store, record: JobRecord, now: datetime) -> str | None:
    """Take the lock of the record's unique_key for it: None when taken (or already
    ours), else the id of the job that holds it."""
    key = str(record["unique_key"])
    lock = timing.lock_data(str(record["id"]), key, record.get("unique_until"), now)
    index_board.note(store, timing.UNIQUE_PREFIX, now)  # the sweep's repair lists unique/
    return take(store, timing.unique_lock_name(key), lock, now, f"unique_key {key[:60]!r}")


def take(store: Store, name: str, lock: dict[str, Any], now: datetime, what: str) -> str | None:
    """One create-only write takes the lock object `name` for lock["job_id"]: None when
    taken (or already ours), else the id of the job that holds it. A lock that no longer
    holds (timing.lock_holds) is taken over by a generation-matched write. Also the
    overlap guard of a `skip` schedule (shared.cron.ticks)."""
    job_id = str(lock["job_id"])
    data = _encode(lock)
    for _ in range(_TRIES):
        try:
            store.put_blob(name, data, generation=0)
            return None
        except AlreadyExists:
            pass
        try:
            blob = store.read_blob(name)
        except NotFound:
            continue  # released meanwhile: create again
        held = _decode(blob.data)
        holder = str(held.get("job_id", ""))
        if holder == job_id:
            return None  # a replay of the same submit
        if timing.lock_holds(held, _status(store, holder), now, GRACE_S):
            return holder
        try:
            store.put_blob(name, data, generation=blob.generation)
            log.info("lock taken over", lock=name, job_id=job_id, from_job=holder or None)
            return None
        except LostRace:
            continue
    raise Conflict(f"{what} is contended; try again")


def give_back(store: Store, record: JobRecord) -> None:
    """Drop the unique lock a submit just took for a job it then did not create."""
    key = record.get("unique_key")
    if isinstance(key, str):
        _drop_if_held_by(store, timing.unique_lock_name(key), str(record["id"]))


def holder_status(store: Store, job_id: str, *, wait_s: float = 1.0) -> str:
    """The holder's status for the answer. A racing submit may hold the lock a moment
    before its record lands: wait for it briefly, then call it queued (being created)."""
    deadline = time.monotonic() + wait_s
    while True:
        status = _status(store, job_id)
        if status is not None or time.monotonic() >= deadline:
            return status or "queued"
        time.sleep(0.05)


def release_on_terminal(ctx: Context, record: JobRecord) -> None:
    """After-terminal hook: a "while pending" lock held by this job goes (idempotent)."""
    store = ctx.store
    key = record.get("unique_key")
    if not isinstance(key, str) or record.get("unique_until") is not None:
        return
    _drop_if_held_by(store, timing.unique_lock_name(key), str(record.get("id")))


def _drop_if_held_by(store: Store, name: str, job_id: str) -> None:
    try:
        blob = store.read_blob(name)
    except NotFound:
        return
    if _decode(blob.data).get("job_id") == job_id:
        store.delete_blob(name, generation=blob.generation)


def repair(store: Store, settings: Settings, now: datetime | None = None) -> int:
    """Delete up to one page of locks that no longer hold; returns how many went.

    Walks unique/ as a ring from the cursor, so every lock is looked at in turn. The
    delete is generation-matched (GCS honours it; a fake that does not can only drop a
    lock that a takeover just wrote, which the next submit of that key re-creates)."""
    now = now or datetime.now(UTC)
    limit = settings.sweep_max_jobs
    page = index_board.sweep_list(store, timing.UNIQUE_PREFIX, limit)  # no lock noted: none
    cursor = _read_cursor(store) if len(page) >= limit else None  # more than a page
    if cursor:
        page = store.list_blobs(timing.UNIQUE_PREFIX, start_at=cursor, limit=limit)
        if len(page) < limit:
            page += store.list_blobs(
                timing.UNIQUE_PREFIX, end_before=cursor, limit=limit - len(page)
            )
    removed = 0
    for info in page:
        try:
            blob = store.read_blob(info.name)
        except NotFound:
            continue
        lock = _decode(blob.data)
        if timing.lock_holds(lock, _status(store, str(lock.get("job_id", ""))), now, GRACE_S):
            continue
        store.delete_blob(info.name, generation=blob.generation)
        removed += 1
        log.info("unique key released by the sweep", job_id=lock.get("job_id"))
    if len(page) >= limit:
        _write_cursor(store, page[-1].name + "0")
    return removed


def _status(store: Store, job_id: str) -> str | None:
    """The holder's status; None when it has no record. Unreadable counts as holding."""
    if not job_id:
        return None
    try:
        return str(store.read(job_id).record.get("status"))
    except NotFound:
        return None
    except CorruptRecord:
        return "running"  # never release on a record we cannot read


def _encode(lock: dict[str, Any]) -> bytes:
    return json.dumps(lock, separators=(",", ":"), sort_keys=True).encode()


def _decode(data: bytes) -> dict[str, Any]:
    try:
        lock = json.loads(data)
    except ValueError:
        return {}
    return lock if isinstance(lock, dict) else {}


def _read_cursor(store: Store) -> str | None:
    try:
        text = store.read_blob(CURSOR).data.decode()
    except (NotFound, UnicodeDecodeError):
        return None
    return text if text.startswith(timing.UNIQUE_PREFIX) else None


def _write_cursor(store: Store, cursor: str) -> None:
    try:
        try:
            gen = store.read_blob(CURSOR).generation
        except NotFound:
            gen = 0
        store.put_blob(CURSOR, cursor.encode(), generation=gen)
    except (LostRace, AlreadyExists):
        pass  # another sweep moved it: only a hint
