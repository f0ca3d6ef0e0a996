"""reclaim.local.demo: the pure helpers, then a shortened replay on the real local cloud."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.demo import (
    DemoConfig,
    Rescue,
    Rollout,
    progress_line,
    rollout_lines,
    run,
    summary_lines,
)
from reclaim.local.observe import all_terminal, handed_back_at, owner_pid, reclaimed_at, rescued_at

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
    assert handed_back_at(rec, 1) is None


def _handed_back_record() -> dict[str, Any]:
    history = [
        {"at": _at(0), "event": "claimed", "owner": "h-11-aa.1", "attempt": 1},
        {"at": _at(3.1), "event": "handed back", "owner": "h-11-aa.1", "attempt": 1},
        {"at": _at(4), "event": "claimed", "owner": "h-12-bb.4", "attempt": 2},
        {"at": _at(8), "event": "done", "owner": "h-12-bb.4", "attempt": 2},
    ]
    return {"status": "done", "attempts": 2, "handbacks": 1, "rescues": 0, "history": history}


def test_rescue_events_are_reported_once() -> None:
    hard = Rescue(graceful=False, jobs={"j1": ("h-11-aa.1", 1)}, at=T0 + timedelta(seconds=3))
    events = hard.update({"j1": _record()})
    assert len(events) == 2 and "rescued" in events[0] and "attempt 2" in events[1]
    assert hard.update({"j1": _record()}) == []
    assert hard.requeued == {"j1": 6.0} and hard.reclaimed == {"j1": 7.0}
    soft = Rescue(graceful=True, jobs={"j2": ("h-11-aa.1", 1)}, at=T0 + timedelta(seconds=3))
    events = soft.update({"j2": _handed_back_record()})
    assert "handed back" in events[0] and soft.requeued["j2"] == pytest.approx(0.1)
    assert soft.reclaimed == {"j2": 1.0}


def test_progress_line() -> None:
    line = progress_line({"done": 11, "running": 4, "queued": 7}, 22, 3.25, width=10)
    assert line.startswith("[#####.....]  11/22 terminal")
    assert "queued 7 running 4 done 11" in line and "3.2s" in line


def test_summary_lines_say_what_happened() -> None:
    records = {f"j{i}": _record() for i in range(20)} | {"h": _handed_back_record()}
    records["x"] = {"status": "running"}
    soft = Rescue(
        graceful=True, instance=0, jobs={"h": ("h-11-aa.1", 1)}, at=T0 + timedelta(seconds=3)
    )
    hard = Rescue(graceful=False, instance=1, jobs={"j0": ("h-11-aa.1", 1)}, at=T0)
    soft.update(records)
    hard.update(records)
    lines = summary_lines(
        records,
        [soft, hard],
        {"read": 30, "write": 60, "delete": 20, "list": 2, "other": 0},
        25,
        {"push_attempts": 40, "push_failures": 15},
        DemoConfig(),
        31.0,
        {
            "instances": {"peak": 3},
            "cold_starts": 3,
            "startup_s": [1.2, 1.5, 1.4],
            "scale_ins": 2,
            "requests": {"refused": 4},
            "shutdowns": {"exited": 3, "killed": 1},
            "billing": {"instance_seconds": 41.3},
        },
    )
    text = "\n".join(lines)
    assert "jobs done        21 / 22" in text
    assert "recoveries       1 hand-back(s), 20 staleness rescue(s)" in text
    assert "hand-back        1 of the 1 jobs running on claim-0 at its SIGTERM" in text
    assert "handed back 0.10 s after the SIGTERM" in text and "after 1.0 s (median" in text
    assert "staleness rescue 1 of the 1 jobs running on claim-1 at its SIGKILL" in text
    assert "taken over after 10.0 s (median 10.0 s) once stale" in text
    assert "bound: stale_s 8 + sweep every 2 s = 10 s" in text
    assert "GCS calls        112" in text and "list 2" in text
    assert "25 doorbell publishes" in text and "15 failed" in text
    assert "claim peaked at 3 instance(s); 3 cold start(s) (1.2-1.5 s); 2 scale-in(s)" in text
    assert "4 push(es) refused by the platform (429)" in text
    assert "shutdowns: 3 exited, 1 killed" in text and "41.3 billable instance-seconds" in text
    assert "NOT TERMINAL     1 job(s)" in text
    assert not all_terminal(records)
    rolled = {
        "a": {"result": {"receipt": True}, "history": [{"event": "claimed", "resume": "by name"}]},
        "b": {"result": {"receipt": True}, "history": [{"event": "claimed"}]},
        "c": {"result": {}, "history": []},
    }
    told = "\n".join(rollout_lines(rolled, Rollout("claim-00002-abc", 1.0, 1.25)))
    assert "claim-00002-abc (demo + stage 'receipt') took the traffic 1.2 s after" in told
    assert "2 job(s) ran the added stage; 1 resumed mid-pipeline by stage name" in told
    assert "before the rollout" in rollout_lines(rolled, Rollout())[0]
    quiet = summary_lines(records, [Rescue(graceful=True)], {}, 0, {}, DemoConfig(), 1.0)
    assert any("no job was running on the instance that got SIGTERM" in x for x in quiet)


def test_the_replay_finishes_every_job(tmp_path: Path) -> None:
    """`make demo`, shortened: 8 jobs on 2 x 2 slots, one instance reclaimed gracefully
    (its jobs handed back), another killed hard (its jobs rescued once stale)."""
    out = io.StringIO()
    config = DemoConfig(
        jobs=8,
        concurrency=2,
        stale_seconds=4.0,
        sweep_interval_seconds=1.0,
        idle_timeout_seconds=1.0,
        sleep_s=0.8,
        reclaim_after_s=1.0,
        kill_after_s=1.0,
        rollout_after_s=0.5,
        timeout_s=90.0,
        log_dir=tmp_path,
    )
    status = run(config, out)
    text = out.getvalue()
    assert status == 0, text
    assert "SIGTERM claim-" in text and "SIGKILL claim-" in text, text
    assert "started (scale-out" in text and "Cloud Run        claim peaked at" in text, text
    assert "jobs done        8 / 8" in text, text
    assert "hand-back        " in text and "staleness rescue " in text, text
    assert "(no job was running" not in text, text
    assert "rollout: claim-" in text and "rollout          claim-" in text, text
