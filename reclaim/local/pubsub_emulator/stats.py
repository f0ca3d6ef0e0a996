"""Counters for the admin /stats endpoint (totals, per topic, per subscription).

Per subscription there are also gauges (current values, e.g. the push window), and
`info` holds settings worth showing (the push flow control in use).
"""

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
        self._gauges: defaultdict[str, dict[str, Any]] = defaultdict(dict)
        self.info: dict[str, Any] = {}

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

    def gauge(self, name: str, **values: Any) -> None:
        """Set current values of one subscription (not summed into the totals)."""
        with self._lock:
            self._gauges[name].update(values)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            subs = {k: dict(v) for k, v in self._subs.items()}
            for name, gauges in self._gauges.items():
                subs.setdefault(name, {}).update(gauges)
            out = {
                "totals": dict(self._totals),
                "topics": {k: dict(v) for k, v in sorted(self._topics.items())},
                "subscriptions": dict(sorted(subs.items())),
            }
            if self.info:
                out["push_flow_control"] = dict(self.info)
            return out
