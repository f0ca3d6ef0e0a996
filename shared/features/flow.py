"""Flow control on Cloud Storage: pause, rate and concurrency gates, and what frees them.

The rules and object names are in shared.features.flow_policy; this module reads and writes the
objects. Nothing here keeps a counter in one object (one object takes about one write a
second: https://cloud.google.com/storage/quotas#objects): a key's running jobs are N place
objects, a rate window's starts are N token objects, each taken by a create-only write
(ifGenerationMatch=0, https://cloud.google.com/storage/docs/request-preconditions).

A job held back is never refused: its delivery is acked (Pub/Sub does not count it toward
the dead-letter policy, which counts only failed deliveries:
https://cloud.google.com/pubsub/docs/dead-letter-topics) and no attempt is spent (the
gates run before the claim). What starts it later:
- a paused job: the resume, which rings every parked job, paced;
- a job waiting for a place: the holder that frees one (finish hook, requeue, hand-back)
  rings the oldest waiters of its key; the sweep re-rings waiters as a safety net;
- a job over its rate: it reserves a token in the first window with one free and is
  deferred there (not_before); this process rings it when the window opens (an alarm
  thread: CPU outside a request may be throttled on Cloud Run,
  https://cloud.google.com/run/docs/configuring/billing-settings, so the drain and the
  sweep, which start every due queued job, are the safety net).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from shared import job_queue
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidInput,
    LostRace,
    NotFound,
    ReclaimError,
    UnknownPipeline,
)
from shared.features import flow_policy as fp
from shared.hints import index_board
from shared.jobs import JobRecord, JobStatus
from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.pipelines import get_pipeline, pipeline_names

if TYPE_CHECKING:
    from shared.seams import Context, Ringer
    from shared.storage import Store, Stored

log = get_logger(__name__)

PAUSE_CACHE_S = 2.0
"""A process trusts a pause flag it read this long: a pause takes effect within it."""
WAKE = 2
"""Waiters one freed place rings (the oldest first); a second one covers a waiter that
is gone (cancelled, already running) without a sweep."""
RESUME_PAGE = 100
RESUME_PER_S = 500.0
"""Doorbells a resume publishes per second (Pub/Sub's publish quota is far above it; the
point is that the claim service scales up as the pushes come, not all at once)."""
SWEEP_LISTING = 500

_HELD: dict[tuple[str, int], tuple[str, int]] = {}
"""(job id, attempt) -> (place name, generation) this process took for that attempt (the
release's fast path; by attempt, so a release never uses another attempt's)."""
_HELD_LOCK = threading.Lock()
_PAUSE_CACHE: dict[str, tuple[bool, float]] = {}


# ------------------------------------------------------------------ limits of a job


def limits_of(job: JobRecord) -> fp.Limits:
    try:
        pipeline = get_pipeline(str(job.get("pipeline")))
        max_running, rate = pipeline.max_running, pipeline.rate
    except UnknownPipeline:
        max_running, rate = None, None
    return fp.limits_of(job, max_running, rate)


# ------------------------------------------------------------------ pause


def pause_gate(ctx: Context, stored: Stored, now: datetime) -> Outcome | None:
    """A job of a paused pipeline is parked (indexed for the resume) and acked."""
    job = stored.record
    pipeline = str(job.get("pipeline"))
    job_id = str(job.get("id"))
    if pipeline not in pipeline_names():  # only a known pipeline can be paused; the runner
        return None  # fails a record naming another (never a 4xx to the push)
    if not is_paused(ctx.store, pipeline):
        return None
    index_board.note(ctx.store, fp.PARKED_PREFIX, now)  # the sweep lists parked/ from now on
    _create(ctx.store, fp.parked_name(pipeline, job_id))
    if not is_paused(ctx.store, pipeline, cached=False):  # resumed meanwhile: the resume
        ctx.store.delete_blob(fp.parked_name(pipeline, job_id))  # may have listed before
        return None  # our marker, so go on ourselves
    log.info("pipeline paused: job parked", job_id=job_id, pipeline=pipeline)
    return Outcome(job_id, OutcomeKind.SKIPPED, f"pipeline {pipeline} is paused: parked")


def is_paused(store: Store, pipeline: str, *, cached: bool = True) -> bool:
    now = time.monotonic()
    hit = _PAUSE_CACHE.get(pipeline)
    if cached and hit is not None and hit[1] > now:
        return hit[0]
    try:
        store.read_blob(fp.paused_name(pipeline))
        paused = True
    except NotFound:
        paused = False
    _PAUSE_CACHE[pipeline] = (paused, now + PAUSE_CACHE_S)
    return paused


def view(ctx: Context, record: JobRecord) -> dict[str, object]:
    """A job's view: its flow fields, and `paused: true` on a queued job of a paused
    pipeline (it waits for the resume, not for a slot). A flag that cannot be read is
    left out: a read must answer."""
    shown: dict[str, object] = dict(fp.view(ctx, record))
    pipeline = record.get("pipeline")
    if record.get("status") != JobStatus.QUEUED or pipeline not in pipeline_names():
        return shown
    try:
        paused = is_paused(ctx.store, str(pipeline))
    except ReclaimError as exc:
        log.warning("could not read the pause flag", pipeline=pipeline, error=str(exc))
        return shown
    if paused:
        shown["paused"] = True
    return shown


def known_pipeline(pipeline: object) -> str:
    if not isinstance(pipeline, str) or pipeline not in pipeline_names():
        shown = str(pipeline)[:60]
        raise InvalidInput(
            f"pipeline {shown!r} is unknown; known: {', '.join(sorted(pipeline_names()))}",
            "pipeline",
        )
    return pipeline


def pause(store: Store, pipeline: str, *, by: str, now: datetime) -> bool:
    """Set the pipeline's pause flag; False if it was already paused. InvalidInput for an
    unknown pipeline."""
    known_pipeline(pipeline)
    body = json.dumps({"by": by[:80], "at": job_queue.format_time(now)}).encode()
    _PAUSE_CACHE.pop(pipeline, None)
    if is_paused(store, pipeline, cached=False):
        return False
    try:
        store.put_blob(fp.paused_name(pipeline), body, generation=0)
    except AlreadyExists:
        return False
    finally:
        _PAUSE_CACHE.pop(pipeline, None)  # this process sees its own pause at once
    log.warning("pipeline paused", pipeline=pipeline, by=by)
    return True


@dataclass(frozen=True)
class Resumed:
    """What a resume did: parked jobs rung, and whether some were left for the sweep."""

    was_paused: bool
    rung: int
    more: bool

    def to_json(self) -> dict[str, object]:
        return {"was_paused": self.was_paused, "rung": self.rung, "more": self.more}


def resume(
    store: Store,
    doorbell: Ringer,
    pipeline: str,
    *,
    by: str,
    max_s: float = 20.0,
    per_s: float = RESUME_PER_S,
) -> Resumed:
    """Drop the pause flag, then ring the parked jobs, a page at a time at `per_s`.

    The flag goes first: a job parked after our listing sees it gone and runs itself
    (pause_gate re-reads it). Whatever `max_s` leaves parked, the sweep rings. `by` (the
    verified caller, as for pause) goes to the log with what was rung."""
    known_pipeline(pipeline)
    name = fp.paused_name(pipeline)
    try:
        store.read_blob(name)
        was_paused = True
    except NotFound:
        was_paused = False
    store.delete_blob(name)
    _PAUSE_CACHE.pop(pipeline, None)
    started = time.monotonic()
    rung = 0
    prefix = fp.parked_prefix(pipeline)
    while True:
        page = store.list_blobs(prefix, limit=RESUME_PAGE)
        if not page:
            return _resumed(pipeline, by, Resumed(was_paused, rung, False))
        items = [(b.name, b.name[len(prefix) :]) for b in page]
        rung += _ring_and_drop(store, doorbell, items, pipeline=pipeline)
        if time.monotonic() - started > max_s:
            return _resumed(pipeline, by, Resumed(was_paused, rung, True))
        time.sleep(len(page) / per_s)


def _resumed(pipeline: str, by: str, resumed: Resumed) -> Resumed:
    log.warning(
        "pipeline resumed",
        pipeline=pipeline,
        by=by,
        was_paused=resumed.was_paused,
        rung=resumed.rung,
        more=resumed.more,
    )
    return resumed


# ------------------------------------------------------------------ rate


def rate_gate(ctx: Context, stored: Stored, now: datetime) -> Outcome | None:
    """Within its rate a job goes on with a token of this window; over it, the job is
    deferred to the first window with a token free (reserved for it there)."""
    job = stored.record
    limits = limits_of(job)
    if limits.rate is None or limits.rate_key is None:
        return None
    rate, key = limits.rate, limits.rate_key
    token = job.get("rate_token")
    mine = isinstance(token, str) and token.startswith(fp.rates_prefix(key))
    if mine and fp.token_window(str(token)) == _window_now(ctx, rate):
        return None  # the token it reserved is for this window
    job_id = str(job.get("id"))
    for _ in range(2):  # a window may end between the reservation and this check: again
        start, name = _reserve(ctx.store, key, rate, job_id, ctx.clock())
        current = rate.window_start(ctx.clock())
        if name is not None and fp.window_label(start) == fp.window_label(current):
            return None  # the claim is stamped right after this, within the window
        if name is None or start > current:
            break  # deferred to a later window
    new: JobRecord = {**job, **fp.defer_fields(job, start, name)}
    try:
        ctx.store.update(new, stored.generation)
    except (LostRace, NotFound):  # e.g. another delivery claimed it: its place stays
        return Outcome(job_id, OutcomeKind.RACED, "changed while deferring for its rate")
    # deferred (and no claim can follow the generation this read fenced): a place the
    # limit gate just took for it goes back
    release(ctx.store, ctx.doorbell, job, attempt=job_queue.attempts_of(job) + 1)
    ALARMS.ring_at(start, job_id, ctx.doorbell, job.get("traceparent"), job.get("pipeline"))
    log.info("over its rate: deferred", job_id=job_id, key=key, until=start.isoformat())
    return Outcome(job_id, OutcomeKind.SKIPPED, f"over its rate: deferred to {start.isoformat()}")


def _window_now(ctx: Context, rate: fp.Rate) -> str:
    """The window of the clock as the gate leaves (the claim's stamp follows at once)."""
    return fp.window_label(rate.window_start(ctx.clock()))


def _reserve(
    store: Store, key: str, rate: fp.Rate, job_id: str, now: datetime
) -> tuple[datetime, str | None]:
    """(window start, token name) of the first window in the lookahead with a token free,
    taken for job_id; (the window after the lookahead, None) when all are full."""
    windows = rate.windows_from(now, rate.lookahead)
    prefix = fp.rates_prefix(key)
    listed = store.list_blobs(
        prefix, start_at=prefix + fp.window_label(windows[0]) + "/", limit=fp.RATE_LISTING
    )
    used: dict[str, set[int]] = {}
    for blob in listed:
        k = fp.place_index(blob.name)
        if k is not None:
            used.setdefault(fp.token_window(blob.name), set()).add(k)
    body = job_id.encode()
    for start in windows:
        taken = used.get(fp.window_label(start), set())
        for k in range(rate.limit):
            if k in taken:
                continue
            name = fp.token_name(key, start, k)
            try:
                store.put_blob(name, body, generation=0)
            except AlreadyExists:
                continue
            return start, name
    return windows[-1] + timedelta(seconds=rate.period_s), None


# ------------------------------------------------------------------ concurrency


def limit_gate(ctx: Context, stored: Stored, now: datetime) -> Outcome | None:
    """A keyed job takes a free place of its key before the claim; at the limit it leaves
    a waiter marker and its delivery is acked (a freed place rings it)."""
    job = stored.record
    limits = limits_of(job)
    if limits.key is None or limits.max_running is None:
        return None
    key, n = limits.key, limits.max_running
    job_id = str(job.get("id"))
    me = fp.Holder(job_id, job_queue.attempts_of(job) + 1, now)
    if _take_place(ctx, key, n, me, now).taken:
        return None
    waiter = fp.waiter_name(key, job)
    index_board.note(ctx.store, fp.WAITING_PREFIX, now)  # the sweep wakes a key's waiters
    _create(ctx.store, waiter)
    # a holder that freed its place between our look and our marker did not see the
    # marker: look once more, now that the marker is there
    look = _take_place(ctx, key, n, me, now)
    if look.taken:
        ctx.store.delete_blob(waiter)
        return None
    if look.until is not None:  # a stage handed back from outside may run until then
        ALARMS.ring_at(
            look.until, job_id, ctx.doorbell, job.get("traceparent"), job.get("pipeline")
        )
    log.info("at its key's limit: waiting", job_id=job_id, key=key, max_running=n)
    return Outcome(job_id, OutcomeKind.SKIPPED, f"key {key} has {n} running: waiting")


@dataclass(frozen=True)
class _Look:
    """One look at a key's places: taken, or the soonest a place held `until` frees."""

    taken: bool
    until: datetime | None = None


def _take_place(ctx: Context, key: str, n: int, me: fp.Holder, now: datetime) -> _Look:
    """Take a place of the key: create a missing one, or compare-and-swap over a free one
    (empty) or one whose holder no longer holds it. A holder that is silent (running,
    stale) or never claimed is fenced first (_fence): its next write fails, so it stops
    before this job starts (issue 46). A place is never deleted, only emptied by a
    compare-and-swap, so no stray delete can free a place someone holds (a delete's
    precondition is not honoured everywhere: fake-gcs-server ignores it)."""
    store = ctx.store
    present = {fp.place_index(b.name) for b in store.list_blobs(fp.places_prefix(key))}
    shift = zlib.crc32(me.job_id.encode()) % n  # spread first choices over the places
    order = [(shift + i) % n for i in range(n)]
    for k in order:
        if k not in present and _put(store, fp.place_name(key, k), me, 0):
            return _Look(True)
    soonest: datetime | None = None
    for k in order:
        if k not in present:
            continue
        taken, until = _take(ctx, fp.place_name(key, k), me, now)
        if taken:
            return _Look(True)
        if until is not None and (soonest is None or until < soonest):
            soonest = until
    return _Look(False, soonest)


def _take(ctx: Context, name: str, me: fp.Holder, now: datetime) -> tuple[bool, datetime | None]:
    """Take one existing place if it is free or its holder is gone, fencing a silent or
    unclaimed holder first; (taken, when a place held `until` frees)."""
    store = ctx.store
    try:
        blob = store.read_blob(name)
    except NotFound:
        return _put(store, name, me, 0), None
    holder = fp.parse_holder(blob.data)
    if holder is None:  # empty: free
        return _put(store, name, me, blob.generation), None
    if (holder.job_id, holder.attempt) == (me.job_id, me.attempt):
        _remember(me, name, blob.generation)  # ours already (a redelivery)
        return True, None
    standing, record = _standing(ctx, holder, now)
    if standing is fp.Standing.HOLDS:
        return False, holder.until
    # an older attempt of this job needs no fence: this job's claim, on the record its
    # gate read, is one (and while that attempt runs fresh, the place still counts)
    fence = standing is not fp.Standing.GONE and holder.job_id != me.job_id
    if fence and not _fence(ctx, record):
        return False, None  # it proved alive, or changed: it keeps the place
    if _put(store, name, me, blob.generation):
        _took_over(me, name, holder)
        return True, None
    return False, None  # someone else took it meanwhile


def _standing(ctx: Context, holder: fp.Holder, now: datetime) -> tuple[fp.Standing, Stored | None]:
    try:
        record: Stored | None = ctx.store.read(holder.job_id)
    except (NotFound, CorruptRecord, InvalidInput):
        record = None
    job = record.record if record is not None else None
    stale = ctx.settings.stale_seconds_of(job or {})  # its pool's: limits span pools
    return fp.standing(holder, job, now, stale), record


def _fence(ctx: Context, record: Stored | None) -> bool:
    """Make a silent or unclaimed holder's next write fail before its place is taken: its
    record is written back as it is, generation-matched (only the generation moves, so the
    watchdog still sees when it last proved life, and rescues it as before). A live owner
    (paused, starved, cut off) then stops at its next write or check(); a claim still on
    its way loses. False when the record changed first (it proved alive, or someone acted):
    the place is not taken this time."""
    if record is None:
        return False
    try:
        ctx.store.update(record.record, record.generation)
    except (LostRace, NotFound):
        return False
    return True


def _took_over(me: fp.Holder, name: str, holder: fp.Holder) -> None:
    log.info(
        "took over a place its holder no longer holds",
        place=name,
        job_id=me.job_id,
        attempt=me.attempt,
        from_job=holder.job_id,
        from_attempt=holder.attempt,
    )


def _put(store: Store, name: str, me: fp.Holder, generation: int) -> bool:
    try:
        written = store.put_blob(name, me.to_bytes(), generation=generation)
    except (AlreadyExists, LostRace, NotFound):
        return False
    _remember(me, name, written)
    return True


def _remember(me: fp.Holder, name: str, generation: int) -> None:
    with _HELD_LOCK:
        _HELD[(me.job_id, me.attempt)] = (name, generation)


def release(
    store: Store,
    doorbell: Ringer | None,
    record: JobRecord,
    *,
    attempt: int | None = None,
    hold_until: datetime | None = None,
) -> None:
    """Give back the place a job's attempt held and ring its key's oldest waiters (after a
    terminal write: a finish hook; after a requeue, hand-back or rescue). The place is
    emptied by a compare-and-swap on the generation it was taken at (this process
    remembers it; else each place is read), so a place someone else took over meanwhile
    is left alone, and running it twice is harmless. `hold_until`: the attempt's stage
    may still run until then (a hand-back from outside), so the place stays its own
    until then, whatever its record says."""
    limits = limits_of(record)
    if limits.key is None or limits.max_running is None:
        return
    key = limits.key
    job_id = str(record.get("id"))
    if attempt is None:  # the attempt that ran (a terminal, requeued or rescued record)
        attempt = job_queue.attempts_of(record)
    with _HELD_LOCK:
        known = _HELD.pop((job_id, attempt), None)
    mine = [known] if known else list(_places_of(store, key, job_id, attempt))
    kept = fp.Holder(job_id, attempt, None, hold_until).to_bytes() if hold_until else b""
    for name, generation in mine:
        freed = True
        try:
            store.put_blob(name, kept, generation=generation)
        except (LostRace, NotFound):
            freed = False  # taken over meanwhile: someone else's now
        log.info(
            "gave back a place" if not hold_until else "kept a place while its stage may run",
            key=key,
            place=name,
            job_id=job_id,
            attempt=attempt,
            freed=freed,
            until=hold_until.isoformat() if hold_until else None,
        )
    if doorbell is not None:
        wake(store, doorbell, key)


def _places_of(store: Store, key: str, job_id: str, attempt: int) -> Iterable[tuple[str, int]]:
    for info in store.list_blobs(fp.places_prefix(key)):
        try:
            blob = store.read_blob(info.name)
        except NotFound:
            continue
        holder = fp.parse_holder(blob.data)
        if holder is not None and (holder.job_id, holder.attempt) == (job_id, attempt):
            yield info.name, blob.generation


def wake(store: Store, doorbell: Ringer, key: str, count: int = WAKE) -> int:
    """Ring the oldest `count` waiters of a key and drop their markers (a waiter that
    finds the key full again leaves a new one)."""
    page = store.list_blobs(fp.waiting_prefix(key), limit=count)
    return _ring_and_drop(store, doorbell, [(b.name, fp.waiter_job_id(b.name)) for b in page])


# ------------------------------------------------------------------ terminal index


def record_ended(ctx: Context, record: JobRecord) -> None:
    """After-terminal hook: ended/<status>/<day>/<id>, the index bulk retry and cancel
    read (create-only)."""
    name = fp.ended_name(record)
    if name is not None:
        _create(ctx.store, name)


def ended_ids(
    ctx: Context, statuses: tuple[JobStatus, ...], since: datetime, now: datetime
) -> list[str]:
    """Bulk selection: failed and cancelled jobs of these statuses that ended since
    `since`, from the ended index (per status and day, one listing per fan-out slot and
    one of the names written before it)."""
    ids: list[str] = []
    for status in statuses:
        if status not in fp.ENDED_STATUSES:
            continue
        for day in _days(since, now):
            for prefix in fp.ended_day_prefixes(status, day):
                ids += [b.name[len(prefix) :] for b in ctx.store.list_blobs(prefix)]
    return ids


def _days(since: datetime, now: datetime) -> list[datetime]:
    first = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    out = []
    while first <= now:
        out.append(first)
        first += timedelta(days=1)
    return out


def release_hook(ctx: Context, record: JobRecord) -> None:
    """After a terminal write, a requeue, a hand-back or a rescue: give back the job's
    place and ring its key's oldest waiters (release); an attempt whose stage may still
    run (its history says until when) keeps its place until then."""
    release(ctx.store, ctx.doorbell, record, hold_until=fp.running_until(record))


# ------------------------------------------------------------------ sweep


def sweep(store: Store, doorbell: Ringer) -> dict[str, int]:
    """The safety net: ring parked jobs of pipelines no longer paused, and the oldest
    waiter of every key with waiters (it takes over a leaked place, or waits again)."""
    rung = {"parked": 0, "waiters": 0}
    # the sweep's board (shared.hints.index_board): an index never noted is not listed
    parked = index_board.sweep_list(store, fp.PARKED_PREFIX, SWEEP_LISTING)
    by_pipeline: dict[str, list[tuple[str, str]]] = {}
    for blob in parked:
        parts = blob.name.split("/")
        if len(parts) == 3:
            by_pipeline.setdefault(parts[1], []).append((blob.name, parts[2]))
    for pipeline, items in by_pipeline.items():
        if not is_paused(store, pipeline, cached=False):
            rung["parked"] += _ring_and_drop(store, doorbell, items, pipeline=pipeline)
    waiting = index_board.sweep_list(store, fp.WAITING_PREFIX, SWEEP_LISTING)
    keys = {b.name.split("/")[1] for b in waiting if b.name.count("/") == 2}
    for key in sorted(keys):
        rung["waiters"] += wake(store, doorbell, key, count=1)
    return rung


def sweep_pass(ctx: Context, _now: datetime, _pending: frozenset[str]) -> dict[str, int]:
    """Flow control's pass in the sweep (sweep); its failure is only logged."""
    try:
        rung = sweep(ctx.store, ctx.doorbell)
    except ReclaimError as exc:
        log.warning("flow sweep failed", error=f"{type(exc).__name__}: {exc}")
        return {}
    if any(rung.values()):
        log.info("flow sweep rang held-back jobs", parked=rung["parked"], waiters=rung["waiters"])
    return {}


# ------------------------------------------------------------------ helpers


def _create(store: Store, name: str) -> None:
    with contextlib.suppress(AlreadyExists):
        store.put_blob(name, b"", generation=0)


def _ring_and_drop(
    store: Store, doorbell: Ringer, items: Iterable[tuple[str, str]], *, pipeline: str | None = None
) -> int:
    """Ring each job, then drop the marker of each one rung (a crash between leaves a
    marker: rung again later, harmless). Rung to `pipeline`'s pool when the index knows
    it (parked jobs); a key's waiters may be of any pool (limits span pools): rung on
    this process's pool, whose claim sends on another pool's job (shared.features.pool_routing)."""
    pairs = list(items)
    if not pairs:
        return 0
    ids = [job_id for _, job_id in pairs]
    named = {job_id: pipeline for job_id in ids} if pipeline is not None else None
    failed = set(doorbell.ring_many(ids, pipelines=named))
    for name, job_id in pairs:
        if job_id not in failed:
            store.delete_blob(name)
    return len(pairs) - len(failed)


class Alarms:
    """Ring a job's doorbell at a time (one thread, a heap): the rate's next window."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, Ringer, str | None, str | None]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._thread: threading.Thread | None = None

    def ring_at(
        self,
        at: datetime,
        job_id: str,
        doorbell: Ringer,
        trace: str | None,
        pipeline: str | None = None,
    ) -> None:
        with self._cond:
            self._seq += 1
            entry = (at.timestamp(), self._seq, job_id, doorbell, trace, pipeline)
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="flow-alarms", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at = self._heap[0][0]
                delay = at - time.time()
                if delay > 0:
                    self._cond.wait(timeout=delay)
                    continue
                _, _, job_id, doorbell, trace, pipeline = heapq.heappop(self._heap)
            try:
                doorbell.ring(job_id, trace, pipeline=pipeline)
            except Exception as exc:  # the drain and the sweep start it anyway
                log.warning("deferred doorbell failed", job_id=job_id, error=str(exc))


ALARMS = Alarms()
