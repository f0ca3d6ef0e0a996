"""One subscription's backlog and leases: the at-least-once state machine.

Pure apart from the injected `now` values: every method takes the clock reading
so expiry and backoff are testable without sleeping. Not thread-safe; the
broker calls it under its lock.

A message (entry) is ready, delayed (backing off) or leased. Every delivery gets
a fresh ack id. Acking ANY ack id the entry ever had removes it (the service
may honour late acks); a modack only touches the current lease. Duplicate
deliveries (the fault knob) get shadow leases: acking one acks the message,
nacking or expiring one changes nothing.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.policy import SubPolicy, redelivery_delay

_serials = itertools.count(1)


@dataclass(frozen=True)
class Delivery:
    """One message handed to a consumer under one ack id."""

    subscription: str
    ack_id: str
    message: pubsub.PubsubMessage
    delivery_attempt: int | None  # set only when a dead-letter policy exists
    duplicate: bool = False


@dataclass
class Entry:
    """A message as this subscription sees it."""

    key: str
    message: pubsub.PubsubMessage
    publish_ts: float
    failures: int = 0  # nacks + expiries
    state: str = "ready"  # ready | delayed | leased
    gen: int = 0  # invalidates stale queue items
    lease: str | None = None
    ack_ids: set[str] = field(default_factory=set)


@dataclass
class _Lease:
    key: str
    deadline: float
    duplicate: bool
    owner: str | None


class SubState:
    """Backlog + leases of one subscription."""

    def __init__(self, config: pubsub.Subscription, policy: SubPolicy) -> None:
        self.serial = next(_serials)
        self.config = config
        self.policy = policy
        self.entries: dict[str, Entry] = {}
        self._ready: deque[tuple[str, int]] = deque()
        self._delayed: list[tuple[float, int, str, int]] = []
        self._leases: dict[str, _Lease] = {}
        self._lease_heap: list[tuple[float, int, str]] = []
        self._ack_index: dict[str, str] = {}
        self._dups: deque[str] = deque()
        self._owners: Counter[str | None] = Counter()
        self._seq = itertools.count()

    @property
    def name(self) -> str:
        return str(self.config.name)

    # -- intake -----------------------------------------------------------
    def add(self, key: str, message: pubsub.PubsubMessage, publish_ts: float) -> None:
        self.entries[key] = Entry(key, message, publish_ts)
        self._ready.append((key, 0))

    # -- delivery ---------------------------------------------------------
    def outstanding(self, owner: str | None) -> int:
        return self._owners[owner]

    def deliver(
        self,
        limit: int,
        now: float,
        *,
        deadline_s: float,
        owner: str | None = None,
        duplicate: Callable[[], bool] = lambda: False,
    ) -> list[Delivery]:
        """Lease up to `limit` messages: pending duplicates first, then the ready queue."""
        out: list[Delivery] = []
        while self._dups and len(out) < limit:
            entry = self.entries.get(self._dups.popleft())
            if entry is not None:
                out.append(self._lease(entry, now, deadline_s, owner, duplicate=True))
        new_dups: list[str] = []
        while self._ready and len(out) < limit:
            key, gen = self._ready.popleft()
            entry = self.entries.get(key)
            if entry is None or entry.gen != gen or entry.state != "ready":
                continue
            out.append(self._lease(entry, now, deadline_s, owner, duplicate=False))
            if duplicate():
                new_dups.append(key)
        self._dups.extend(new_dups)
        return out

    def _new_ack_id(self) -> str:
        return f"{self.serial}-{next(self._seq)}"

    def _lease(
        self, entry: Entry, now: float, deadline_s: float, owner: str | None, *, duplicate: bool
    ) -> Delivery:
        ack_id = self._new_ack_id()
        deadline = now + deadline_s
        self._leases[ack_id] = _Lease(entry.key, deadline, duplicate, owner)
        heapq.heappush(self._lease_heap, (deadline, next(self._seq), ack_id))
        self._ack_index[ack_id] = entry.key
        entry.ack_ids.add(ack_id)
        self._owners[owner] += 1
        if not duplicate:
            entry.state, entry.lease = "leased", ack_id
        attempt = entry.failures + 1 if self.policy.dead_letter_topic else None
        return Delivery(self.name, ack_id, entry.message, attempt, duplicate)

    def _end_lease(self, ack_id: str) -> _Lease | None:
        lease = self._leases.pop(ack_id, None)
        if lease is not None:
            self._owners[lease.owner] -= 1
        return lease

    # -- consumer answers -------------------------------------------------
    def ack(self, ack_id: str) -> bool:
        """Remove the message this ack id was ever issued for; False if unknown or gone."""
        key = self._ack_index.get(ack_id)
        entry = self.entries.pop(key, None) if key is not None else None
        if entry is None:
            return False
        self._forget(entry)
        return True

    def _forget(self, entry: Entry) -> None:
        for aid in entry.ack_ids:
            self._ack_index.pop(aid, None)
            self._end_lease(aid)
        entry.ack_ids.clear()

    def extend(self, ack_id: str, seconds: int, now: float) -> bool:
        """Modack > 0: move the lease deadline (only a current lease)."""
        lease = self._leases.get(ack_id)
        if lease is None:
            return False
        lease.deadline = now + seconds
        heapq.heappush(self._lease_heap, (lease.deadline, next(self._seq), ack_id))
        return True

    def nack(self, ack_id: str, now: float) -> tuple[bool, Entry | None]:
        """Modack 0: (whether it counted as a nack, the entry if it must be dead-lettered)."""
        lease = self._end_lease(ack_id)
        if lease is None or lease.duplicate:
            return False, None
        return True, self._fail(lease.key, now)

    def _fail(self, key: str, now: float) -> Entry | None:
        entry = self.entries[key]
        entry.lease = None
        entry.failures += 1
        entry.gen += 1
        policy = self.policy
        if policy.dead_letter_topic and entry.failures >= policy.max_delivery_attempts:
            del self.entries[key]
            self._forget(entry)
            return entry
        delay = redelivery_delay(entry.failures, policy)
        if delay <= 0:
            entry.state = "ready"
            self._ready.append((key, entry.gen))
        else:
            entry.state = "delayed"
            heapq.heappush(self._delayed, (now + delay, next(self._seq), key, entry.gen))
        return None

    # -- time -------------------------------------------------------------
    def advance(self, now: float) -> tuple[int, list[Entry]]:
        """Expire due leases and release due backoffs: (expired count, entries to dead-letter)."""
        expired, dead = 0, []
        while self._lease_heap and self._lease_heap[0][0] <= now:
            deadline, _, ack_id = heapq.heappop(self._lease_heap)
            lease = self._leases.get(ack_id)
            if lease is None or lease.deadline != deadline:
                continue
            self._end_lease(ack_id)
            if lease.duplicate:
                continue
            expired += 1
            entry = self._fail(lease.key, now)
            if entry is not None:
                dead.append(entry)
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key, gen = heapq.heappop(self._delayed)
            entry = self.entries.get(key)
            if entry is not None and entry.gen == gen and entry.state == "delayed":
                entry.state = "ready"
                self._ready.append((key, gen))
        return expired, dead

    def next_event(self) -> float | None:
        """Clock reading of the next lease expiry or backoff end, if any."""
        times = []
        if self._lease_heap:
            times.append(self._lease_heap[0][0])
        if self._delayed:
            times.append(self._delayed[0][0])
        return min(times) if times else None

    def backlog(self) -> int:
        return len(self.entries)
