"""Per-process concurrency slots: a job runs only while it holds one.

Acquisition never blocks: with no free slot the caller answers 429 and
Pub/Sub redelivers later, so nothing ever waits in this process's memory.

The pool also says how quickly pushes fill the slots it frees (push_gap): the drain
takes work from the pending index only when they do not (shared.claim.drain).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType


class Slot:
    """A held slot; releasing twice is harmless."""

    def __init__(self, pool: Slots):
        self._pool = pool
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._pool._release()

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Slots:
    """A bounded pool of slots (RECLAIM_MAX_CONCURRENT)."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()
        self._clock = clock
        self._freed: list[float] = []  # when each slot free now was freed (never-used: none)
        self._last_wait = 0.0  # how long the last slot filled had waited for its push

    @property
    def in_use(self) -> int:
        with self._lock:
            return self._used

    def try_acquire(self) -> Slot | None:
        """A slot, or None at once when all are taken."""
        with self._lock:
            if self._used >= self.capacity:
                return None
            self._used += 1
            if self._freed:  # the slot freed last is the one a prompt push fills
                self._last_wait = self._clock() - self._freed.pop()
            return Slot(self)

    def push_gap(self) -> float:
        """Seconds pushes have been leaving freed slots free: the longest a slot free now
        has waited; with one slot (the caller's own, held), how long it waited for the
        push that filled it last. 0 before any slot was freed (a cold start's first
        pushes are not a gap). Pushes that keep coming (a backlog Pub/Sub is delivering)
        keep it near zero; refused or backed-off ones let it grow. What a slot waited
        before it was filled is not counted with more slots: after a lull with nothing to
        do, the first pushes would read as a gap however promptly the next ones come."""
        with self._lock:
            if self.capacity > 1:
                return self._clock() - self._freed[0] if self._freed else 0.0
            return self._last_wait

    def _release(self) -> None:
        with self._lock:
            self._used -= 1
            self._freed.append(self._clock())


_pool: Slots | None = None
_pool_lock = threading.Lock()


def get_slots(capacity: int) -> Slots:
    """The process's pool, created on first use with the configured capacity."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Slots(capacity)
        return _pool
