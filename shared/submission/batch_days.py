"""Batches by the UTC day they were submitted: one create-only marker per batch and day,
``submitted/<YYYY-MM-DD>/<batch_id>``, so the dashboard browses batches, and through them
their done jobs, by day (docs/seeing.md). One class A write per batch and day (a replay or
a later chunk of the same batch finds it there), never one per job: done jobs keep no index
of their own (docs/capacity.md counts a job's writes)."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime

from shared.errors import AlreadyExists, StorageError
from shared.logs import get_logger
from shared.storage import Store

log = get_logger(__name__)

PREFIX = "submitted/"
_NOTED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


def name(batch_id: str, day: date) -> str:
    return f"{PREFIX}{day.isoformat()}/{batch_id}"


def day_prefix(day: date) -> str:
    return f"{PREFIX}{day.isoformat()}/"


def note(store: Store, batch_id: str, now: datetime) -> None:
    """The batch's marker for today (once per process and day). A write that fails is
    logged and the submit goes on: the batch is still found by its id, only not by day."""
    day = now.astimezone(UTC).date()
    key = (batch_id, day.isoformat())
    with _LOCK:
        if key in _NOTED:
            return
    try:
        store.put_blob(name(batch_id, day), b"", generation=0)
    except AlreadyExists:
        pass
    except StorageError as exc:
        log.warning("could not index the batch by day", batch_id=batch_id, error=str(exc))
        return
    with _LOCK:
        if len(_NOTED) > 4096:
            _NOTED.clear()
        _NOTED.add(key)


def submitted_on(store: Store, day: date, limit: int) -> list[str]:
    """Ids of the batches submitted on `day`, sorted, at most `limit` (one listing)."""
    prefix = day_prefix(day)
    return [b.name[len(prefix) :] for b in store.list_blobs(prefix, limit=limit)]
