"""Cron schedules: loading the one file (a bad one fails with a reason), next/last ticks
in the schedule's zone, and a tick becoming exactly one job (skip never overlaps)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared import job_queue
from shared.config import Settings
from shared.cron import schedules, ticks
from shared.errors import InvalidInput
from shared.features.table import context
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "name": "nightly",
    "cron": "0 3 * * *",
    "time_zone": "Europe/Paris",
    "pipeline": "demo",
    "payload": {"stages": 1},
    "overlap": "skip",
}


def test_the_repos_schedules_file_loads() -> None:
    loaded = schedules.load(ROOT / "pipelines" / "schedules.json", ["demo"])
    assert [s.name for s in loaded] == ["demo-hourly"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "every day"}, "invalid cron expression"),
        ({"time_zone": "Mars/Olympus"}, "unknown time zone"),
        ({"overlap": "queue"}, "overlap must be one of"),
        ({"pipeline": "nope"}, "pipeline 'nope' is unknown"),
        ({"name": "Bad Name"}, "must be lowercase"),
        ({"extra": 1}, "unknown key"),
    ],
)
def test_a_bad_schedules_file_fails_with_a_reason(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "schedules.json"
    path.write_text(json.dumps({"schedules": [{**GOOD, **change}]}))
    with pytest.raises(InvalidInput) as caught:
        schedules.load(path, ["demo"])
    assert reason in caught.value.reason and "schedules[0]" in caught.value.reason


def test_ticks_follow_the_schedules_zone_across_dst() -> None:
    (nightly,) = schedules.parse({"schedules": [GOOD]})
    winter = nightly.next_after(datetime(2026, 1, 10, 12, tzinfo=UTC))
    summer = nightly.next_after(datetime(2026, 7, 10, 12, tzinfo=UTC))
    assert (winter.hour, summer.hour) == (2, 1)  # 03:00 Paris is 02:00Z / 01:00Z
    assert nightly.last_at_or_before(summer) == summer


def test_the_tick_is_the_header_else_the_newest_tick_at_or_before_it_or_now() -> None:
    (nightly,) = schedules.parse({"schedules": [GOOD]})
    tick = datetime(2026, 1, 11, 2, tzinfo=UTC)  # 03:00 Paris
    now = datetime(2026, 1, 11, 9, 30, tzinfo=UTC)
    assert ticks.parse_tick_time(nightly, "2026-01-11T02:00:00Z", now) == tick
    assert ticks.parse_tick_time(nightly, "2026-01-11T02:05:00Z", now) == tick  # force run
    assert ticks.parse_tick_time(nightly, None, now) == tick  # no header (HTTP target)
    assert ticks.parse_tick_time(nightly, "", datetime(2026, 1, 11, 1, 59, tzinfo=UTC)) == (
        datetime(2026, 1, 10, 2, tzinfo=UTC)
    )
    with pytest.raises(InvalidInput):
        ticks.parse_tick_time(nightly, "2026-01-11T02:00:00", now)  # no zone


@pytest.mark.parametrize(
    "cron", ["0 0 L * *", "0 0 5L * *", "0 9 * * MON#2", "0 0 15W * *", "@daily", "0 0 ? * *"]
)
def test_cron_that_cloud_scheduler_refuses_is_refused(cron: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        schedules.parse({"schedules": [{**GOOD, "cron": cron}]})
    assert "nightly" in caught.value.reason and "cron-job-schedules" in caught.value.reason


def test_one_bad_entry_leaves_the_others_working() -> None:
    doc = {
        "schedules": [
            GOOD,
            {**GOOD, "name": "gone", "pipeline": "nope"},
            {**GOOD, "name": "month-end", "cron": "0 0 L * *"},
            {**GOOD, "name": "twice"},
            {**GOOD, "name": "twice", "cron": "5 * * * *"},
            "not an object",
        ]
    }
    good, problems = schedules.parse_each(doc, ["demo"])
    assert [s.name for s in good] == ["nightly"]
    assert set(problems) == {"gone", "month-end", "twice", "schedules[5]"}
    assert "'nope' is unknown" in problems["gone"] and "used twice" in problems["twice"]
    with pytest.raises(InvalidInput):
        schedules.parse(doc, ["demo"])


def test_a_relative_schedules_file_is_read_from_the_deployments_root() -> None:
    """terraform sets RECLAIM_SCHEDULES_FILE=<pipelines package>/schedules.json: the path
    inside the archive, whatever the working directory."""
    got = schedules.schedules_file({"RECLAIM_SCHEDULES_FILE": "pipelines/schedules.json"})
    assert got == ROOT / "pipelines" / "schedules.json" and got.exists()
    assert schedules.schedules_file({"RECLAIM_SCHEDULES_FILE": "/x/s.json"}) == Path("/x/s.json")


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/New_York"])
@pytest.mark.parametrize("header", ["9999-12-31T23:07:00Z", "0001-01-01T00:07:00Z"])
def test_a_tick_at_the_calendars_edge_is_a_reason_not_a_crash(zone: str, header: str) -> None:
    (hourly,) = schedules.parse({"schedules": [{**GOOD, "cron": "7 * * * *", "time_zone": zone}]})
    now = datetime(2026, 1, 11, 2, tzinfo=UTC)
    with pytest.raises(InvalidInput):
        ticks.check_window(ticks.parse_tick_time(hourly, header, now), now, 300)


def test_a_tick_is_accepted_only_within_its_window() -> None:
    now = datetime(2026, 1, 11, 2, tzinfo=UTC)
    for ok in (now, now - timedelta(hours=23), now + timedelta(seconds=300)):
        ticks.check_window(ok, now, 300)
    for bad in (now + timedelta(seconds=301), now + timedelta(days=2), now - timedelta(days=2)):
        with pytest.raises(InvalidInput, match="just come"):
            ticks.check_window(bad, now, 300)


def test_a_tick_delivered_twice_is_one_job_and_skip_does_not_overlap() -> None:
    store, bell = MemoryStore(), Bell()
    (nightly,) = schedules.parse({"schedules": [GOOD]})
    first = datetime(2026, 1, 11, 2, tzinfo=UTC)
    a = ticks.fire(context(store, bell, Settings.from_env({})), nightly, first, first)
    again = ticks.fire(context(store, bell, Settings.from_env({})), nightly, first, first)
    assert a.created and not again.created and a.job_id == again.job_id
    assert len(store.list_pending()) == 1 and bell.rung == [a.job_id]
    second = nightly.next_after(first)
    skipped = ticks.fire(context(store, bell, Settings.from_env({})), nightly, second, second)
    assert skipped.skipped_for == a.job_id and not skipped.created
    stored = store.read(a.job_id)
    done = {**stored.record, **job_queue.claim_fields(stored.record, "o", second)}
    stored = store.update(done, stored.generation)
    done = {**stored.record, **job_queue.done_fields(stored.record, second, {})}
    store.update(done, stored.generation)
    third = nightly.next_after(second)
    ran = ticks.fire(context(store, bell, Settings.from_env({})), nightly, third, third)
    assert ran.created and ticks.last_run(store, "nightly")["job_id"] == ran.job_id  # type: ignore[index]


def test_the_file_is_found_beside_the_deployments_pipelines(tmp_path: Path) -> None:
    assert schedules.schedules_file({"RECLAIM_SCHEDULES_FILE": "/x.json"}) == Path("/x.json")
    found = schedules.schedules_file({"RECLAIM_PIPELINE_MODULES": "pipelines.csv_summary"})
    assert found == ROOT / "pipelines" / "schedules.json"
    assert schedules.schedules_file({"RECLAIM_PIPELINE_MODULES": "no_such_pkg"}) == (
        schedules.DEFAULT_FILE
    )
