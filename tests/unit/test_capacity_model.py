"""bench.capacity_model (pure) and the burst simulation over it: what a cold bucket
carries, the documented ramp, what sharding adds and what it cannot, and that every
limit names its source page."""

from __future__ import annotations

import pytest

from bench.capacity import simulate, smallest_keeping_up
from bench.capacity_model import (
    LIMITS,
    Deployment,
    assess,
    bucket_factor,
    ceilings,
    job_ops,
    shards_needed,
    slots_needed,
    storage_jobs_per_s,
)


@pytest.mark.parametrize("stages", [1, 3, 10])
def test_one_cold_bucket_carries_1000_over_s_plus_4(stages: int) -> None:
    d = Deployment(stages=stages)
    carried = 1000 / (stages + 4)
    assert storage_jobs_per_s(d) == pytest.approx(carried)
    at = assess(carried, d)
    assert at.carried_from_cold and at.ramp_s == 0
    assert at.writes_per_s == pytest.approx(1000)
    over = assess(carried * 1.01, d)
    assert not over.carried_from_cold
    assert over.binding == "bucket writes"


def test_the_ramp_doubles_no_faster_than_every_20_minutes() -> None:
    assert [bucket_factor(s) for s in (0, 1199, 1200, 2399, 2400, 3600)] == [1, 1, 2, 2, 4, 8]
    d = Deployment(stages=3)
    cold = storage_jobs_per_s(d)
    assert assess(cold * 2, d).ramp_s == 1200  # one doubling
    assert assess(cold * 2.01, d).ramp_s == 2400  # a bit more costs a whole period
    assert assess(cold * 7, d).ramp_s == 3600  # 7x: three doublings


def test_more_bucket_shards_never_carry_less_and_prefixes_add_no_capacity() -> None:
    d = Deployment(stages=3)
    carried = [storage_jobs_per_s(d.with_shards(n)) for n in range(1, 65)]
    assert carried == sorted(carried)
    assert carried[6] == pytest.approx(7 * carried[0])
    prefixes = Deployment(stages=3, shards=16, layout="prefixes")
    assert storage_jobs_per_s(prefixes) == pytest.approx(carried[0])
    assert assess(1000, prefixes).writes_per_s == pytest.approx(7000)  # one bucket takes it all


def test_shards_needed_is_the_ceiling_of_the_write_demand() -> None:
    d = Deployment(stages=3, slots_per_instance=30)
    assert shards_needed(1000, d) == 7
    assert shards_needed(10_000, d) == 70
    assert shards_needed(142, d) == 1


def test_a_flow_control_key_binds_on_its_place_objects() -> None:
    # each place object takes ~1 write/s and a job writes its place twice
    d = Deployment(stages=3, shards=8, max_running_per_key=10)
    assert ceilings(d)["per-object writes"] == pytest.approx(5.0)
    at = assess(6, d)
    assert at.binding == "per-object writes" and not at.carried_from_cold
    assert at.ramp_s is None  # no bucket ramp lifts a per-object limit
    assert shards_needed(6, d) is None


def test_cloud_run_slots_bind_before_buckets_at_the_default_concurrency() -> None:
    d = Deployment(stages=3, shards=100)  # 4 slots x 1,000 instances, 3 s jobs
    assert ceilings(d)["Cloud Run slots"] == pytest.approx(4000 / 3)
    assert assess(2000, d).binding == "Cloud Run slots"
    assert assess(2000, d).ramp_s is None
    assert slots_needed(10_000, d) == 30
    with pytest.raises(ValueError, match="slots_per_instance"):
        Deployment(slots_per_instance=1001)


def test_reads_include_lists_and_writes_include_the_delete() -> None:
    ops = job_ops(3, reads=1.5, lists=2.0)
    assert (ops.writes, ops.reads, ops.class_a) == (7, 3.5, 8.0)
    assert ceilings(Deployment(stages=3))["bucket reads"] == pytest.approx(5000 / job_ops(3).reads)


def test_a_burst_backlog_drains_as_the_ramp_allows() -> None:
    d = Deployment(stages=3)
    r = simulate(1000, d, burst_s=600)
    # 600 s at 1000 - 1000/7 jobs/s builds the backlog; it drains at 1000/7 until the
    # first doubling at 1200 s, at 2000/7 until 2400 s, then at 4000/7
    backlog = 600 * (1000 - 1000 / 7)
    backlog -= 600 * 1000 / 7 + 1200 * 2000 / 7
    expected = 2400 + backlog / (4000 / 7)
    assert r["peak_backlog_jobs"] == round(600 * (1000 - 1000 / 7))
    assert r["caught_up_s"] == pytest.approx(expected, abs=1)
    assert not r["kept_up"]
    assert simulate(1000, d.with_shards(7))["kept_up"]
    assert smallest_keeping_up(1000, d) == 7


def test_more_shards_catch_up_no_later() -> None:
    d = Deployment(stages=3, slots_per_instance=30)
    times = [simulate(10_000, d.with_shards(n))["caught_up_s"] for n in (1, 2, 4, 8, 70)]
    assert all(t is not None for t in times)
    assert times == sorted(times, reverse=True)
    assert times[-1] == 0


def test_every_limit_names_its_source() -> None:
    for name, entry in LIMITS.items():
        assert entry["source"].startswith("https://cloud.google.com/"), name
        assert isinstance(entry["confirmed"], bool) and entry["shown"], name
