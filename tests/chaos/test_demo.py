"""local.demo: the pure helpers, then a shortened replay on the real local cloud."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from local.demo import DemoConfig, Rescue, progress_line, run, summary_lines
from local.observe import all_terminal, owner_pid, reclaimed_at, rescued_at

T0 = datetime(2026, 7, 26, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def _record(status: str = "done", **extra: Any) -> dict[str, Any]:
    history = [
        {"at": _at(0), "event": "claimed", "owner": "h-11-aa.1", "attempt": 1},
        {"at": _at(2), "event": "checkpoint", "attempt": 1},
        {"at": _at(9), "event": "rescued", "owner": "h-11-aa.1", "attempt": 1},
        {"at": _at(10), "event": "claimed", "owner": "h-12-bb.4", "attempt": 2},
        {"at": _at(14), "event": "done", "owner": "h-12-bb.4", "attempt": 2},
    ]
    return {"status": status, "attempts": 2, "rescues": 1, "history": history, **extra}


@pytest.mark.parametrize(
    ("owner", "pid"),
    [
        ("host-1234-a1b2c3.7", 1234),
        ("my-long-host-name-42-ffffff.1", 42),
        ("nodots", None),
        ("host-x-abc.1", None),
        (None, None),
        (17, None),
    ],
)
def test_owner_pid(owner: object, pid: int | None) -> None:
    assert owner_pid(owner) == pid


def test_history_times_of_a_rescued_job() -> None:
    rec = _record()
    assert rescued_at(rec, 1) == T0 + timedelta(seconds=9)
    assert reclaimed_at(rec, 1) == T0 + timedelta(seconds=10)
    assert reclaimed_at(rec, 2) is None
    assert reclaimed_at({"history": "garbage"}, 1) is None


def test_rescue_events_are_reported_once() -> None:
    rescue = Rescue(killed={"j1": ("h-11-aa.1", 1)}, kill_at=T0 + timedelta(seconds=3))
    events = rescue.update({"j1": _record()})
    assert len(events) == 2 and "rescued" in events[0] and "attempt 2" in events[1]
    assert rescue.update({"j1": _record()}) == []
    assert rescue.requeued == {"j1": 6.0} and rescue.reclaimed == {"j1": 7.0}


def test_progress_line() -> None:
    line = progress_line({"done": 11, "running": 4, "queued": 7}, 22, 3.25, width=10)
    assert line.startswith("[#####.....]  11/22 terminal")
    assert "queued 7 running 4 done 11" in line and "3.2s" in line


def test_summary_lines_say_what_happened() -> None:
    records = {f"j{i}": _record() for i in range(21)} | {"x": {"status": "running"}}
    rescue = Rescue(killed={"j0": ("h-11-aa.1", 1)}, kill_at=T0)
    rescue.update(records)
    lines = summary_lines(
        records,
        rescue,
        {"read": 30, "write": 60, "delete": 20, "list": 2, "other": 0},
        25,
        {"push_attempts": 40, "push_failures": 15},
        DemoConfig(),
        31.0,
        {
            "instances": {"peak": 2},
            "cold_starts": 3,
            "startup_s": [1.2, 1.5, 1.4],
            "requests": {"refused": 4},
            "billing": {"instance_seconds": 41.3},
        },
    )
    text = "\n".join(lines)
    assert "jobs done        21 / 22" in text
    assert "jobs rescued     21" in text
    assert "rescue took      9.0 s from the SIGKILL to the watchdog's requeue" in text
    assert "re-claimed by a live instance after 10.0 s" in text
    assert "bound: stale_s 8 + sweep every 2 s = 10 s" in text
    assert "GCS calls        112" in text and "list 2" in text
    assert "25 doorbell publishes" in text and "15 refused" in text
    assert "claim peaked at 2 instance(s); 3 cold start(s) (1.2-1.5 s); 4 refused" in text
    assert "41.3 billable instance-seconds" in text
    assert "NOT TERMINAL     1 job(s)" in text
    assert not all_terminal(records)


def test_the_replay_finishes_every_job(tmp_path: Path) -> None:
    """`make demo`, shortened: 8 jobs on 2 x 2 slots, one instance killed mid-batch."""
    out = io.StringIO()
    config = DemoConfig(
        jobs=8,
        concurrency=2,
        stale_seconds=4.0,
        sweep_interval_seconds=1.0,
        sleep_s=0.8,
        kill_after_s=1.0,
        timeout_s=90.0,
        log_dir=tmp_path,
    )
    status = run(config, out)
    text = out.getvalue()
    assert status == 0, text
    assert "SIGKILL claim-" in text and "started (scale-out" in text, text
    assert "Cloud Run        claim peaked at" in text, text
    assert "jobs done        8 / 8" in text, text
    assert "rescue took" in text and "(no job was running" not in text, text
