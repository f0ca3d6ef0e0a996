"""Time (issue 11) over HTTP on the local cloud: submit, claim and sweep as real functions
on fake-gcs-server and the Pub/Sub emulator, called as Pub/Sub and Cloud Scheduler would.

Delayed jobs do not run early and start on time; a schedule's tick delivered twice is one
job; a `skip` schedule does not overlap; a stage that never calls check() is bounded by
its timeout and its zombie commits nothing; an expired job never runs; racing submits
with one unique key create one job; a leaked unique key is repaired; bad values are 400.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.procs import stop
from shared import timing
from shared.features import table as features
from shared.features import uniqueness
from shared.stores.gcs import GcsStore
from tests.integration.function_support import make_queue, start_function

SCHEDULES = {
    "schedules": [
        {"name": "every-minute", "cron": "* * * * *", "time_zone": "UTC", "pipeline": "demo"},
        {
            "name": "no-overlap",
            "cron": "*/5 * * * *",
            "time_zone": "Europe/Paris",
            "pipeline": "demo",
            "payload": {"stages": 1},
            "overlap": "skip",
        },
        # two bad entries: each refused by name, neither stops the good ones' ticks
        {"name": "gone-pipeline", "cron": "* * * * *", "pipeline": "no-such-pipeline"},
        {"name": "month-end", "cron": "0 0 L * *", "pipeline": "demo"},
    ]
}


@dataclass
class Env:
    store: GcsStore
    sub: str
    submit: str
    claim: str
    sweep: str


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    subscriber: Any,
    log_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    schedules = tmp_path_factory.mktemp("time") / "schedules.json"
    schedules.write_text(json.dumps(SCHEDULES))
    queue = make_queue(
        "time",
        emulator_env,
        gcs_client,
        publisher,
        subscriber,
        {
            "RECLAIM_STALE_SECONDS": "30",
            "RECLAIM_DRAIN_MAX_JOBS": "0",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
            "RECLAIM_PIPELINE_MODULES": "tests.integration.sample_pipelines",
            "RECLAIM_SCHEDULES_FILE": str(schedules),
            "THREADS": "8",
        },
    )
    procs = []
    urls = {}
    try:
        for name in ("submit", "claim", "sweep"):
            proc, urls[name] = start_function(name, name, queue.env, log_dir)
            procs.append(proc)
        store = GcsStore(queue.bucket.name, client=gcs_client)
        store.allow_index_prefixes(features.INDEX_PREFIXES)  # the test reads unique/ itself
        yield Env(store, queue.sub, urls["submit"], urls["claim"], urls["sweep"])
    finally:
        for proc in procs:
            stop(proc)


def post_job(env: Env, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{env.submit}/jobs", json=body, timeout=30)


def deliver(env: Env, job_id: str) -> dict[str, Any]:
    """One doorbell, pushed to claim as Pub/Sub would."""
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    push = {"message": {"data": data, "messageId": uuid.uuid4().hex[:12]}}
    resp = requests.post(env.claim, json=push, timeout=60)
    return {"status": resp.status_code, **(resp.json() if resp.content else {})}


def sweep(env: Env) -> dict[str, Any]:
    resp = requests.post(env.sweep, timeout=60)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def job(env: Env, job_id: str) -> dict[str, Any]:
    resp = requests.get(f"{env.submit}/jobs/{job_id}", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def tick(env: Env, name: str, at: datetime) -> requests.Response:
    return requests.post(
        f"{env.submit}/schedules/{name}/tick",
        headers={"X-CloudScheduler-ScheduleTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")},
        timeout=30,
    )


def test_a_delayed_job_does_not_run_early_and_starts_on_time(cloud: Env) -> None:
    resp = post_job(cloud, {"pipeline": "demo", "delay_seconds": 4})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    run_at = datetime.fromisoformat(job(cloud, job_id)["run_at"])
    assert deliver(cloud, job_id)["status"] == 200  # an early doorbell claims nothing
    assert sweep(cloud)["released"] == 0
    assert job(cloud, job_id)["status"] == "queued" and job(cloud, job_id)["attempts"] == 0
    time.sleep(max((run_at - datetime.now(UTC)).total_seconds(), 0) + 0.2)
    assert sweep(cloud)["released"] == 1  # the sweep tick after run_at rings it
    deliver(cloud, job_id)
    done = job(cloud, job_id)
    claimed = next(e for e in done["history"] if e["event"] == "claimed")
    assert done["status"] == "done"
    assert run_at <= datetime.fromisoformat(claimed["at"]) <= run_at + timedelta(seconds=30)


def test_a_tick_delivered_twice_creates_one_job(cloud: Env) -> None:
    at = datetime.now(UTC).replace(second=0, microsecond=0)
    first, again = tick(cloud, "every-minute", at), tick(cloud, "every-minute", at)
    assert (first.status_code, again.status_code) == (202, 200), first.text
    assert first.json()["id"] == again.json()["id"] == timing.tick_job_id("every-minute", at)
    assert again.json()["created"] is False
    runs = [e.job_id for e in cloud.store.list_pending() if e.job_id.startswith("cron-every")]
    assert runs == [first.json()["id"]]
    listed = requests.get(f"{cloud.submit}/schedules", timeout=30).json()["schedules"]
    assert listed[0]["last_run"]["job_id"] == first.json()["id"]


def test_bad_entries_are_refused_by_name_and_the_good_ones_tick(cloud: Env) -> None:
    at = datetime.now(UTC).replace(second=0, microsecond=0)
    for name, reason in (("gone-pipeline", "no-such-pipeline"), ("month-end", "'L'")):
        bad = tick(cloud, name, at)
        assert bad.status_code == 400, bad.text
        assert name in bad.json()["reason"] and reason in bad.json()["reason"]
    good = tick(cloud, "every-minute", at - timedelta(minutes=3))
    assert good.status_code == 202 and good.json()["created"] is True, good.text
    listed = requests.get(f"{cloud.submit}/schedules", timeout=30).json()["schedules"]
    assert [s["name"] for s in listed] == ["every-minute", "no-overlap"]


def test_a_tick_without_the_header_or_off_the_tick_is_the_newest_tick(cloud: Env) -> None:
    """No X-CloudScheduler-ScheduleTime: the newest tick at or before now; a header that is
    not a tick (a force run): the newest tick at or before it. One job per tick either way."""
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    bare = requests.post(f"{cloud.submit}/schedules/every-minute/tick", timeout=30)
    after = datetime.now(UTC).replace(second=0, microsecond=0)
    assert bare.status_code in (200, 202), bare.text
    ticks_then = {timing.tick_job_id("every-minute", t) for t in (before, after)}
    assert bare.json()["id"] in ticks_then
    t = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=20)
    forced = tick(cloud, "every-minute", t + timedelta(seconds=41))
    on_time = tick(cloud, "every-minute", t)
    assert forced.status_code == 202 and on_time.status_code == 200, forced.text
    assert forced.json()["id"] == on_time.json()["id"] == timing.tick_job_id("every-minute", t)


def test_a_skip_schedule_does_not_overlap(cloud: Env) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    t1 = now - timedelta(minutes=now.minute % 5 + 10)
    t2 = t1 + timedelta(minutes=5)
    first = tick(cloud, "no-overlap", t1)
    assert first.status_code == 202, first.text
    second = tick(cloud, "no-overlap", t2)
    assert second.status_code == 200 and second.json()["skipped"] is True
    assert second.json()["running"] == first.json()["id"]
    assert requests.get(f"{cloud.submit}/jobs/{second.json()['id']}", timeout=30).status_code == 404
    deliver(cloud, first.json()["id"])  # the first run ends: the next tick runs
    assert job(cloud, first.json()["id"])["status"] == "done"
    third = tick(cloud, "no-overlap", t2 + timedelta(minutes=5))
    assert third.status_code == 202 and third.json()["skipped"] is False


def test_a_stage_that_never_checks_is_bounded_and_its_zombie_commits_nothing(
    cloud: Env,
) -> None:
    body = {"pipeline": "nap", "payload": {"nap_s": 5}, "timeout_seconds": 1, "max_attempts": 2}
    job_id = post_job(cloud, body).json()["id"]
    answer: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: answer.update(deliver(cloud, job_id)))
    runner.start()

    def timed_out_yet() -> bool:
        return (cloud.store.read(job_id).record.get("error") or {}).get("type") == "TimedOut"

    # bounded: the timeout is written while the stage still naps (the delivery answers
    # only once the nap is over), not measured against a clock
    while runner.is_alive() and not timed_out_yet():
        time.sleep(0.1)
    assert timed_out_yet(), f"the stage napped to its end unbounded: {answer}"
    timed_out = cloud.store.read(job_id)
    record = timed_out.record
    assert record["status"] == "queued" and record["error"]["type"] == "TimedOut"  # type: ignore[index]
    assert record["error"]["retryable"] is True  # type: ignore[index]
    assert "timed out" in record["history"][-1]["error"]["message"]
    runner.join(30)  # the zombie stage wakes up and tries to go on
    assert answer["status"] == 200 and answer["outcome"] == "lost", answer  # refused at once
    after = cloud.store.read(job_id)
    assert after.generation == timed_out.generation  # it committed nothing
    assert "napped" not in (after.record["checkpoint"].get("state") or {})
    blobs = cloud.store._bucket.client.list_blobs(cloud.store.bucket_name, prefix="outputs/")
    assert [b.name for b in blobs if job_id in b.name] == []


def test_an_expired_job_never_runs(cloud: Env) -> None:
    job_id = post_job(cloud, {"pipeline": "shout", "ttl_seconds": 1}).json()["id"]
    time.sleep(1.2)
    deliver(cloud, job_id)
    ended = job(cloud, job_id)
    assert ended["status"] == "cancelled" and ended["attempts"] == 0
    assert ended["error"]["type"] == "Expired" and ended["result"] is None
    assert "claimed" not in [e["event"] for e in ended["history"]]


def test_two_racing_submits_with_one_unique_key_create_one_job(cloud: Env) -> None:
    key = f"invoice-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda _: post_job(cloud, {"pipeline": "demo", "unique_key": key}), range(8))
        )
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * 7 + [202], [a.text for a in answers]
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 1
    assert {a.json().get("duplicate_of") for a in answers if a.status_code == 200} == ids
    assert {a.json()["status"] for a in answers} <= {"queued", "running", "done"}  # documented


def test_a_leaked_unique_key_is_repaired(cloud: Env) -> None:
    key = f"leak-{uuid.uuid4().hex[:8]}"
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    lock = timing.lock_data("crashed-before-its-record", key, None, long_ago)
    name = timing.unique_lock_name(key)
    cloud.store.put_blob(name, uniqueness._encode(lock), generation=0)
    assert sweep(cloud)["unique_released"] >= 1
    assert name not in [b.name for b in cloud.store.list_blobs(timing.UNIQUE_PREFIX)]
    resp = post_job(cloud, {"pipeline": "demo", "unique_key": key})
    assert resp.status_code == 202 and "duplicate_of" not in resp.json()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"run_at": "2026-06-01T12:00:00"}, "no time zone"),
        ({"run_at": "0001-01-01T00:00:03+03:00"}, "outside the years 1 to 9999"),
        ({"run_at": "2030-06-01T12:00:00Z", "delay_seconds": 5}, "not both"),
        ({"delay_seconds": 40 * 86400}, "delay_seconds must be from"),
        ({"ttl_seconds": -1}, "ttl_seconds must be from"),
        ({"delay_seconds": 60, "ttl_seconds": 30}, "ttl_seconds must exceed"),
    ],
)
def test_bad_time_values_are_400_with_a_reason(
    cloud: Env, fields: dict[str, Any], reason: str
) -> None:
    resp = post_job(cloud, {"pipeline": "demo", **fields})
    assert resp.status_code == 400 and reason in resp.json()["reason"], resp.text
