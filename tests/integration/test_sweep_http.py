"""The sweep function over HTTP, with claim instances, on fake-gcs-server and the
Pub/Sub emulator: rescue of a killed owner's job, lost doorbells, exhausted
jobs, corrupt and hand-edited records, wrong methods."""

from __future__ import annotations

import base64
import json
import signal
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

from reclaim.local.procs import signal_group, stop
from shared import job_queue, records
from shared.stores.gcs import GcsStore
from tests.integration.function_support import make_queue, start_function

ROOT = Path(__file__).resolve().parents[2]
STALE_S = 3.0


@dataclass
class Env:
    store: GcsStore
    bucket: Any
    sub: str
    sweep: str
    claim: str
    env: dict[str, str]
    log_dir: Path


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, subscriber: Any, log_dir: Path
) -> Iterator[Env]:
    queue = make_queue(
        "sweep",
        emulator_env,
        gcs_client,
        publisher,
        subscriber,
        {
            "RECLAIM_STALE_SECONDS": str(STALE_S),
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_DRAIN_MAX_JOBS": "0",
            "THREADS": "6",
        },
    )
    bucket, sub, env = queue.bucket, queue.sub, queue.env
    sweep_proc, sweep = start_function("sweep", "sweep", env, log_dir)
    claim_proc, claim = start_function("claim", "claim", env, log_dir)
    try:
        yield Env(GcsStore(bucket.name, client=gcs_client), bucket, sub, sweep, claim, env, log_dir)
    finally:
        stop(sweep_proc)
        stop(claim_proc)


LONG_AGO = datetime.now(UTC) - timedelta(minutes=5)


def submit(
    env: Env,
    payload: dict[str, Any] | None = None,
    *,
    at: datetime | None = None,
    max_attempts: int | None = None,
    **fields: Any,
) -> str:
    """A record as submit writes it (marker first), with hand-edited fields on top."""
    job_id = records.new_job_id()
    env.store.add_pending(job_id)
    record = records.new_record(
        job_id, "demo", payload or {"stages": 1}, at or LONG_AGO, max_attempts=max_attempts
    )
    env.store.create({**record, **fields})
    return job_id


def envelope(job_id: str) -> dict[str, Any]:
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    return {"message": {"data": data, "messageId": uuid.uuid4().hex[:12]}}


def sweep(env: Env) -> dict[str, Any]:
    resp = requests.post(env.sweep, timeout=60)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def pulled(subscriber: Any, sub: str, want: set[str], deadline_s: float = 20) -> set[str]:
    """Doorbells pulled (and acked) until `want` is covered or the deadline passes."""
    seen: set[str] = set()
    end = time.monotonic() + deadline_s
    while not want <= seen and time.monotonic() < end:
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 50}, timeout=5)
        if resp.received_messages:
            subscriber.acknowledge(
                request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]}
            )
        seen |= {m.message.attributes["job_id"] for m in resp.received_messages}
    return seen


def generations(env: Env) -> dict[str, int]:
    return {b.name: b.generation for b in env.bucket.client.list_blobs(env.bucket.name)}


def markers(env: Env) -> set[str]:
    return {e.job_id for e in env.store.list_pending()}


@pytest.fixture(autouse=True)
def _serial(cloud: Env) -> Iterator[None]:
    """Each test starts from an empty pending index, so sweep counts are its own."""
    yield
    for job_id in markers(cloud):
        cloud.store.remove_pending(job_id)


def test_a_killed_owners_job_is_rescued_and_finished_elsewhere(cloud: Env, subscriber: Any) -> None:
    victim, url = start_function("claim", "claim", cloud.env, cloud.log_dir)
    job_id = submit(cloud, {"stages": 2, "sleep_s": [2.0, 0.0]}, at=datetime.now(UTC))
    try:
        with ThreadPoolExecutor(1) as pool:
            pending_answer = pool.submit(requests.post, url, json=envelope(job_id), timeout=60)
            end = time.monotonic() + 20
            while cloud.store.read(job_id).record["status"] != "running":
                assert time.monotonic() < end, "the victim never claimed the job"
                time.sleep(0.05)
            signal_group(victim, signal.SIGKILL)  # the platform takes the instance away
            with pytest.raises(requests.ConnectionError):
                pending_answer.result()
    finally:
        stop(victim)
    assert sweep(cloud)["rescued"] == 0  # still fresh: the owner might be alive
    time.sleep(STALE_S + 0.5)
    counts = sweep(cloud)
    assert (counts["rescued"], counts["rung"]) == (1, 1)
    assert job_id in pulled(subscriber, cloud.sub, {job_id})
    job = cloud.store.read(job_id).record
    assert job["status"] == "queued" and job["rescues"] == 1
    answer = requests.post(cloud.claim, json=envelope(job_id), timeout=60).json()
    assert answer["outcome"] == "done" and answer["attempt"] == 2
    assert [e["event"] for e in cloud.store.read(job_id).record["history"]] == [
        "submitted",
        "claimed",
        "rescued",
        "claimed",
        "checkpoint",
        "done",
    ]
    assert job_id not in markers(cloud)


def test_a_lost_doorbell_is_recovered(cloud: Env, subscriber: Any) -> None:
    job_id = submit(cloud)  # queued five minutes ago; nothing was ever published
    counts = sweep(cloud)
    assert (counts["requeued"], counts["rung"]) == (1, 1)
    assert job_id in pulled(subscriber, cloud.sub, {job_id})
    answer = requests.post(cloud.claim, json=envelope(job_id), timeout=60).json()
    assert answer["outcome"] == "done"


def test_an_exhausted_job_becomes_failed_with_its_history(cloud: Env) -> None:
    job_id = submit(cloud, max_attempts=1)
    stored = cloud.store.read(job_id)
    claim = job_queue.claim_fields(stored.record, "gone-instance.1", LONG_AGO)
    cloud.store.update({**stored.record, **claim}, stored.generation)
    counts = sweep(cloud)
    assert counts["failed"] == 1
    job = cloud.store.read(job_id).record
    assert job["status"] == "failed" and job["error"]["type"] == "AttemptsExhausted"
    assert [e["event"] for e in job["history"]] == ["submitted", "claimed", "failed"]
    assert job_id not in markers(cloud)


def test_corrupt_and_hand_edited_records_do_not_crash_sweep(cloud: Env) -> None:
    bad = f"corrupt-{uuid.uuid4().hex[:6]}"
    cloud.store.add_pending(bad)
    cloud.bucket.blob(f"jobs/{bad}.json").upload_from_string(b'{"schema": 1, "id": ')
    garbage = submit(cloud, attempts="many")
    future = submit(
        cloud, status="running", owner="x", attempts=1, updated_at="3000-01-01T00:00:00+00:00"
    )
    no_time = submit(cloud, status="running", owner="x", attempts=1, updated_at=None)
    done = submit(cloud, status="done", result={})
    before = cloud.bucket.get_blob(f"jobs/{bad}.json")
    counts = sweep(cloud)
    assert counts["corrupt"] == [bad] and counts["errors"] == 0
    assert counts["examined"] == 5 and counts["repaired"] == 1  # the done job's marker
    after = cloud.bucket.get_blob(f"jobs/{bad}.json")
    assert after is not None and after.generation == before.generation
    assert bad in markers(cloud)  # reported again next time, until a person acts
    assert cloud.store.read(garbage).record["status"] == "failed"
    assert cloud.store.read(future).record["status"] == "queued"
    assert cloud.store.read(no_time).record["status"] == "queued"
    assert done not in markers(cloud)


def test_two_sweeps_at_once_rescue_once(cloud: Env) -> None:
    job_ids = [submit(cloud, status="running", owner="x", attempts=1) for _ in range(5)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: sweep(cloud), range(2)))
    assert sum(r["rescued"] for r in results) == 5
    assert all(cloud.store.read(j).record["rescues"] == 1 for j in job_ids)


def test_wrong_method_gets_405_and_writes_nothing(cloud: Env) -> None:
    submit(cloud)
    before = generations(cloud)
    for method in ("GET", "PUT", "DELETE"):
        resp = requests.request(method, cloud.sweep, timeout=10)
        assert resp.status_code == 405 and resp.json()["error"] == "method not allowed"
    assert generations(cloud) == before
