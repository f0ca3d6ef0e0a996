"""The throughput row's steady rate (bench.throughput.steady_rate): completions between
the 10th and the 90th percentile, so a slow start and a tail do not weigh on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.throughput import steady_rate

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_the_steady_rate_leaves_out_a_slow_start_and_a_tail() -> None:
    slow_start = [T0 + timedelta(seconds=i) for i in range(10)]  # 1 a second
    steady = [T0 + timedelta(seconds=10 + i / 100) for i in range(80)]  # 100 a second
    tail = [T0 + timedelta(seconds=12 + i) for i in range(10)]
    rate = steady_rate([*tail, *steady, *slow_start])  # in any order
    assert rate is not None and 90 <= rate <= 100
    end_to_end = 100 / (tail[-1] - slow_start[0]).total_seconds()
    assert end_to_end < 5


def test_too_few_completions_or_one_instant_tell_nothing() -> None:
    assert steady_rate([]) is None
    assert steady_rate([T0]) is None
    assert steady_rate([T0] * 20) is None
    assert steady_rate([T0, T0 + timedelta(seconds=2)]) is None
