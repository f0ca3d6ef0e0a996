"""The sweep's counts and repairs, and the storage seam's name checks, at their edges:
what `make mutate` showed no other fast test pinned. Pure or MemoryStore."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import records, storage, sweeper
from shared.config import Settings
from shared.errors import Unavailable
from shared.features.table import context
from shared.storage import PendingEntry
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell

S = Settings.from_env({}, stale_seconds=60.0, max_attempts=3)
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def put(store: MemoryStore, job_id: str, at: datetime, **fields: Any) -> None:
    record = records.new_record(job_id, "demo", {}, at)
    store.add_pending(job_id)
    store.create({**record, **fields})


# --------------------------------------------------------------------------- sweep counts


def test_every_count_adds_up_over_several_jobs() -> None:
    store, bell = MemoryStore(), Bell()
    old = T0 - timedelta(hours=1)
    for i in range(2):
        put(store, f"lost-bell-{i}", old)  # queued, doorbell lost: requeued and rung
        put(store, f"silent-{i}", old, status="running", attempts=1, owner="gone")  # rescued
        put(store, f"spent-{i}", old, status="running", attempts=3, owner="gone")  # failed
        put(store, f"done-{i}", old, status="done")  # leftover marker: repaired
        store.add_pending(f"orphan-{i}")  # marker without a record, dated by the store
    later = datetime.now(UTC) + timedelta(seconds=3 * S.stale_seconds)
    result = sweeper.run_once(context(store, bell, S), later)
    counts = result.to_json()
    assert (counts["requeued"], counts["rescued"], counts["failed"]) == (2, 2, 2)
    assert (counts["rung"], counts["repaired"], counts["errors"]) == (4, 4, 0)
    assert counts["examined"] == 10


def test_each_error_is_counted() -> None:
    store = MemoryStore()
    put(store, "a", T0)
    put(store, "b", T0)
    # the first read is the index board's: its failure only lists every index (no error)
    store.inject_failure("read", Unavailable("outage"), times=3)
    assert sweeper.run_once(context(store, Bell(), S), T0).errors == 2


def test_elapsed_is_the_runs_own_duration_rounded_to_milliseconds() -> None:
    store = MemoryStore()
    ticks = iter([100.0, 101.23456])  # start and end: no entry to examine
    result = sweeper.run_once(context(store, Bell(), S), T0, monotonic=lambda: next(ticks))
    assert result.elapsed == pytest.approx(1.23456)
    assert result.to_json()["elapsed"] == 1.235


def test_a_run_without_a_given_time_uses_the_clock() -> None:
    store = MemoryStore()
    put(store, "fresh", datetime.now(UTC))
    result = sweeper.run_once(context(store, Bell(), S))
    assert (result.examined, result.errors, result.requeued) == (1, 0, 0)


def test_the_time_budget_stops_a_run_at_its_limit() -> None:
    store = MemoryStore()
    for i in range(3):
        put(store, f"j{i}", T0)
    budget = Settings.from_env({}, stale_seconds=60.0, sweep_max_seconds=1.0)
    ticks = iter([0.0, 0.5, 1.0, 1.5, 9.0])  # start, then one per entry, then the end
    result = sweeper.run_once(context(store, Bell(), budget), T0, monotonic=lambda: next(ticks))
    assert (result.examined, result.truncated) == (2, True)  # exactly at the budget: goes on


@pytest.mark.parametrize(
    ("created", "age_s", "expired"),
    [
        (None, 10_000, False),  # undatable: left (a read per sweep)
        (T0, 120.0, False),  # exactly two stale periods: still a possible submit in flight
        (T0, 120.5, True),
        (T0.replace(tzinfo=None), 120.5, True),  # a naive time is UTC
        (T0, 3.0, False),
    ],
)
def test_a_record_less_marker_expires_after_two_stale_periods(
    created: datetime | None, age_s: float, expired: bool
) -> None:
    entry = PendingEntry("j", created)
    assert sweeper._orphan_marker_expired(entry, T0 + timedelta(seconds=age_s), S) is expired


# --------------------------------------------------------------------------- the seam's names


@pytest.mark.parametrize("limit", [None, 1, 5])
def test_a_listing_limit_is_none_or_positive(limit: int | None) -> None:
    assert storage.check_limit(limit) == limit


@pytest.mark.parametrize("limit", [0, -1, True, 1.0, "3"])
def test_a_bad_listing_limit_is_refused(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit must be a positive integer or None"):
        storage.check_limit(limit)


def test_names_to_ids_keeps_only_direct_children_of_the_prefix() -> None:
    names = ["pending/a", "other/b", "pending/", "pending/c/d", "pending/e"]
    assert storage.names_to_ids(names, "pending/") == ["a", "e"]
    jobs = ["jobs/a.json", "jobs/b.txt", "jobs/c.json", "jobs/.json"]
    assert storage.names_to_ids(jobs, "jobs/", ".json") == ["a", "c"]


@pytest.mark.parametrize(
    ("attempt", "name", "expected"),
    [
        (0, "a.txt", "outputs/j1/0/a.txt"),
        (3, "dir/b.json", "outputs/j1/3/dir/b.json"),
        (1, "x" * 512, "outputs/j1/1/" + "x" * 512),
        (1, "with space.txt", "outputs/j1/1/with space.txt"),
    ],
)
def test_an_output_name_is_keyed_by_job_and_attempt(attempt: int, name: str, expected: str) -> None:
    assert storage.output_object("j1", attempt, name) == expected


@pytest.mark.parametrize(
    ("attempt", "name"),
    [
        (-1, "a"),
        (True, "a"),
        (1.0, "a"),
        (1, ""),
        (1, "../a"),
        (1, "a/./b"),
        (1, "a//b"),
        (1, "/abs"),
        (1, "x" * 513),
        (1, "tab\tin"),
        (1, "del\x7f"),
        (1, 7),
    ],
)
def test_an_unsafe_output_name_or_attempt_is_refused(attempt: Any, name: Any) -> None:
    with pytest.raises(records.InvalidInput, match=r"output name|attempt must be"):
        storage.output_object("j1", attempt, name)


def test_record_id_and_decode_errors_say_what_is_wrong() -> None:
    with pytest.raises(records.InvalidRecord, match=r"^a record must be a JSON object$"):
        storage.record_id([])  # type: ignore[arg-type]
    with pytest.raises(storage.CorruptRecord, match=r"^record j1 is unreadable: record is not"):
        storage.decode_record("j1", b"{nope")
