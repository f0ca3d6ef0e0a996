"""Which markers one sweep run reads (shared.sweep_plan): the whole listing is planned,
only markers that may need action (or fill the read budget) are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import sweep_plan
from shared.config import Settings
from shared.pools import Pool, Pools
from shared.storage import PendingEntry

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def settings(**kw: Any) -> Settings:
    return Settings.from_env({}, **{"stale_seconds": 120.0, **kw})


def entry(
    job_id: str, age_s: float | None, due_age_s: float | None = None, **kw: Any
) -> PendingEntry:
    created = None if age_s is None else NOW - timedelta(seconds=age_s)
    due = None if due_age_s is None else NOW - timedelta(seconds=due_age_s)
    return PendingEntry(job_id, created, due, **{"pipeline": "demo", **kw})


def test_quiet_time_is_the_shortest_stale_time_less_the_clock_slack() -> None:
    assert sweep_plan.quiet_seconds(settings()) == 115.0
    assert sweep_plan.quiet_seconds(settings(stale_seconds=8.0)) == 6.0  # a quarter at most
    pools = Pools.of([Pool("light", pipelines=("webhook",), stale_seconds=60.0)])
    s = settings()
    object.__setattr__(s, "pools", pools)  # cached_property: as if read from the pools file
    assert sweep_plan.quiet_seconds(s) == 55.0


@pytest.mark.parametrize(
    ("age_s", "due_age_s", "needs"),
    [
        (10.0, None, False),  # just submitted: its record cannot be stale yet
        (114.9, None, False),
        (115.0, None, True),
        (600.0, 30.0, False),  # old, but re-rung (or handed back) 30 s ago
        (600.0, 200.0, True),
        (None, None, True),  # cannot be dated: always read
        (None, 10.0, False),
    ],
)
def test_a_marker_may_need_action_once_its_mark_is_older_than_the_quiet_time(
    age_s: float | None, due_age_s: float | None, needs: bool
) -> None:
    e = entry("j", age_s, due_age_s)
    assert sweep_plan.may_need_action(e, NOW, 115.0) is needs


def test_a_naive_time_is_utc() -> None:
    e = PendingEntry("j", (NOW - timedelta(seconds=200)).replace(tzinfo=None))
    assert sweep_plan.may_need_action(e, NOW, 115.0)


def test_an_index_within_the_budget_is_read_whole_in_name_order() -> None:
    entries = [entry("b", 5.0), entry("a", 500.0), entry("c", None)]
    plan = sweep_plan.plan(entries, NOW, settings(), 3)
    assert plan.read == entries and plan.unread == []


def test_an_index_past_the_small_size_reads_only_what_may_need_action_within_the_budget() -> None:
    """Up to READ_WHOLE_MAX markers are read whole; one more and the young ones are not,
    though the budget would take them all (each was a read a run for nothing)."""
    young = [entry(f"y{i:03d}", 5.0) for i in range(sweep_plan.READ_WHOLE_MAX)]
    assert sweep_plan.plan(young, NOW, settings(), 1000).read == young
    old = entry("old", 500.0)
    plan = sweep_plan.plan([*young, old], NOW, settings(), 1000)
    assert plan.read == [old] and len(plan.unread) == sweep_plan.READ_WHOLE_MAX


def test_past_the_budget_only_what_may_need_action_is_read() -> None:
    """The rest of the budget is not filled with young markers: in a backlog that lasts,
    that read the budget every run for nothing the sweep would act on."""
    fresh = [entry(f"f{i:02d}", 100.0 - i) for i in range(20)]  # f00 the oldest
    stale_late = entry("zz", 300.0)  # deep in name order
    stale_early = entry("a-stale", 900.0, due_age_s=400.0)
    rerung = entry("m-rerung", 900.0, due_age_s=20.0)  # old, marked due 20 s ago
    unplaced = entry("y", 1.0, pipeline=None)  # a marker from before: no pipeline
    entries = sorted([*fresh, stale_late, stale_early, rerung, unplaced], key=lambda e: e.job_id)
    plan = sweep_plan.plan(entries, NOW, settings(), 6)
    assert [e.job_id for e in plan.read] == ["a-stale", "zz", "y"]  # the unplaced one too
    unread = sorted(e.job_id for e in plan.unread)
    assert unread == [*(f"f{i:02d}" for i in range(20)), "m-rerung"]  # marked 20 s ago


def test_markers_that_may_need_action_past_the_budget_are_taken_longest_marked_first() -> None:
    entries = [entry(f"s{i}", 1000.0 + i) for i in range(5)]
    plan = sweep_plan.plan(entries, NOW, settings(), 2)
    assert [e.job_id for e in plan.read] == ["s4", "s3"]
    assert len(plan.unread) == 3


def test_markers_of_jobs_re_rung_in_a_row_are_read_after_the_others() -> None:
    """A backlog's re-rung jobs (older marks, longer waits) never hold back a new lost
    doorbell: fewer re-rings first, each group longest-marked first."""
    backlog = [entry(f"b{i}", 5000.0 + i, rerings=2 + i % 2) for i in range(4)]
    fresh_loss = entry("lost", 200.0)
    plan = sweep_plan.plan([*backlog, fresh_loss], NOW, settings(), 3)
    assert [e.job_id for e in plan.read] == ["lost", "b2", "b0"]
