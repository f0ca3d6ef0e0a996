"""reclaim.local.demo_pools: the summary's verdict (pure), then a shortened run on the local
cloud."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reclaim.local.demo_pools import PoolsDemoConfig, Run, Wave, run_demo, summary

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def _job(created: float, claimed: float, ended: float, status: str = "done") -> dict[str, Any]:
    history = [{"at": _at(claimed), "event": "claimed", "attempt": 1}]
    return {
        "status": status,
        "created_at": _at(created),
        "updated_at": _at(ended),
        "history": history,
    }


def _run(quick_end: float) -> Run:
    records = {
        "r1": _job(0, 0.5, 6.5),
        "r2": _job(0, 0.5, 6.5),
        "r3": _job(0, 6.6, 12.6),  # the last render starts at 6.6 s
        "q1": _job(2, 2.05, 2.1),
        "q2": _job(4, 4.05, quick_end),
    }
    return Run(["r1", "r2", "r3"], [Wave(["q1"], 1), Wave(["q2"], 1)], records)


def test_quick_jobs_that_end_before_the_last_render_starts_hold() -> None:
    lines, held = summary(_run(quick_end=4.1))
    assert held
    assert "quick jobs that ended before the last render even started: 2/2" in lines
    assert "renders still queued as each quick wave ended: 1, 1" in lines


def test_a_quick_job_that_waited_for_the_renders_fails_the_demo() -> None:
    lines, held = summary(_run(quick_end=7.0))  # it ended after r3 started
    assert not held
    assert "quick jobs that ended before the last render even started: 1/2" in lines


def test_a_job_not_done_fails_the_demo() -> None:
    run = _run(quick_end=4.1)
    run.records["r3"]["status"] = "failed"
    assert not summary(run)[1]


def test_a_short_run_on_the_local_cloud(tmp_path: Path) -> None:
    out = io.StringIO()
    config = PoolsDemoConfig(
        renders=3, render_s=4.0, waves=2, per_wave=2, wave_gap_s=1.0, log_dir=tmp_path
    )
    assert run_demo(config, out) == 0, out.getvalue()
    assert "quick jobs never waited behind heavy ones" in out.getvalue()
