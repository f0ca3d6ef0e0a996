"""reclaim.local.demo.resume_bounds: what the demo's summary says bounded each hand-back's
resumption, read from the records' history alone (pure; no cloud)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reclaim.local.demo import Rescue, resume_bounds

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)


def _at(s: float) -> str:
    return (T0 + timedelta(seconds=s)).isoformat()


def _job(events: list[tuple[float, str, str, int]]) -> dict[str, Any]:
    return {
        "history": [{"at": _at(t), "event": e, "owner": o, "attempt": a} for t, e, o, a in events]
    }


def test_a_job_that_waited_for_a_busy_slot_counts_from_that_slot_freeing() -> None:
    records = {
        # handed back at 1 s, every slot busy; B's `other` ends at 7 s, B takes it at 7.2 s
        "waited": _job(
            [
                (0, "claimed", "a-1-x.1", 1),
                (1, "handed back", "a-1-x.1", 1),
                (7.2, "claimed", "b-2-y.5", 2),
            ]
        ),
        "other": _job([(0, "claimed", "b-2-y.2", 1), (7, "done", "b-2-y.2", 1)]),
        # handed back at 1 s and taken at 1.3 s by a fresh instance C (nothing ended there)
        "quick": _job(
            [
                (0, "claimed", "a-1-x.2", 1),
                (1, "handed back", "a-1-x.2", 1),
                (1.3, "claimed", "c-3-z.1", 2),
            ]
        ),
        # handed back, never claimed again (yet): not counted
        "waiting": _job([(0, "claimed", "a-1-x.3", 1), (1, "handed back", "a-1-x.3", 1)]),
    }
    jobs = {j: (f"a-1-x.{n}", 1) for n, j in enumerate(("waited", "quick", "waiting"), 1)}
    rescue = Rescue(graceful=True, instance=0, jobs=jobs, at=T0 + timedelta(seconds=0.9))
    slot_freed, free = resume_bounds(rescue, records)
    assert [round(x, 3) for x in slot_freed] == [0.2]
    assert [round(x, 3) for x in free] == [0.3]
