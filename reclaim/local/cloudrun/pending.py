"""The pending queue: requests waiting for a free slot, first come first served.

At max_instances, or while instances start, Cloud Run holds a request for up to
max(10 s, 3.5 x the average start-up time), then answers 429 itself
(https://cloud.google.com/run/docs/about-instance-autoscaling, "Exceeding maximum
instances"); the application never sees it. Waiters are handed a slot by the
service (under its lock) as slots free or instances become ready; one that is
not served in time leaves the queue and is refused.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Waiter(Generic[T]):
    """One pending request; `grant` hands it what it waited for."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.granted: T | None = None
        self._event = threading.Event()

    def grant(self, value: T) -> None:
        self.granted = value
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """True once granted (or cancelled); False if the timeout passed first."""
        return self._event.wait(max(0.0, timeout))

    def cancel(self) -> None:
        """Wake the waiter empty-handed (the platform is stopping)."""
        self._event.set()


class PendingQueue(Generic[T]):
    """FIFO of waiters; the caller serialises access (the service's lock)."""

    def __init__(self) -> None:
        self._waiters: deque[Waiter[T]] = deque()
        self.peak = 0

    def __len__(self) -> int:
        return len(self._waiters)

    def __iter__(self) -> Iterator[Waiter[T]]:
        return iter(self._waiters)

    def join(self, since: float) -> Waiter[T]:
        waiter: Waiter[T] = Waiter(since)
        self._waiters.append(waiter)
        self.peak = max(self.peak, len(self._waiters))
        return waiter

    def first(self) -> Waiter[T] | None:
        return self._waiters[0] if self._waiters else None

    def pop(self) -> Waiter[T]:
        return self._waiters.popleft()

    def leave(self, waiter: Waiter[T]) -> bool:
        """Take a waiter out (it gave up); False if it was already served."""
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return False
        return True

    def cancel_all(self) -> None:
        while self._waiters:
            self._waiters.popleft().cancel()
