"""The bench's two lanes (bench.lanes): which entries run beside the others, the ports
each lane may hand out, and how the table says what was measured beside."""

from __future__ import annotations

from bench import lanes
from bench.__main__ import LONG, ORDER
from bench.common import row
from bench.report import markdown


def test_every_lane_entry_is_a_benchmark_and_none_is_both() -> None:
    assert set(lanes.BESIDE) <= set(ORDER)
    assert set(lanes.LAST) <= set(ORDER)
    assert not set(lanes.BESIDE) & set(lanes.LAST)
    assert not set(lanes.BESIDE) & set(LONG)


def test_a_plain_run_splits_into_two_lanes_the_sensitive_entries_last() -> None:
    plain = [n for n in ORDER if n not in LONG]
    timed, beside = lanes.split(plain)
    assert sorted(timed + beside) == sorted(plain)
    assert beside == [n for n in plain if n in lanes.BESIDE]  # in the table's order
    assert timed[-len(lanes.LAST) :] == list(lanes.LAST)
    assert "throughput" in timed and "rollout" in timed and "calls" in beside


def test_a_run_that_would_leave_a_lane_empty_runs_in_one_process_in_its_order() -> None:
    assert lanes.split(["cost", "calls"]) == (["cost", "calls"], [])
    assert lanes.split(["imports", "rollout"]) == (["imports", "rollout"], [])
    assert lanes.split(["throughput"]) == (["throughput"], [])


def test_the_lanes_take_disjoint_halves_of_the_port_block() -> None:
    assert lanes.port_blocks("") == ("0/2", "1/2")
    # inside a pytest-xdist worker's block 3 of 6: the two halves of that block
    mine, theirs = lanes.port_blocks("3/6")
    assert (mine, theirs) == ("6/12", "7/12")


def test_the_table_names_the_entries_measured_beside_in_this_run_only() -> None:
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
    assert "(bench/lanes.py: rows judged on counts or on wide bounds): calls." in text
    assert "Kept from earlier runs, measured then: cost (then)." in text
