"""The calls rows' verdict on reads (bench.calls): reads per job are the record and the
workflows parent mark; the pause flag, read once per PAUSE_CACHE_S per claim process,
is judged against its bound over the run's wall time, not per job."""

from __future__ import annotations

from typing import Any

from bench.calls import INSTANCES, _reads, _row, floor_row


def _measured(by_prefix: dict[str, int], jobs: int, wall_s: float) -> dict[str, Any]:
    reads = sum(n for k, n in by_prefix.items() if k.startswith("read "))
    return {
        "jobs": jobs,
        "wall_s": wall_s,
        "per_job": {"write": 6.0, "delete": 1.0, "read": reads / jobs, "list": 1.0},
        "mutations_per_job": 7.0,
        "lost_cas_per_job": 0.0,
        "publishes_per_job": 1.0,
        **_reads(by_prefix, jobs, wall_s),
    }


def test_the_pause_flag_is_bounded_by_time_not_counted_per_job() -> None:
    seen = {"read jobs/": 8, "read workflows/": 8, "read paused/": 4, "write jobs/": 40}
    m = _reads(seen, jobs=8, wall_s=5.0)
    assert m["job_reads_per_job"] == 2.0
    assert m["pause_flag_reads"] == 4
    assert m["pause_flag_bound"] == INSTANCES * 3  # floor(5 / 2) + 1 per instance
    assert m["reads_by_prefix_per_job"] == {"jobs/": 1.0, "workflows/": 1.0, "paused/": 0.5}


def test_reads_per_job_within_the_budget_meet_it() -> None:
    seen = {"read jobs/": 8, "read workflows/": 8, "read paused/": 4}
    r = _row("GCS calls/job", _measured(seen, jobs=8, wall_s=5.0))
    assert r["met"] is True
    assert "2 reads (jobs/ 1, workflows/ 1) + pause flag 4" in r["figure"]


def test_a_record_read_more_per_job_misses() -> None:
    seen = {"read jobs/": 16, "read workflows/": 8, "read paused/": 2}
    assert _row("GCS calls/job", _measured(seen, jobs=8, wall_s=5.0))["met"] is False


def test_pause_flag_reads_past_their_bound_miss() -> None:
    seen = {"read jobs/": 8, "read workflows/": 8, "read paused/": 40}
    assert _row("GCS calls/job", _measured(seen, jobs=8, wall_s=5.0))["met"] is False


def _class_a(per_job: float, sources: dict[str, float]) -> dict[str, Any]:
    return {"class_a_per_job": per_job, "class_a_by_source": sources}


def test_class_a_is_judged_against_the_floor_claim_s() -> None:
    floor = _class_a(4.0, {"write jobs/": 3.0, "write pending/": 1.0})
    six = _class_a(6.0, {"write jobs/": 5.0, "write pending/": 1.0})
    seven = _class_a(7.0, {"write jobs/": 5.0, "list pending/": 1.0, "write pending/": 1.0})
    assert floor_row("x", six, floor, 1.5, "")["met"] is True
    assert floor_row("x", seven, floor, 1.5, "")["ratio"] == "1.75x the floor"
    assert floor_row("x", seven, floor, 1.5, "")["met"] is False
    assert floor_row("x", _class_a(5.0, {}), floor, 1.25, "")["met"] is True


def test_due_hint_reads_are_bounded_by_time_like_the_pause_flag() -> None:
    seen = {"read jobs/": 8, "read workflows/": 8, "read paused/": 4, "read hints/": 9}
    m = _reads(seen, jobs=8, wall_s=5.0)
    assert m["job_reads_per_job"] == 2.0 and m["due_hint_reads"] == 9
    assert m["due_hint_bound"] == INSTANCES * 6  # floor(5 / 1) + 1 per instance
    assert _row("GCS calls/job", _measured(seen, jobs=8, wall_s=5.0))["met"] is True
    seen["read hints/"] = 13
    assert _row("GCS calls/job", _measured(seen, jobs=8, wall_s=5.0))["met"] is False
