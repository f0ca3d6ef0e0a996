"""The claim function over HTTP: functions-framework processes (two "instances")
on fake-gcs-server and the Pub/Sub emulator. Deliveries are posted by the test,
so each case controls exactly which instance sees which doorbell."""

from __future__ import annotations

import base64
import json
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.procs import signal_group, stop
from shared import records
from shared.storage import pending_object
from shared.stores.gcs import GcsStore
from tests.integration.function_support import make_queue, start_function

ROOT = Path(__file__).resolve().parents[2]
STALE_S = 3.0


@dataclass
class Env:
    store: GcsStore
    bucket: Any
    sub: str
    a: str
    b: str
    a_proc: Any
    env: dict[str, str]


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, subscriber: Any, log_dir: Path
) -> Iterator[Env]:
    queue = make_queue(
        "claim",
        emulator_env,
        gcs_client,
        publisher,
        subscriber,
        {
            "RECLAIM_STALE_SECONDS": str(STALE_S),
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_MAX_CONCURRENT": "2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
            "RECLAIM_DRAIN_MAX_JOBS": "0",
            "THREADS": "6",
        },
    )
    bucket, sub, env = queue.bucket, queue.sub, queue.env
    a_proc, a = start_function("claim", "claim", env, log_dir)
    b_proc, b = start_function("claim", "claim", env, log_dir)
    try:
        yield Env(GcsStore(bucket.name, client=gcs_client), bucket, sub, a, b, a_proc, env)
    finally:
        for proc in (a_proc, b_proc):
            signal_group(proc, signal.SIGCONT)
            stop(proc)


def submit(env: Env, payload: dict[str, Any], **kw: Any) -> str:
    job_id = records.new_job_id()
    env.store.add_pending(job_id)
    env.store.create(records.new_record(job_id, "demo", payload, datetime.now(UTC), **kw))
    return job_id


def envelope(job_id: str) -> dict[str, Any]:
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    return {
        "message": {
            "data": data,
            "attributes": {"job_id": job_id},
            "messageId": uuid.uuid4().hex[:12],
            "publishTime": "2026-01-01T00:00:00Z",
        },
        "subscription": "projects/reclaim-test/subscriptions/reclaim-claim",
    }


def ring(url: str, job_id: str, timeout: float = 60) -> requests.Response:
    return requests.post(url, json=envelope(job_id), timeout=timeout)


def names(env: Env, prefix: str = "") -> list[str]:
    return sorted(b.name for b in env.bucket.client.list_blobs(env.bucket.name, prefix=prefix))


def generations(env: Env) -> dict[str, int]:
    blobs = env.bucket.client.list_blobs(env.bucket.name)
    return {b.name: b.generation for b in blobs}


def wait_for(check: Any, timeout: float = 20, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def events(env: Env, job_id: str) -> list[str]:
    return [e["event"] for e in env.store.read(job_id).record["history"]]


# ------------------------------------------------------------------ running


def test_a_delivery_runs_the_job_to_done(cloud: Env) -> None:
    job_id = submit(cloud, {"stages": 2, "output": True})
    resp = ring(cloud.a, job_id)
    assert resp.status_code == 200, resp.text
    assert resp.json()["outcome"] == "done" and resp.json()["attempt"] == 1
    job = cloud.store.read(job_id).record
    assert job["status"] == "done" and job["attempts"] == 1
    assert names(cloud, f"outputs/{job_id}/") == [
        f"outputs/{job_id}/1/stage-0.json",
        f"outputs/{job_id}/1/stage-1.json",
    ]
    assert pending_object(job_id) not in names(cloud, "pending/")
    assert not [n for n in names(cloud, "pending/") if n.endswith(job_id)]


def test_concurrent_claims_of_one_job_have_exactly_one_winner(cloud: Env) -> None:
    job_id = submit(cloud, {"stages": 1, "sleep_s": 0.5})
    urls = [cloud.a, cloud.b, cloud.a, cloud.b]
    with ThreadPoolExecutor(len(urls)) as pool:
        answers = list(pool.map(lambda url: ring(url, job_id), urls))
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    outcomes = sorted(r.json()["outcome"] for r in answers)
    assert outcomes.count("done") == 1
    assert set(outcomes) <= {"done", "raced", "skipped"}
    job = cloud.store.read(job_id).record
    assert job["attempts"] == 1 and events(cloud, job_id).count("claimed") == 1


def test_a_duplicate_doorbell_is_acked_and_does_nothing(cloud: Env) -> None:
    job_id = submit(cloud, {"stages": 1})
    assert ring(cloud.a, job_id).json()["outcome"] == "done"
    before = cloud.store.read(job_id)
    resp = ring(cloud.b, job_id)
    assert resp.status_code == 200 and resp.json()["outcome"] == "skipped"
    assert cloud.store.read(job_id) == before


def test_an_unknown_job_is_acked(cloud: Env) -> None:
    resp = ring(cloud.a, "never-submitted")
    assert resp.status_code == 200 and resp.json()["outcome"] == "missing"


def test_a_direct_caller_beyond_the_concurrency_gets_429_and_the_job_stays_queued(
    cloud: Env,
) -> None:
    """The in-app slot guard. Cloud Run never sends an instance more requests than its
    concurrency (THREADS = RECLAIM_MAX_CONCURRENT on the local Cloud Run too), so pushes
    never meet it; the backlog design does not rely on it (its signal is what arriving
    pushes say, shared.claim.drain). It still matters for whoever calls an instance directly
    with more threads than slots, as this fixture does (THREADS 6, slots 2): the third
    call is refused at once, nothing waits in memory and the record is untouched."""
    long_jobs = [submit(cloud, {"stages": 1, "sleep_s": 2.0}) for _ in range(2)]
    waiting = submit(cloud, {"stages": 1})
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(ring, cloud.b, j) for j in long_jobs]
        wait_for(
            lambda: all(cloud.store.read(j).record["status"] == "running" for j in long_jobs),
            what="both slots taken",
        )
        before = cloud.store.read(waiting)
        resp = ring(cloud.b, waiting, timeout=10)
        assert resp.status_code == 429 and resp.json()["outcome"] == "busy"
        assert int(resp.headers["Retry-After"]) >= 1
        assert cloud.store.read(waiting) == before
        assert [f.result().json()["outcome"] for f in running] == ["done", "done"]
    assert ring(cloud.b, waiting).json()["outcome"] == "done"


def test_stage_errors_requeue_then_fail_with_history(cloud: Env) -> None:
    job_id = submit(cloud, {"stages": 2, "fail_at": 1}, max_attempts=2)
    first = ring(cloud.a, job_id).json()
    assert first["outcome"] == "requeued"
    assert cloud.store.read(job_id).record["checkpoint"]["next_stage"] == 1
    second = ring(cloud.b, job_id).json()
    assert second["outcome"] == "failed" and second["attempt"] == 2
    job = cloud.store.read(job_id).record
    assert job["status"] == "failed" and job["error"]["stage"] == "stage-1"
    assert events(cloud, job_id) == [
        "submitted",
        "claimed",
        "checkpoint",
        "requeued",
        "claimed",
        "failed",
    ]
    assert pending_object(job_id) not in names(cloud, "pending/")
    assert not [n for n in names(cloud, "pending/") if n.endswith(job_id)]


def test_a_zombie_owner_commits_nothing(cloud: Env) -> None:
    """A is frozen mid-stage past stale_s; B re-claims and finishes; A wakes up,
    learns it lost at its first fenced write, and writes nothing."""
    job_id = submit(cloud, {"stages": 2, "sleep_s": [2.5, 0.0], "output": True})
    with ThreadPoolExecutor(1) as pool:
        zombie = pool.submit(ring, cloud.a, job_id)
        wait_for(
            lambda: cloud.store.read(job_id).record["status"] == "running", what="A claimed the job"
        )
        signal_group(cloud.a_proc, signal.SIGSTOP)
        try:
            time.sleep(STALE_S + 1.0)  # A goes silent past stale_s
            winner = ring(cloud.b, job_id)
            assert winner.json()["outcome"] == "done" and winner.json()["attempt"] == 2
            final = cloud.store.read(job_id)
            outputs_before = generations(cloud)
        finally:
            signal_group(cloud.a_proc, signal.SIGCONT)
        late = zombie.result(timeout=60)
    assert late.status_code == 200 and late.json()["outcome"] == "lost"
    assert late.json()["attempt"] == 1
    assert cloud.store.read(job_id) == final  # no write of the zombie landed
    assert generations(cloud) == outputs_before
    assert final.record["result"]["attempt"] == 2
    assert all(n.startswith(f"outputs/{job_id}/2/") for n in names(cloud, f"outputs/{job_id}/"))
    assert all(o.startswith(f"outputs/{job_id}/2/") for o in final.record["result"]["outputs"])


# ------------------------------------------------------------------ bad input


def test_a_binary_cloudevent_is_accepted(cloud: Env) -> None:
    job_id = submit(cloud, {"stages": 1})
    body = envelope(job_id)
    headers = {
        "ce-specversion": "1.0",
        "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
        "ce-source": "//pubsub.googleapis.com/projects/reclaim-test/topics/reclaim-jobs",
        "ce-id": "evt-1",
        "content-type": "application/json",
    }
    resp = requests.post(cloud.a, data=json.dumps(body), headers=headers, timeout=30)
    assert resp.status_code == 200 and resp.json()["outcome"] == "done"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"subscription": "x"}', "no 'message'"),
        (json.dumps({"message": {"data": "!!!", "messageId": "1"}}).encode(), "base64"),
        (
            json.dumps({"message": {"attributes": {"x": "y"}, "messageId": "1"}}).encode(),
            "no job_id",
        ),
        (
            json.dumps(
                {"message": {"attributes": {"job_id": "../etc"}, "messageId": "1"}}
            ).encode(),
            "invalid",
        ),
    ],
)
def test_malformed_deliveries_get_400_and_write_nothing(
    cloud: Env, body: bytes, reason: str
) -> None:
    before = generations(cloud)
    resp = requests.post(
        cloud.a, data=body, headers={"content-type": "application/json"}, timeout=10
    )
    assert resp.status_code == 400
    assert resp.json()["error"] == "bad event" and reason in resp.json()["reason"]
    assert generations(cloud) == before


def test_wrong_method_gets_405(cloud: Env) -> None:
    resp = requests.get(cloud.a, timeout=10)
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST"
    assert resp.json()["error"] == "method not allowed"


def test_bad_settings_answer_500_with_a_clear_log(cloud: Env, log_dir: Path) -> None:
    env = {**cloud.env, "RECLAIM_STALE_SECONDS": "soon"}
    proc, url = start_function("claim", "claim", env, log_dir)
    try:
        resp = ring(url, "any-job", timeout=10)
        assert resp.status_code == 500 and "RECLAIM_STALE_SECONDS" in resp.json()["reason"]
    finally:
        stop(proc)
