"""What `reclaim schedules` and GET /schedules show: each declared schedule with its last
run (the pointer shared.cron.ticks keeps, and that job's status) and its next tick."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.cron import schedules, ticks
from shared.errors import CorruptRecord, NotFound
from shared.pipelines import pipeline_names

if TYPE_CHECKING:
    from shared.storage import Store


def load(path: Path | None = None) -> tuple[schedules.Schedule, ...]:
    """The deployment's schedules, checked against the registered pipelines."""
    return schedules.load(path, pipeline_names())


def find(name: str, path: Path | None = None) -> schedules.Schedule | None:
    return next((s for s in load(path) if s.name == name), None)


def overview(store: Store, now: datetime, path: Path | None = None) -> dict[str, Any]:
    rows = []
    for schedule in load(path):
        last = ticks.last_run(store, schedule.name)
        if last is not None:
            last = {**last, "status": _status(store, str(last["job_id"]))}
        rows.append(
            {
                **schedule.to_json(),
                "last_run": last,
                "next_run": schedule.next_after(now).isoformat(),
            }
        )
    return {"schedules": rows}


def _status(store: Store, job_id: str) -> str:
    try:
        return str(store.read(job_id).record.get("status"))
    except NotFound:
        return "missing"
    except CorruptRecord:
        return "unreadable"
