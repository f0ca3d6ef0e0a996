"""A status read that waits: answer as soon as a job's record changes, or the wait ends.

The record's generation changes with every write (Cloud Storage gives each version a
new one, https://cloud.google.com/storage/docs/metadata#generation-number), so a
waiting read polls only the object's metadata, never its body, and never runs the
watchdog while it waits: the one full read (with the watchdog) comes after the change.
The polls start fast and back off, so a job that changes soon is seen at once and a
long one costs a call every few seconds; a bounded wait stays below the function's
timeout.

`until=ended` waits for the end only: the record's writer keeps its status in the
object's custom metadata (shared.storage.STATUS_METADATA), so the heartbeats and
checkpoints of a running job cost one metadata poll each, no answer and no body read,
and the polls start slower and back off further (POLL_FIRST_ENDED_S, POLL_MAX_ENDED_S:
a job that has run for a while is likely to run a while longer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared import job_queue, records
from shared.errors import InvalidInput, JobNotFound, NotFound

if TYPE_CHECKING:
    from shared.queue import Queue
    from shared.status import JobView
    from shared.storage import RecordStat, Store

WAIT_MAX_S = 60.0
"""The longest wait one request may ask for (submit's timeout must stay above it)."""
POLL_FIRST_S = 0.25
POLL_GROWTH = 2.0
POLL_MAX_S = 4.0
"""Metadata polls: 0.25 s, then twice as long each quiet time, at most every 4 s."""
POLL_FIRST_ENDED_S = 1.0
POLL_MAX_ENDED_S = 8.0
"""With until=ended: 1 s, doubling, at most every 8 s (an ended job is seen at most 8 s
late; one that ends at once, 1 s late). A caller waiting for the end has work that takes
a while: the fast early polls of until=changed would be most of what a 20 s job costs."""
UNTIL_VALUES = ("changed", "ended")


@dataclass(frozen=True)
class Waited:
    """What a wait saw: the generation it ended on, and whether it changed."""

    generation: int
    changed: bool
    polls: int
    ended: bool = False


def parse_wait(text: str | None) -> float:
    """`?wait=` as seconds in 0..WAIT_MAX_S; InvalidInput otherwise."""
    if text is None:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= WAIT_MAX_S:  # also NaN
        raise InvalidInput(
            f"wait must be seconds from 0 to {WAIT_MAX_S:g}, got {text[:20]!r}", "wait"
        )
    return seconds


def parse_after(text: str | None) -> int | None:
    """`?after=` (a generation the caller already saw) as a positive integer, or None."""
    if text is None:
        return None
    if not text.isdigit() or len(text) > 20 or int(text) < 1:
        raise InvalidInput(f"after must be a record generation, got {text[:24]!r}", "after")
    return int(text)


def parse_until(text: str | None) -> str:
    """`?until=` as "changed" (the default: any write) or "ended"; InvalidInput otherwise."""
    if text is None:
        return "changed"
    if text not in UNTIL_VALUES:
        raise InvalidInput(
            f"until must be one of {', '.join(UNTIL_VALUES)}, got {text[:20]!r}", "until"
        )
    return text


def _poll(
    store: Store,
    job_id: str,
    seconds: float,
    settled: Callable[[RecordStat], bool],
    *,
    first_s: float,
    max_s: float,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> Waited:
    """Poll the record's metadata, backing off from first_s to max_s, until `settled`
    says so or `seconds` pass. JobNotFound when there is no record."""
    records.validate_job_id(job_id)
    deadline = monotonic() + seconds
    polls, interval = 0, first_s
    while True:
        try:
            stat = store.stat(job_id)
        except NotFound:
            raise JobNotFound(job_id) from None
        polls += 1
        if settled(stat):
            return Waited(stat.generation, True, polls)
        left = deadline - monotonic()
        if left <= 0:
            return Waited(stat.generation, False, polls)
        sleep(min(interval, left))
        interval = min(interval * POLL_GROWTH, max_s)


def wait_for_end(
    store: Store,
    job_id: str,
    seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> Waited:
    """Poll the record's metadata until its status is terminal or `seconds` pass. A record
    written without the status in its metadata (an older writer) costs a body read, on
    each change only. JobNotFound when there is no record."""
    seen: list[int] = []  # the generation whose body was read last

    def ended(stat: RecordStat) -> bool:
        status = stat.status
        if status is None and stat.generation not in seen:
            seen[:] = [stat.generation]
            status = _status_from_body(store, job_id)
        return status in job_queue.TERMINAL_STATUSES

    waited = _poll(
        store,
        job_id,
        seconds,
        ended,
        first_s=POLL_FIRST_ENDED_S,
        max_s=POLL_MAX_ENDED_S,
        sleep=sleep,
        monotonic=monotonic,
    )
    return Waited(waited.generation, waited.changed, waited.polls, ended=waited.changed)


def _status_from_body(store: Store, job_id: str) -> str | None:
    try:
        status = store.read(job_id).record.get("status")
    except NotFound:
        raise JobNotFound(job_id) from None
    return status if isinstance(status, str) else None


def wait_for_change(
    store: Store,
    job_id: str,
    seconds: float,
    *,
    after: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> Waited:
    """Poll the record's generation until it differs from `after` (else from the first
    poll's) or `seconds` pass. JobNotFound when there is no record."""
    seen: list[int] = [] if after is None else [after]

    def changed(stat: RecordStat) -> bool:
        if not seen:
            seen.append(stat.generation)
        return stat.generation != seen[0]

    return _poll(
        store,
        job_id,
        seconds,
        changed,
        first_s=POLL_FIRST_S,
        max_s=POLL_MAX_S,
        sleep=sleep,
        monotonic=monotonic,
    )


def read_after_change(
    queue: Queue, job_id: str, seconds: float, after: int | None, until: str = "changed"
) -> JobView:
    """GET /jobs/<id>?wait=&after=&until=: at once, or (until=changed) as soon as the
    record changes past `after` (without `after`: at once if it ended, else once it
    changes), or (until=ended) as soon as the job ends; else when `seconds` pass."""
    if seconds > 0 and until == "ended":
        wait_for_end(queue.store, job_id, seconds)
    elif seconds > 0:
        if after is None:
            view = queue.get(job_id)
            if view.record.get("status") in job_queue.TERMINAL_STATUSES:
                return view
            after = view.generation
        wait_for_change(queue.store, job_id, seconds, after=after)
    return queue.get(job_id)
