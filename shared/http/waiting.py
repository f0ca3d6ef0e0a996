"""A status read that waits: answer as soon as a job's record changes, or the wait ends.

The record's generation changes with every write (Cloud Storage gives each version a
new one, https://cloud.google.com/storage/docs/metadata#generation-number), so a
waiting read polls only the object's metadata, never its body, and never runs the
watchdog while it waits: the one full read (with the watchdog) comes after the change.
The polls start fast and back off, so a job that changes soon is seen at once and a
long one costs a call every few seconds; a bounded wait stays below the function's
timeout.

A wait holds one of its instance's request slots while it waits, so waits may hold only
their share of them (shared.http.capacity): one that finds no room, or that the instance
cuts short because another request took its last free slot, answers at once with the
job as it is and `Retry-After` (BUSY_RETRY_AFTER_S), and the caller asks again then.
Submits, status reads and cron ticks always find a slot, however many callers wait.

`until=ended` waits for the end only: the record's writer keeps its status in the
object's custom metadata (shared.storage.STATUS_METADATA), so the heartbeats and
checkpoints of a running job cost one metadata poll each, no answer and no body read,
and the polls start slower and back off further (POLL_FIRST_ENDED_S, POLL_MAX_ENDED_S:
a job that has run for a while is likely to run a while longer).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared import job_queue, params, records
from shared.errors import InvalidInput, JobNotFound, NotFound
from shared.http.capacity import Capacity, Parked

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
BUSY_RETRY_AFTER_S = 2
"""Retry-After of a wait answered early (no room to park, or cut short): soon enough that
a job's end is seen about as late as a parked until=ended wait sees it, rare enough that
the waits left out cost a read each every few seconds."""
GENERATION_MAX = 2**63 - 1
"""Cloud Storage generations are int64
(https://cloud.google.com/storage/docs/json_api/v1/objects#resource)."""

Sleep = Callable[[float], "bool | None"]
"""Sleep up to the seconds given; False when the wait was cut short (answer now)."""


@dataclass(frozen=True)
class Waited:
    """What a wait saw: the generation it ended on, and whether it changed."""

    generation: int
    changed: bool
    polls: int
    ended: bool = False
    cut: bool = False  # the instance cut the wait short (shared.http.capacity)


@dataclass(frozen=True)
class Answer:
    """A waiting read's answer: the job, and when the wait was answered early without a
    change (no room to park, or cut short), the seconds after which to ask again."""

    view: JobView
    retry_after_s: int | None = None


def parse_wait(text: str | None) -> float:
    """`?wait=` as seconds in 0..WAIT_MAX_S (shared.params); InvalidInput otherwise."""
    return 0.0 if text is None else params.seconds(text, "wait", high=WAIT_MAX_S)


def parse_after(text: str | None) -> int | None:
    """`?after=` (a generation the caller already saw) as a positive integer, or None."""
    if text is None:
        return None
    return params.integer(text, "after", low=1, high=GENERATION_MAX)


def parse_until(text: str | None) -> str:
    """`?until=` as "changed" (the default: any write) or "ended"; InvalidInput otherwise."""
    if text is None:
        return "changed"
    if text not in UNTIL_VALUES:
        raise InvalidInput(
            f"until must be one of {', '.join(UNTIL_VALUES)}, got {params.shown(text)}", "until"
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
    sleep: Sleep,
    monotonic: Callable[[], float],
) -> Waited:
    """Poll the record's metadata, backing off from first_s to max_s, until `settled`
    says so, `seconds` pass or `sleep` says the wait was cut short. JobNotFound when
    there is no record."""
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
        if sleep(min(interval, left)) is False:
            return Waited(stat.generation, False, polls, cut=True)
        interval = min(interval * POLL_GROWTH, max_s)


def wait_for_end(
    store: Store,
    job_id: str,
    seconds: float,
    *,
    sleep: Sleep = time.sleep,
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
    return Waited(
        waited.generation, waited.changed, waited.polls, ended=waited.changed, cut=waited.cut
    )


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
    sleep: Sleep = time.sleep,
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
    """answer_after_change without an instance's limits (an in-process caller holds no
    request slot): the job once it changed or ended, or when `seconds` pass."""
    return answer_after_change(queue, job_id, seconds, after, until, room=None).view


def answer_after_change(
    queue: Queue,
    job_id: str,
    seconds: float,
    after: int | None,
    until: str = "changed",
    *,
    room: Capacity | None,
) -> Answer:
    """GET /jobs/<id>?wait=&after=&until=: at once, or (until=changed) as soon as the
    record changes past `after` (without `after`: at once if it ended, else once it
    changes), or (until=ended) as soon as the job ends; else when `seconds` pass. With
    `room` (the instance's slots), a wait that finds no room to park, or is cut short,
    answers at once with retry_after_s."""
    if seconds <= 0:
        return Answer(queue.get(job_id))
    if until != "ended" and after is None:
        view = queue.get(job_id)
        if view.record.get("status") in job_queue.TERMINAL_STATUSES:
            return Answer(view)
        after = view.generation
    with _parking(room) as parked:
        if parked is None:
            return _early(queue.get(job_id), after, until)
        if until == "ended":
            waited = wait_for_end(queue.store, job_id, seconds, sleep=parked.sleep)
        else:
            waited = wait_for_change(queue.store, job_id, seconds, after=after, sleep=parked.sleep)
    view = queue.get(job_id)
    return _early(view, after, until) if waited.cut else Answer(view)


def _early(view: JobView, after: int | None, until: str) -> Answer:
    """The answer of a wait that could not wait: Retry-After unless the job already is
    what the caller waits for (ended, or with until=changed past `after`)."""
    ended = view.record.get("status") in job_queue.TERMINAL_STATUSES
    moved = until != "ended" and after is not None and view.generation != after
    return Answer(view, None if ended or moved else BUSY_RETRY_AFTER_S)


@contextlib.contextmanager
def _parking(room: Capacity | None) -> Iterator[Parked | None]:
    if room is None:
        yield Parked()  # no limits: never cut short
        return
    with room.parking() as parked:
        yield parked
