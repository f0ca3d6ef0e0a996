"""Counters for the admin /stats endpoint (totals, per topic, per subscription)."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

TOPIC_COUNTERS = ("published", "dropped")
SUBSCRIPTION_COUNTERS = (
    "delivered",
    "duplicated",
    "acked",
    "nacked",
    "expired",
    "dead_lettered",
    "push_attempts",
    "push_failures",
)


class Stats:
    """Thread-safe counters; cheap enough to bump on every delivery."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: Counter[str] = Counter({k: 0 for k in TOPIC_COUNTERS + SUBSCRIPTION_COUNTERS})
        self._topics: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._subs: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def topic(self, name: str, counter: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._totals[counter] += n
                self._topics[name][counter] += n

    def sub(self, name: str, counter: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._totals[counter] += n
                self._subs[name][counter] += n

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "totals": dict(self._totals),
                "topics": {k: dict(v) for k, v in sorted(self._topics.items())},
                "subscriptions": {k: dict(v) for k, v in sorted(self._subs.items())},
            }
