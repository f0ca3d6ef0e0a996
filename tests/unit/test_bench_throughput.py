"""The throughput row's steady rate (bench.throughput.steady_rate): completions between
the 10th and the 90th percentile, so a slow start and a tail do not weigh on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.spread import Spread
from bench.throughput import cpu_per_job, steady_rate, verdict

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


def test_the_verdict_asks_the_median_the_lowest_repeat_and_the_cpu() -> None:
    good = Spread.of([0.7, 0.66, 0.8, 0.52, 0.9])
    assert verdict(good, 1.4)
    assert not verdict(Spread.of([0.6, 0.64, 0.8, 0.52, 0.9]), 1.4)  # median 0.64
    assert not verdict(Spread.of([0.7, 0.66, 0.8, 0.49, 0.9]), 1.4)  # a repeat at 0.49
    assert not verdict(good, 1.6) and not verdict(good, None)  # CPU past 1.5x, or unknown


def test_cpu_per_job_is_pooled_over_the_repeats() -> None:
    repeats = [
        {
            "framework": {"done": 600, "claim_cpu_s": 6.0},
            "floor": {"done": 600, "claim_cpu_s": 4.0},
        },
        {
            "framework": {"done": 600, "claim_cpu_s": 9.0},
            "floor": {"done": 600, "claim_cpu_s": 6.0},
        },
    ]
    assert cpu_per_job(repeats) == {"framework": 0.0125, "floor": 0.00833, "ratio": 1.5}
    assert cpu_per_job([{"framework": {"done": 0}, "floor": {"done": 0}}])["ratio"] is None
