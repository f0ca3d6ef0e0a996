"""The due hint: one small object per pool that changes whenever a job of the pool is
marked due, so a freed claim slot lists the pending index only when there may be a
marked job to take, never as a matter of course.

A job sent back to the queue due (a hand-back on SIGTERM, the watchdog's rescue, the
sweep's re-ring) has its pending marker marked (shared.recovery.mark_due), and its
doorbell may pend, back off or be lost (shared.claim.drain's module doc). Every freed
slot used to list the pending index to look for such marks: one class A operation per
job (N on N record shards), for marks that are rare. Now whoever marks a job due also
rewrites ``hints/due/<pool>`` (`announce`: on a thread, at most one write a second per
process, the last one trailing, so a burst of hand-backs costs one or two writes and the
object stays under Cloud Storage's one write a second per object,
https://cloud.google.com/storage/quotas), and a freed slot reads the hint (`DueHint`: a
class B read, at most once per HINT_READ_S per process) and lists only when its
generation moved since the process last listed. A read is a twelfth of a listing's
price (https://cloud.google.com/storage/pricing) and, per process, bounded by time, not
by jobs.

Order makes it safe: the mark is written before the hint, and a process records the
generation it read before the listing that follows it, so a mark is either seen by that
listing or moves the hint again after the read (the next read lists). A hint that cannot
be written leaves the job to its doorbell, the drain's safety net and the sweep, as a
failed mark does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from shared.errors import AlreadyExists, LostRace, NotFound, StorageError
from shared.logs import get_logger
from shared.pools import DEFAULT as DEFAULT_POOL
from shared.storage import Store

log = get_logger(__name__)

HINT_PREFIX = "hints/due/"
HINT_READ_S = 1.0
"""Least time between two reads of a pool's hint in one process: a freed slot learns of a
mark at most this late (plus the listing), and a process reads at most one hint a second
however many jobs it runs."""
ANNOUNCE_EVERY_S = 1.0
"""Least time between two writes of a pool's hint by one process (a burst's last mark is
announced by a trailing write)."""


def hint_name(pool: str | None) -> str:
    """The hint object of a pool's markers (None: the default pool's)."""
    return f"{HINT_PREFIX}{pool or DEFAULT_POOL}"


class _Announcer:
    """Per-process writer of the hints: at once when the last write is a second old,
    else one trailing write a second after it (a burst's marks all come before it).
    Kept per store (a process has one; tests make many)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._last: dict[tuple[int, str], float] = {}
        self._trailing: set[tuple[int, str]] = set()

    def announce(self, store: Store, pool: str | None) -> None:
        name = (id(store), hint_name(pool))
        with self._lock:
            if len(self._last) > 256:  # stores come and go in tests: forget old ones
                self._last.clear()
            now = self._clock()
            wait = self._last.get(name, float("-inf")) + ANNOUNCE_EVERY_S - now
            if wait > 0:
                if name not in self._trailing:
                    self._trailing.add(name)
                    timer = threading.Timer(wait, self._trail, args=(store, name))
                    timer.daemon = True
                    timer.start()
                return
            self._last[name] = now
        # never in the caller's way: a hand-back on SIGTERM rings its doorbell next, and
        # a hint write that meets the object's rate limit is retried for seconds
        threading.Thread(target=_write, args=(store, name[1]), daemon=True).start()

    def _trail(self, store: Store, name: tuple[int, str]) -> None:
        with self._lock:
            self._trailing.discard(name)
            self._last[name] = self._clock()
        _write(store, name[1])


def _write(store: Store, name: str) -> None:
    """A new generation of the hint: generation-matched on the one read (never a blind
    overwrite); another writer's change in between is as good as this one."""
    body = datetime.now(UTC).isoformat().encode()
    try:
        try:
            generation = store.read_blob(name).generation
        except NotFound:
            generation = 0
        store.put_blob(name, body, generation=generation)
    except (LostRace, AlreadyExists):
        pass  # someone else moved it meanwhile: readers see a new generation all the same
    except StorageError as exc:
        log.warning("could not write the due hint", hint=name, error=str(exc))


_ANNOUNCER = _Announcer()


def announce(store: Store, pool: str | None) -> None:
    """A job of `pool` was just marked due: move its hint (coalesced per process, on a
    thread of its own: the caller does not wait)."""
    _ANNOUNCER.announce(store, pool)


READ_WAIT_S = 5.0
"""The longest a freed slot waits for the read another slot of its process has under way."""


def _generation(store: Store, pool: str | None) -> int:
    """The hint's generation: 0 without one, -1 when it cannot be read."""
    try:
        return store.read_blob(hint_name(pool)).generation
    except NotFound:
        return 0
    except StorageError as exc:
        log.warning("could not read the due hint", error=str(exc))
        return -1


class DueHint:
    """What one process knows of a pool's hint: the generation its last listing covered,
    and the generation of its last read (cached HINT_READ_S)."""

    def __init__(self, read_s: float = HINT_READ_S) -> None:
        self._lock = threading.Lock()
        self._read_s = read_s
        self._read_at: float | None = None
        self._read: int | None = None  # the generation last read (0: no hint object)
        self._reading: threading.Event | None = None  # set once the read under way answers
        self._covered = 0
        """The generation a listing followed; 0: no hint object, so no mark announced
        (a process that finds one lists once: a replacement instance looks for the jobs
        handed back before it started)."""

    def moved(self, store: Store, pool: str | None, now_s: float | None = None) -> bool:
        """Whether the hint moved since this process's last listing (a read at most every
        read_s; an unreadable hint counts as moved: the listing is the safe side). A slot
        that frees while another slot's read is under way waits for its answer."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            fresh = self._read_at is not None and now_s - self._read_at < self._read_s
            under_way = self._reading
            if not fresh:
                self._read_at = now_s
                self._reading = under_way = None
        if fresh:
            if under_way is not None:
                under_way.wait(READ_WAIT_S)
            with self._lock:
                return self._read is not None and self._read != self._covered
        reading = threading.Event()
        with self._lock:
            self._reading = reading
        try:
            generation = _generation(store, pool)
        finally:
            with self._lock:
                reading.set()
        with self._lock:
            self._read = generation
            return generation != self._covered or generation < 0

    def listed(self) -> None:
        """A listing followed the last read: the marks it announced are seen."""
        with self._lock:
            if self._read is not None and self._read >= 0:
                self._covered = self._read
