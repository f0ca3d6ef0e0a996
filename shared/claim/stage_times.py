"""How long stages take, as this process recorded them: what the SIGTERM path asks before
it lets a running stage finish (shared.claim.shutdown).

On SIGTERM a stage used to be stopped at its next check() and its job handed back, its
partial work thrown away even when the stage would have ended a moment later, well inside
Cloud Run's 10 s grace. A stage whose expected remaining time fits the grace now
finishes, checkpoints and is handed back at the boundary. The expectation comes from the
stage's recorded durations: the last RECENT runs of the same stage (pipeline and stage
name) in this process, their longest. A stage this process has not run yet borrows the
longest recorded stage of its pipeline (the stages of one pipeline tend to be alike; a
wrong guess costs the job its partial stage all the same, handed back from outside at the
finish deadline: shared.claim.shutdown.FINISH_BY_S). Nothing recorded: no guess, the job
is handed back at once, as before. Per process, in memory: nothing to write or read.
"""

from __future__ import annotations

import threading
from collections import deque

RECENT = 20
"""Runs of one stage kept (the longest of them is the expectation)."""
MAX_STAGES = 512
"""Stages remembered per process (the least recently run are forgotten first)."""


class StageTimes:
    """Recent durations per (pipeline, stage), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], deque[float]] = {}

    def record(self, pipeline: str, stage: str, seconds: float) -> None:
        """A run of `stage` of `pipeline` that completed in `seconds`."""
        key = (pipeline, stage)
        with self._lock:
            runs = self._runs.pop(key, None) or deque(maxlen=RECENT)
            runs.append(max(0.0, seconds))
            self._runs[key] = runs  # most recently run last
            while len(self._runs) > MAX_STAGES:
                del self._runs[next(iter(self._runs))]

    def expected(self, pipeline: str, stage: str) -> float | None:
        """How long a run of this stage is expected to take: the longest of its recent
        runs, else the longest recent run of any stage of its pipeline; None when this
        process has run none."""
        with self._lock:
            own = self._runs.get((pipeline, stage))
            if own:
                return max(own)
            borrowed = [max(r) for (p, _s), r in self._runs.items() if p == pipeline and r]
        return max(borrowed) if borrowed else None


STAGE_TIMES = StageTimes()
"""This process's."""
