"""`reclaim submit --at/--in/--ttl/--timeout/--unique-key` and `reclaim schedules`, as a
subprocess against fake-gcs-server and the Pub/Sub emulator."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared import timing
from tests.cli.cli_support import Cloud


def test_submit_in_waits_outside_pending_and_rings_nothing(cloud: Cloud) -> None:
    answer = cloud.ok("submit", "demo", "--in", "3600", "--ttl", "7200", "--json").json()
    shown = cloud.ok("status", answer["id"], "--json").json()
    run_at = datetime.fromisoformat(shown["run_at"])
    assert timedelta(minutes=59) < run_at - datetime.now(UTC) <= timedelta(hours=1)
    assert datetime.fromisoformat(shown["expires_at"]) > run_at
    assert answer["id"] not in [e.job_id for e in cloud.store.list_pending()]
    assert timing.scheduled_name(answer["id"], run_at) in [
        b.name for b in cloud.store.list_blobs(timing.SCHEDULED_PREFIX)
    ]


def test_submit_at_without_a_zone_is_refused_and_writes_nothing(cloud: Cloud) -> None:
    before = cloud.store.list_jobs()
    refused = cloud.run("submit", "demo", "--at", "2030-01-01T10:00:00")
    assert refused.code == 2 and "no time zone" in refused.err
    assert cloud.run("submit", "demo", "--at", "2030-01-01T10:00:00Z", "--in", "5").code == 2
    assert cloud.store.list_jobs() == before


def test_a_repeated_unique_key_answers_the_holder(cloud: Cloud) -> None:
    first = cloud.ok("submit", "demo", "--unique-key", "k-cli", "--timeout", "60", "--json")
    again = cloud.ok("submit", "demo", "--unique-key", "k-cli", "--json").json()
    assert again["duplicate_of"] == first.json()["id"] and again["created"] is False


def test_schedules_lists_last_and_next_runs(cloud: Cloud, tmp_path: Path) -> None:
    path = tmp_path / "schedules.json"
    entry = {"name": "hourly", "cron": "0 * * * *", "time_zone": "UTC", "pipeline": "demo"}
    path.write_text(json.dumps({"schedules": [entry]}))
    env = {**cloud.env, "RECLAIM_SCHEDULES_FILE": str(path)}
    shown = cloud.run("schedules", "--json", env=env)
    assert shown.code == 0, shown.err
    (row,) = json.loads(shown.out)["schedules"]
    assert row["last_run"] is None and row["next_run"].endswith(":00:00+00:00")
    path.write_text(json.dumps({"schedules": [{**entry, "time_zone": "Mars/Base"}]}))
    bad = cloud.run("schedules", env=env)
    assert bad.code == 2 and "unknown time zone" in bad.err
