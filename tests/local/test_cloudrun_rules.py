"""The local Cloud Run's pure rules: scaling, pending time, billing, settings."""

from __future__ import annotations

import pytest

from reclaim.local.cloudrun.autoscaler import Idle, desired_instances, idle_victims, to_start
from reclaim.local.cloudrun.billing import Meter
from reclaim.local.cloudrun.config import ConfigError, ServiceConfig, billed, pending_timeout
from reclaim.local.cloudrun.pending import PendingQueue


@pytest.mark.parametrize(
    ("demand", "wanted"),
    [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (7, 3), (8, 4), (40, 5)],
)
def test_instances_for_60_percent_of_concurrency(demand: int, wanted: int) -> None:
    """concurrency 4 x 60% = 2.4 requests per instance; max 5."""
    assert desired_instances(demand, 4, 0.6, 0, 5) == wanted


def test_scale_out_starts_the_difference_and_respects_min_and_max() -> None:
    assert (
        to_start(demand=3, active=1, concurrency=4, target=0.6, min_instances=0, max_instances=5)
        == 1
    )
    assert (
        to_start(demand=3, active=2, concurrency=4, target=0.6, min_instances=0, max_instances=5)
        == 0
    )
    assert (
        to_start(demand=0, active=0, concurrency=4, target=0.6, min_instances=2, max_instances=5)
        == 2
    )
    assert (
        to_start(demand=99, active=1, concurrency=1, target=0.6, min_instances=0, max_instances=3)
        == 2
    )
    # the 2nd instance starts while the 1st still has a free slot (3 of 4 busy)
    assert desired_instances(3, 4, 0.6, 0, 10) == 2


def test_only_instances_idle_long_enough_are_removed_keeping_min() -> None:
    views = [
        Idle(0, in_flight=0, idle_since=0.0),
        Idle(1, in_flight=0, idle_since=5.0),
        Idle(2, in_flight=1, idle_since=None),
        Idle(3, in_flight=0, idle_since=9.5),
    ]
    assert idle_victims(views, now=10.0, idle_timeout_s=4.0, min_instances=0) == [0, 1]
    assert idle_victims(views, now=10.0, idle_timeout_s=4.0, min_instances=3) == [0]
    assert idle_victims(views, now=10.0, idle_timeout_s=4.0, min_instances=4) == []
    assert idle_victims(views, now=10.0, idle_timeout_s=20.0, min_instances=0) == []


def test_pending_time_is_ten_seconds_or_three_and_a_half_startups() -> None:
    assert pending_timeout(None) == 10.0
    assert pending_timeout(1.5) == 10.0
    assert pending_timeout(4.0) == pytest.approx(14.0)
    assert ServiceConfig("s", pending_timeout_s=0.5).pending_timeout(4.0) == 0.5


def test_billed_periods_round_up_to_100_ms() -> None:
    assert [billed(x) for x in (0, 0.01, 0.1, 0.1000001, 0.25, 1.0)] == [0, 0.1, 0.1, 0.2, 0.3, 1.0]


def test_the_meter_bills_start_up_requests_and_shutdown_as_periods() -> None:
    m = Meter()
    m.hold(0.0)  # start-up
    m.hold(0.4)  # a request arrives while it starts (the cold start's request)
    m.release(0.42)  # start-up over
    m.release(0.75)  # the request answered: one period of 0.75 s -> 0.8 s
    assert (m.billed_s(5.0), m.periods, m.billing) == (0.8, 1, False)
    m.hold(2.0)  # two overlapping requests: one period, not two
    m.hold(2.1)
    m.release(2.3)
    m.release(2.31)  # 0.31 s -> 0.4 s
    assert m.billed_s(9.0) == pytest.approx(1.2)
    m.hold(10.0)  # shutdown, still open: counted as if it closed now
    assert m.billed_s(10.05) == pytest.approx(1.3)
    assert m.raw_s(10.05) == pytest.approx(0.75 + 0.31 + 0.05)
    with pytest.raises(RuntimeError):
        Meter().release(0.0)


def test_pending_queue_is_first_come_first_served() -> None:
    q: PendingQueue[str] = PendingQueue()
    a, b = q.join(1.0), q.join(2.0)
    assert len(q) == 2 and q.peak == 2 and q.first() is a
    q.pop().grant("slot")
    assert a.wait(0) and a.granted == "slot"
    assert q.leave(b) and not q.leave(b) and len(q) == 0
    assert not b.wait(0)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("concurrency", 0, "concurrency"),
        ("concurrency", 1001, "concurrency"),
        ("max_instances", 0, "max_instances"),
        ("min_instances", 3, "min_instances"),
        ("timeout_s", 3601, "timeout_s"),
        ("idle_timeout_s", -1, "idle_timeout_s"),
        ("shutdown_grace_s", -1, "shutdown_grace_s"),
        ("pending_timeout_s", 0, "pending_timeout_s"),
        ("target_utilization", 1.5, "target_utilization"),
    ],
)
def test_bad_settings_name_the_field(field: str, value: float, named: str) -> None:
    settings = {"max_instances": 2, field: value}
    config = ServiceConfig("svc", **settings)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=named):
        config.validate()
