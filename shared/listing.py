"""Finding jobs: by batch, by status, or (an operator's last resort) the whole history.

Reads go through the storage seam without the watchdog: a listing shows what
is stored. Unreadable records, and names in an index that are no job id, are
reported beside the listing, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shared import job_queue
from shared.errors import CorruptRecord, InvalidInput, JobNotFound, NotFound
from shared.jobs import JobRecord, JobStatus
from shared.seams import Context, ListFilter
from shared.storage import Store

_WORKERS = 8


@dataclass
class Listing:
    """Records found, plus the ids that could not be read."""

    records: list[JobRecord] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    corrupt: dict[str, str] = field(default_factory=dict)  # job id -> why it is unreadable
    scanned: int = 0  # ids looked at


def list_jobs(
    ctx: Context,
    *,
    status: JobStatus | None,
    batch: str | None,
    limit: int | None,
    where: Mapping[str, str] | None = None,
) -> Listing:
    """Records matching the filters, at most `limit` of them.

    With a batch: O(batch) via its markers. With a feature's filter (`where`, by the
    filter's name: Feature.filters): O(matches) via that feature's index. With a pending
    status and no batch: O(pending) via the pending index. Otherwise the names of the
    whole jobs/ history are listed (one call per page), but only as many records are read
    as it takes to show `limit`, skipping unreadable ones. The record decides: an index
    entry whose record does not match is skipped.
    """
    chosen = _filters(ctx, where or {})
    store = ctx.store
    if batch is not None:
        ids: list[str] = store.list_batch(batch)
    elif chosen:
        flt, value = chosen[0]
        ids = flt.ids(ctx, value)
    elif status in (*job_queue.PENDING_STATUSES, *job_queue.WAITING_STATUSES):
        ids = sorted(pending_ids(store))  # id order, as the whole history lists
    else:
        ids = store.list_jobs()
    listing = Listing()
    for record in _read_each(store, ids, listing):
        if status is not None and record.get("status") != status:
            continue
        if not all(flt.matches(record, value) for flt, value in chosen):
            continue
        listing.records.append(record)
        if limit is not None and len(listing.records) >= limit:
            break
    return listing


def _filters(ctx: Context, where: Mapping[str, str]) -> list[tuple[ListFilter, str]]:
    """The table's filters named in `where`; InvalidInput for a name no feature answers."""
    known = ctx.list_filters()
    unknown = sorted(set(where) - set(known))
    if unknown:
        raise InvalidInput(
            f"unknown filter(s) {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}",
            "filter",
        )
    return [(known[name], value) for name, value in where.items()]


def read_record(store: Store, job_id: str) -> JobRecord:
    """One record as stored; InvalidInput, JobNotFound or CorruptRecord."""
    try:
        return store.read(job_id).record
    except NotFound:
        raise JobNotFound(job_id) from None


def read_many(store: Store, job_ids: Iterable[str]) -> Listing:
    """Every id's record, read in parallel, in the order asked (no watchdog)."""
    ids = list(job_ids)
    listing = Listing(scanned=len(ids))
    if not ids:
        return listing
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(ids))) as pool:
        found = list(pool.map(lambda job_id: _read_one(store, job_id), ids))
    for job_id, got in zip(ids, found, strict=True):
        if isinstance(got, CorruptRecord):
            listing.corrupt[job_id] = got.reason
        elif got is None:
            listing.missing.append(job_id)
        else:
            listing.records.append(got)
    return listing


def pending_ids(store: Store, limit: int | None = None) -> list[str]:
    """Ids in the pending index (jobs that still owe work), in its markers' name order
    (their hash segment's: shared.storage.pending_object), not id order."""
    return [entry.job_id for entry in store.list_pending(limit=limit)]


def _read_each(store: Store, job_ids: Iterable[str], listing: Listing) -> Iterator[JobRecord]:
    """Read each id lazily, noting unreadable ones instead of failing the whole listing."""
    for job_id in job_ids:
        listing.scanned += 1
        got = _read_one(store, job_id)
        if isinstance(got, CorruptRecord):
            listing.corrupt[job_id] = got.reason
        elif got is None:
            listing.missing.append(job_id)
        else:
            yield got


def _read_one(store: Store, job_id: str) -> JobRecord | CorruptRecord | None:
    try:
        return store.read(job_id).record
    except NotFound:
        return None
    except CorruptRecord as exc:
        return exc
    except InvalidInput as exc:  # a foreign object name in pending/ or batches/: reported
        return CorruptRecord(job_id, exc.reason)
