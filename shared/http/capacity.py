"""An instance's request slots, and the share of them a waiting read may hold.

Cloud Run sends an instance at most its maximum concurrent requests
(`max_instance_request_concurrency`, terraform's `concurrency`); every request in flight
holds one of those slots until it answers, and when every instance of the service is
full at max instances a request waits up to 10 s and is refused with 429
(https://cloud.google.com/run/docs/about-concurrency,
https://cloud.google.com/run/docs/about-instance-autoscaling, "Exceeding maximum
instances"). functions-framework serves the slots with exactly that many gunicorn
threads (THREADS, which terraform sets to the concurrency), one worker process.

A waiting read (GET /jobs/<id>?wait=) holds its slot for as long as it waits, so without
a limit `concurrency x max_instances` waiters would hold every slot and starve submits,
status reads and cron ticks. So each instance lets waits park in at most
`capacity - reserve` of its slots (reserve: a quarter of them, at least one), and:

- a wait that finds no room to park is answered at once, with the job as it is and a
  `Retry-After` saying when to ask again (shared.http.waiting);
- a request other than a wait that takes an instance's last free slot cuts the oldest
  parked wait short, which then answers the same way, so a slot frees for the next one
  (a wait that finds the instance full cuts nobody: it answers at once itself).

The count is this process's own (one gunicorn worker serves every slot), so the rule
holds per instance whatever the platform's routing does. A request that is not a wait
never waits for this module: it only counts itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping

THREADS_ENV = "THREADS"
RESERVE_FRACTION = 0.25
"""The share of an instance's slots that waits never hold (at least one slot)."""


def threads(env: Mapping[str, str]) -> int:
    """The slots of this instance: functions-framework's gunicorn threads (THREADS; its
    own default when unset: four per CPU)."""
    raw = env.get(THREADS_ENV, "").strip()
    if raw.isascii() and raw.isdigit() and 0 < int(raw) <= 10_000:
        return int(raw)
    return (os.cpu_count() or 1) * 4


def reserve_for(capacity: int) -> int:
    """Slots kept free of waits: a quarter of them, at least one."""
    return max(1, math.ceil(capacity * RESERVE_FRACTION))


class Parked:
    """One parked wait: it sleeps here, and the instance may cut it short."""

    def __init__(self) -> None:
        self._cut = threading.Event()

    @property
    def cut(self) -> bool:
        return self._cut.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False when the wait was cut short (answer now)."""
        return not self._cut.wait(max(0.0, seconds))

    def cut_short(self) -> None:
        self._cut.set()


class Capacity:
    """The requests in flight in this process, and its parked waits (oldest first)."""

    def __init__(self, capacity: int, reserve: int | None = None) -> None:
        self.capacity = max(1, capacity)
        self.reserve = reserve_for(self.capacity) if reserve is None else max(0, reserve)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._parked: deque[Parked] = deque()

    @property
    def room(self) -> int:
        """Waits that may park: what the reserve leaves."""
        return max(0, self.capacity - self.reserve)

    @contextlib.contextmanager
    def request(self, *, wait: bool = False) -> Iterator[None]:
        """Count one request in flight. One that is not a `wait` and takes the last free
        slot cuts the oldest parked wait short, so that the next request finds a slot."""
        with self._lock:
            self._in_flight += 1
            if not wait and self._in_flight >= self.capacity:
                self._cut_oldest()
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    @contextlib.contextmanager
    def parking(self) -> Iterator[Parked | None]:
        """A place for one wait, or None when the waits already hold their share of the
        slots (answer at once)."""
        with self._lock:
            if len(self._parked) >= self.room or self._in_flight >= self.capacity:
                parked = None
            else:
                parked = Parked()
                self._parked.append(parked)
        try:
            yield parked
        finally:
            if parked is not None:
                with self._lock, contextlib.suppress(ValueError):
                    self._parked.remove(parked)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "capacity": self.capacity,
                "reserve": self.reserve,
                "in_flight": self._in_flight,
                "parked": len(self._parked),
            }

    def _cut_oldest(self) -> None:
        for parked in self._parked:
            if not parked.cut:
                parked.cut_short()
                return


INSTANCE = Capacity(threads(os.environ))
"""This process's slots (functions/*/main.py count their requests through
shared.http.edge.entry_point)."""
