"""A figure measured several times: its median, min and max, and the verdict on the
median (pure), so one slow or lucky run on a shared machine cannot flip a row."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Spread:
    """Median, min and max of repeated measurements of one figure."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        got = [float(v) for v in values]
        if not got:
            raise ValueError("a spread needs at least one measurement")
        return cls(float(statistics.median(got)), min(got), max(got), len(got))

    def meets(self, target: float, *, at_least: bool) -> bool:
        """The verdict: the median against the target (>= when at_least, else <=)."""
        return self.median >= target if at_least else self.median <= target

    def shown(self, digits: int = 3) -> str:
        """'0.712 (median of 5; min 0.650, max 0.740)'."""
        f = f"{{:.{digits}f}}"
        return (
            f"{f.format(self.median)} (median of {self.runs}; min {f.format(self.low)}, "
            f"max {f.format(self.high)})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
