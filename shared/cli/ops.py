"""What the operator commands do to the queue, through the same seam as the functions.

Every change is a policy transition (shared.job_queue) applied with a
generation-matched write; a lost race re-reads and decides again, because a
running owner's heartbeats write the same record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared import job_queue, records
from shared.storage import CorruptRecord, LostRace, NotFound, Store, Stored

# How often cancel/retry re-read and re-apply after losing a CAS to a heartbeat.
CAS_ATTEMPTS = 5

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The CLI's clock (injected everywhere so tests control time)."""
    return datetime.now(UTC)


def _transition(
    store: Store,
    job_id: str,
    fields_of: Callable[[dict[str, Any], datetime], dict[str, Any]],
    clock: Clock,
    before_write: Callable[[], None] | None = None,
) -> Stored:
    """Read, apply a policy builder, CAS; on LostRace read again (a few times)."""
    for _ in range(CAS_ATTEMPTS):
        stored = store.read(job_id)
        new = {**stored.record, **fields_of(stored.record, clock())}
        if before_write is not None:
            before_write()
        try:
            return store.update(new, stored.generation)
        except LostRace:
            continue
    raise LostRace(f"job {job_id} kept changing under us ({CAS_ATTEMPTS} tries); try again")


def cancel_job(
    store: Store, job_id: str, *, by: str, reason: str | None = None, clock: Clock = utcnow
) -> Stored:
    """queued|running -> cancelled; a running owner's next CAS fails and it stops.

    The pending marker goes after the terminal write, as for any terminal job.
    """
    stored = _transition(
        store,
        job_id,
        lambda job, now: job_queue.cancel_fields(job, now, by=by, reason=reason),
        clock,
    )
    store.remove_pending(job_id)
    return stored


def retry_job(
    store: Store, job_id: str, *, by: str, default_max_attempts: int, clock: Clock = utcnow
) -> Stored:
    """failed|cancelled -> queued with a fresh budget; the pending marker is added first.

    Marker before record, as at submission: a crash between the two leaves a
    marker the sweep repairs, never a queued job nobody indexes. Ringing the
    doorbell is the caller's job (it may fail independently).
    """
    return _transition(
        store,
        job_id,
        lambda job, now: job_queue.retry_fields(
            job, now, by=by, default_max_attempts=default_max_attempts
        ),
        clock,
        before_write=lambda: store.add_pending(job_id),
    )


@dataclass
class Listing:
    """Records found by a listing, plus the ids that could not be read."""

    records: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    corrupt: dict[str, str] = field(default_factory=dict)
    scanned: int = 0


def read_many(
    store: Store, job_ids: Iterator[str] | list[str], listing: Listing
) -> Iterator[dict[str, Any]]:
    """Read each id, noting unreadable ones instead of failing the whole listing."""
    for job_id in job_ids:
        listing.scanned += 1
        try:
            yield store.read(job_id).record
        except NotFound:
            listing.missing.append(job_id)
        except (CorruptRecord, records.InvalidInput) as exc:  # or a foreign object name
            listing.corrupt[job_id] = exc.reason


def list_jobs(store: Store, *, status: str | None, batch: str | None, limit: int | None) -> Listing:
    """Records matching the filters, at most `limit` of them.

    With a batch: O(batch) via its markers. With a pending status and no batch:
    O(pending) via the pending index. Otherwise the names of the whole jobs/
    history are listed (one call per page), but only as many records are read as
    it takes to show `limit`, skipping unreadable ones.
    """
    if batch is not None:
        ids: list[str] = store.list_batch(batch)
    elif status in job_queue.PENDING_STATUSES:
        ids = [entry.job_id for entry in store.list_pending()]
    else:
        ids = store.list_jobs()
    listing = Listing()
    for record in read_many(store, ids, listing):
        if status is not None and record.get("status") != status:
            continue
        listing.records.append(record)
        if limit is not None and len(listing.records) >= limit:
            break
    return listing


@dataclass(frozen=True)
class DeadLetter:
    """One message held by the dead-letter subscription, decoded for display."""

    ack_id: str
    message_id: str
    job_id: str | None
    delivery_count: int | None
    source_subscription: str | None
    attributes: dict[str, str]
    published: str | None


def decode_dead_letter(
    ack_id: str,
    message_id: str,
    data: bytes,
    attributes: dict[str, str],
    delivery_attempt: int,
    published: str | None,
) -> DeadLetter:
    """Job id from the doorbell (attribute first, then JSON data); Pub/Sub's dead-letter
    attributes give the source subscription and its delivery count."""
    job_id = attributes.get("job_id")
    if not job_id:
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        if isinstance(body, dict) and isinstance(body.get("job_id"), str):
            job_id = body["job_id"]
    count_attr = attributes.get("CloudPubSubDeadLetterSourceDeliveryCount")
    count: int | None = delivery_attempt or None
    if count_attr and count_attr.isdigit():
        count = int(count_attr)
    return DeadLetter(
        ack_id=ack_id,
        message_id=message_id,
        job_id=job_id,
        delivery_count=count,
        source_subscription=attributes.get("CloudPubSubDeadLetterSourceSubscription"),
        attributes=dict(attributes),
        published=published,
    )


def requeue_decision(store: Store, job_id: str | None) -> tuple[str, str | None]:
    """What --requeue does with one dead letter: ("ring"|"drop"|"keep", status).

    ring: the job still owes work, re-ring and ack. drop: it is terminal, the
    doorbell is moot, ack. keep: no job id, unknown or unreadable record, leave
    the message for a person.
    """
    if not job_id:
        return "keep", None
    try:
        record = store.read(job_id).record
    except (NotFound, CorruptRecord, records.InvalidInput):  # a letter naming no job we can read
        return "keep", None
    status = record.get("status")
    if status in job_queue.PENDING_STATUSES:
        return "ring", str(status)
    return "drop", str(status)
