"""Test-only fault knobs: duplicate deliveries and silently dropped publishes.

Off by default. They let the chaos tests prove the queue survives what the real
service may do (duplicates) and what a lost doorbell looks like (a publish that
answered OK but reached nobody).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any

KNOBS = ("duplicate_fraction", "drop_publish_fraction")


class FaultError(ValueError):
    """A bad knob value; nothing was changed."""


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(f"{name} must be a number between 0 and 1")
    if not 0.0 <= float(value) <= 1.0:
        raise FaultError(f"{name} must be between 0 and 1, got {value}")
    return float(value)


class Faults:
    """Thread-safe knobs with their own seeded random source."""

    def __init__(
        self,
        duplicate_fraction: float = 0.0,
        drop_publish_fraction: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.duplicate_fraction = _fraction("duplicate_fraction", duplicate_fraction)
        self.drop_publish_fraction = _fraction("drop_publish_fraction", drop_publish_fraction)

    def _roll(self, fraction: float) -> bool:
        if fraction <= 0.0:
            return False
        with self._lock:
            return self._rng.random() < fraction

    def should_duplicate(self) -> bool:
        return self._roll(self.duplicate_fraction)

    def should_drop_publish(self) -> bool:
        return self._roll(self.drop_publish_fraction)

    def update(self, changes: Mapping[str, Any]) -> dict[str, float]:
        """Apply {"duplicate_fraction":..,"drop_publish_fraction":..,"seed":..} all or nothing."""
        unknown = sorted(set(changes) - {*KNOBS, "seed"})
        if unknown:
            raise FaultError(f"unknown fault knob(s): {', '.join(unknown)}")
        checked = {k: _fraction(k, v) for k, v in changes.items() if k in KNOBS}
        seed = changes.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise FaultError("seed must be an integer")
        with self._lock:
            for key, value in checked.items():
                setattr(self, key, value)
            if seed is not None:
                self._rng.seed(seed)
        return self.snapshot()

    def snapshot(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in KNOBS}
