"""Per-process concurrency slots: a job runs only while it holds one.

Acquisition never blocks: with no free slot the caller answers 429 and
Pub/Sub redelivers later, so nothing ever waits in this process's memory.
"""

from __future__ import annotations

import threading
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

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

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
            return Slot(self)

    def _release(self) -> None:
        with self._lock:
            self._used -= 1


_pool: Slots | None = None
_pool_lock = threading.Lock()


def get_slots(capacity: int) -> Slots:
    """The process's pool, created on first use with the configured capacity."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Slots(capacity)
        return _pool
