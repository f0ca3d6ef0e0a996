"""Hostile and careless input on time and workflows, over HTTP on the local cloud: each
case answers 4xx with a reason and writes nothing (the records bucket is compared before
and after), or behaves as docs/time.md and docs/workflows.md say.

Big integers in every time field; a lone surrogate in unique_key (a batch refused whole)
and undecodable bytes in the CLI's --unique-key; tick times at the calendar's edges and
far in the future; two different ticks of a `skip` schedule at once; a unique key held
while its holder waits for a parent; a batch member depending on a unique-key duplicate;
a batch of duplicates only (no callback); a batch grown after its callback fired.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared.features import workflow_graph as graph
from shared.features.flow_policy import parked_name
from tests import polling
from tests.integration.cloud_support import bucket_state

HEADER = "X-CloudScheduler-ScheduleTime"
SCHEDULES = {
    "schedules": [
        {"name": "minutely", "cron": "* * * * *", "time_zone": "UTC", "pipeline": "demo"},
        {
            "name": "paris",
            "cron": "7 * * * *",
            "time_zone": "Europe/Paris",
            "pipeline": "demo",
        },
        {
            "name": "new-york",
            "cron": "7 * * * *",
            "time_zone": "America/New_York",
            "pipeline": "demo",
        },
        {
            "name": "one-at-a-time",
            "cron": "* * * * *",
            "time_zone": "UTC",
            "pipeline": "shout",
            "overlap": "skip",
        },
    ]
}
HOUR = 3600  # a delayed job stays queued (not due) for the whole module


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    schedules = tmp_path_factory.mktemp("hardening") / "schedules.json"
    schedules.write_text(json.dumps(SCHEDULES))
    with LocalCloud.for_tests(
        max_instances=1,
        concurrency=4,
        stale_seconds=30.0,
        sweep_interval_seconds=0,  # no sweep between a request and the bucket check
        function_env={
            "RECLAIM_PIPELINE_MODULES": "tests.integration.sample_pipelines",
            "RECLAIM_SCHEDULES_FILE": str(schedules),
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
        },
    ) as c:
        yield c


wait_for = functools.partial(polling.wait_for, timeout=90, interval=0.3)


def post(cloud: LocalCloud, body: Any) -> requests.Response:
    return requests.post(cloud.endpoints["jobs"], json=body, timeout=60)


def tick(cloud: LocalCloud, name: str, header: str) -> requests.Response:
    url = f"{cloud.endpoints['submit']}/schedules/{name}/tick"
    return requests.post(url, headers={HEADER: header}, timeout=60)


def get(cloud: LocalCloud, path: str) -> requests.Response:
    return requests.get(f"{cloud.endpoints['submit']}{path}", timeout=30)


def refused(resp: requests.Response, code: int, words: str) -> None:
    assert resp.status_code == code, resp.text
    body = resp.json()
    assert body["error"] and words in body["reason"], body


def held_key(cloud: LocalCloud) -> tuple[str, str]:
    """A unique key held by a delayed job (queued, not due for an hour): (key, its id)."""
    key = f"held-{uuid.uuid4().hex[:8]}"
    resp = post(cloud, {"pipeline": "demo", "unique_key": key, "delay_seconds": HOUR})
    assert resp.status_code == 202, resp.text
    return key, resp.json()["id"]


# ------------------------------------------------------------------ 1. big integers


@pytest.mark.parametrize(
    "field", ["delay_seconds", "ttl_seconds", "timeout_seconds", "unique_for_seconds"]
)
@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_big_integer_in_a_time_field_is_400_and_writes_nothing(
    cloud: LocalCloud, field: str, value: int
) -> None:
    job = {"pipeline": "demo", field: value, "id": f"big-{uuid.uuid4().hex[:8]}"}
    if field == "unique_for_seconds":
        job["unique_key"] = f"big-{uuid.uuid4().hex[:8]}"
    before = bucket_state(cloud)
    refused(post(cloud, job), 400, f"{field} must be from")
    refused(post(cloud, {"jobs": [{"pipeline": "demo"}, job]}), 400, f"jobs[1].{field}")
    assert bucket_state(cloud) == before


# ------------------------------------------------------------------ 2. keys


def test_a_lone_surrogate_in_unique_key_refuses_the_whole_batch(cloud: LocalCloud) -> None:
    good = f"good-{uuid.uuid4().hex[:8]}"
    before = bucket_state(cloud)
    resp = post(
        cloud,
        {"jobs": [{"pipeline": "demo", "id": good}, {"pipeline": "demo", "unique_key": "\ud800"}]},
    )
    refused(resp, 400, "jobs[1].unique_key has text that is not valid Unicode")
    refused(post(cloud, {"pipeline": "demo", "unique_key": "a\udfffb"}), 400, "not valid Unicode")
    assert bucket_state(cloud) == before
    assert get(cloud, f"/jobs/{good}").status_code == 404


def test_the_cli_refuses_undecodable_bytes_in_unique_key_with_a_message(tmp_path: Path) -> None:
    argv = [sys.executable.encode(), b"-m", b"reclaim.cli", b"submit", b"demo"]
    done = subprocess.run(
        [*argv, b"--unique-key", b"nightly-\xff\xfe"],
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, err
    assert "--unique-key" in err and "not valid Unicode" in err and "Traceback" not in err


# ------------------------------------------------------------------ 3, 4. tick times


@pytest.mark.parametrize("name", ["minutely", "paris", "new-york"])
@pytest.mark.parametrize("header", ["9999-12-31T23:07:00Z", "0001-01-01T00:07:00Z"])
def test_a_tick_at_the_edge_of_the_calendar_is_400(
    cloud: LocalCloud, name: str, header: str
) -> None:
    before = bucket_state(cloud)
    resp = tick(cloud, name, header)
    assert resp.status_code == 400, resp.text
    assert resp.json()["reason"], resp.text
    assert bucket_state(cloud) == before


def test_a_far_future_tick_is_refused_and_never_becomes_the_last_run(cloud: LocalCloud) -> None:
    ahead = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(days=2)
    before = bucket_state(cloud)
    refused(tick(cloud, "minutely", ahead.strftime("%Y-%m-%dT%H:%M:%SZ")), 400, "just come")
    assert bucket_state(cloud) == before
    listed = {s["name"]: s for s in get(cloud, "/schedules").json()["schedules"]}
    assert listed["minutely"]["last_run"] is None
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    resp = tick(cloud, "minutely", now.strftime("%Y-%m-%dT%H:%M:%SZ"))  # the window's inside
    assert resp.status_code == 202, resp.text


# ------------------------------------------------------------------ 5. overlap skip


def test_two_ticks_of_a_skip_schedule_at_once_create_one_run(cloud: LocalCloud) -> None:
    pause = f"{cloud.endpoints['admin']}/pipelines/shout/pause"
    # its runs stay pending (parked) for the whole test; the operator routes take JSON only
    assert requests.post(pause, json={}, timeout=30).status_code == 200
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=20)
    headers = [(start + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(12)]
    answers: list[requests.Response] = []
    gate = threading.Barrier(len(headers))

    def one(header: str) -> None:
        gate.wait()
        answers.append(tick(cloud, "one-at-a-time", header))

    threads = [threading.Thread(target=one, args=(h,)) for h in headers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(a.status_code for a in answers) == [200] * 11 + [202], [a.text for a in answers]
    runs = {a.json()["id"] for a in answers if a.json()["created"]}
    assert len(runs) == 1
    assert {a.json()["running"] for a in answers if a.json()["skipped"]} == runs
    pending = [n for n in bucket_state(cloud) if "~cron-one-at-a-time" in n]
    assert len(pending) == 1, pending
    # its doorbell reaches claim, which parks it (the pipeline is paused): wait for that
    # write, so it never lands inside a later test's before-and-after of the buckets
    parked = parked_name("shout", runs.pop())
    polling.wait_for(f"{parked} written", lambda: parked in bucket_state(cloud), timeout=60)


# ------------------------------------------------------------------ 6. unique key, waiting


def test_a_unique_key_is_held_while_its_holder_waits_for_a_parent(cloud: LocalCloud) -> None:
    parent = post(cloud, {"pipeline": "demo", "delay_seconds": HOUR}).json()["id"]
    key = f"child-{uuid.uuid4().hex[:8]}"
    child = post(cloud, {"pipeline": "demo", "depends_on": [parent], "unique_key": key})
    assert child.status_code == 202 and child.json()["status"] == "waiting", child.text
    before = bucket_state(cloud)
    again = post(cloud, {"pipeline": "demo", "unique_key": key})
    assert again.status_code == 200, again.text
    assert again.json()["duplicate_of"] == child.json()["id"]
    assert again.json()["status"] == "waiting"
    assert bucket_state(cloud) == before


# ------------------------------------------------------------------ 7, 8. duplicates in batches


def test_a_member_depending_on_a_duplicate_refuses_the_batch(cloud: LocalCloud) -> None:
    key, holder = held_key(cloud)
    other_key = f"other-{uuid.uuid4().hex[:8]}"
    body = {
        "jobs": [
            {"pipeline": "demo", "id": f"p-{uuid.uuid4().hex[:8]}", "unique_key": key},
            {"pipeline": "demo", "id": f"c-{uuid.uuid4().hex[:8]}", "depends_on": []},
            {"pipeline": "demo", "unique_key": other_key},
        ]
    }
    body["jobs"][1]["depends_on"] = [body["jobs"][0]["id"]]
    before = bucket_state(cloud)
    refused(post(cloud, body), 409, f"depend on {holder!r} instead")
    assert bucket_state(cloud) == before  # the key the batch took for its third job went back
    fresh = post(cloud, {"pipeline": "demo", "unique_key": other_key, "delay_seconds": HOUR})
    assert fresh.status_code == 202 and "duplicate_of" not in fresh.json(), fresh.text


def test_a_batch_of_duplicates_only_writes_no_markers_and_gets_no_callback(
    cloud: LocalCloud,
) -> None:
    key, holder = held_key(cloud)
    batch_id = f"dupes-{uuid.uuid4().hex[:8]}"
    body = {
        "batch_id": batch_id,
        "jobs": [{"pipeline": "demo", "unique_key": key}],
        "on_complete": {"pipeline": "demo"},
    }
    before = bucket_state(cloud)
    resp = post(cloud, body)
    assert resp.status_code == 200 and resp.json()["created"] == 0, resp.text
    assert resp.json()["jobs"][0]["duplicate_of"] == holder
    assert bucket_state(cloud) == before  # no seal, no open marker, no batch marker
    assert get(cloud, f"/jobs/{graph.callback_id(batch_id)}").status_code == 404


# ------------------------------------------------------------------ 9. a batch grown late


def test_a_batch_grown_after_its_callback_fired_is_refused(cloud: LocalCloud) -> None:
    batch_id = f"grown-{uuid.uuid4().hex[:8]}"
    on_complete = {"pipeline": "demo", "payload": {"stages": 1}}
    first = {"pipeline": "demo", "id": f"m1-{uuid.uuid4().hex[:6]}", "payload": {"stages": 1}}
    resp = post(cloud, {"batch_id": batch_id, "jobs": [first], "on_complete": on_complete})
    assert resp.status_code == 202, resp.text

    def fired() -> bool:
        oc = get(cloud, f"/batches/{batch_id}").json().get("on_complete") or {}
        return oc.get("status") == "done"

    wait_for("the callback ran", fired)
    replay = post(cloud, {"batch_id": batch_id, "jobs": [first], "on_complete": on_complete})
    assert replay.status_code == 200, replay.text  # the same jobs again: nothing new
    before = bucket_state(cloud)
    second = {"pipeline": "demo", "id": f"m2-{uuid.uuid4().hex[:6]}", "payload": {"stages": 1}}
    grown = {"batch_id": batch_id, "jobs": [first, second], "on_complete": on_complete}
    refused(post(cloud, grown), 409, "its on_complete callback")
    assert bucket_state(cloud) == before
    assert get(cloud, f"/jobs/{second['id']}").status_code == 404
