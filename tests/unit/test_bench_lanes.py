"""The bench's two lanes (bench.lanes): which entries run beside the others, the ports
each lane may hand out, and how the table says what was measured beside."""

from __future__ import annotations

from bench import lanes
from bench.__main__ import LONG, ORDER
from bench.common import row
from bench.report import markdown


def _beside() -> set[str]:
    return {n for lane in lanes.BESIDE for n in lane}


def test_every_lane_entry_is_a_benchmark_and_none_is_in_two() -> None:
    assert _beside() <= set(ORDER)
    assert sum(len(lane) for lane in lanes.BESIDE) == len(_beside())
    assert set(lanes.LAST) <= set(ORDER)
    assert not _beside() & set(lanes.LAST)
    assert not _beside() & set(LONG)


def test_a_plain_run_splits_into_lanes_the_sensitive_entries_after_them() -> None:
    plain = [n for n in ORDER if n not in LONG]
    first, beside, last = lanes.split(plain)
    assert sorted(first + [n for lane in beside for n in lane] + last) == sorted(plain)
    assert len(beside) == len(lanes.BESIDE)
    for lane in beside:
        assert lane == [n for n in plain if n in lane]  # each in the table's order
    assert last == [n for n in plain if n in lanes.LAST]
    assert first == ["backlog"] and "throughput" in last and "calls" in beside[1]


def test_a_run_that_would_leave_the_lanes_or_the_timed_entries_empty_runs_in_order() -> None:
    assert lanes.split(["cost", "calls"]) == (["cost", "calls"], [], [])
    assert lanes.split(["imports", "rollout"]) == (["imports", "rollout"], [], [])
    assert lanes.split(["throughput"]) == (["throughput"], [], [])
    # a lane of its own for the beside entry; the timed ones after it, as LAST says
    assert lanes.split(["calls", "imports"]) == ([], [["calls"]], ["imports"])


def test_the_lanes_take_disjoint_parts_of_the_port_block() -> None:
    assert lanes.port_blocks("", 3) == ["0/3", "1/3", "2/3"]
    # inside a pytest-xdist worker's block 3 of 6: three parts of that block
    assert lanes.port_blocks("3/6", 3) == ["9/18", "10/18", "11/18"]


def test_the_table_names_the_entries_measured_beside_whichever_run_measured_them() -> None:
    r = row("a", "1", "1", "1", "1", True)
    results = {
        "run": "now",
        "benchmarks": {
            "calls": {"rows": [r], "run": "now", "lane": "beside"},
            "throughput": {"rows": [r], "run": "now"},
            "cost": {"rows": [r], "run": "earlier", "lane": "beside", "measured_at": "then"},
        },
    }
    text = markdown(results)
    assert "(bench/lanes.py: rows judged on counts or on wide bounds): calls, cost." in text
    assert "Kept from earlier runs, measured then: cost (then)." in text
