"""What `reclaim schedules` and GET /schedules show: each declared schedule with its last
run (the pointer shared.cron.ticks keeps, and that job's status) and its next tick."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.cron import schedules, ticks
from shared.errors import CorruptRecord, NotFound
from shared.logs import get_logger
from shared.pipelines import pipeline_names

if TYPE_CHECKING:
    from shared.storage import Store

log = get_logger(__name__)


def load(path: Path | None = None) -> tuple[schedules.Schedule, ...]:
    """The deployment's good schedules, checked against the registered pipelines; a bad
    entry is logged and left out, so the others keep ticking."""
    good, problems = schedules.load_each(path, pipeline_names())
    for name, reason in problems.items():
        log.error("schedule left out", schedule=name, reason=reason)
    return good


def problems(path: Path | None = None) -> dict[str, str]:
    """{entry: reason} for each bad entry of the deployment's schedules file."""
    return schedules.load_each(path, pipeline_names())[1]


def find(name: str, path: Path | None = None) -> schedules.Schedule | str | None:
    """The schedule named `name`; the reason when its entry is bad; None when undeclared."""
    good, problems = schedules.load_each(path, pipeline_names())
    return next((s for s in good if s.name == name), problems.get(name))


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
