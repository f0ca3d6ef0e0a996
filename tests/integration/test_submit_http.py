"""The submit function over HTTP: functions-framework in a subprocess, talking to
fake-gcs-server and the Pub/Sub emulator through the official clients."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.procs import stop
from shared.storage import job_object, pending_object
from tests.integration.function_support import make_queue, start_function

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY = 65_536


@dataclass
class Submit:
    url: str
    bucket: Any
    subscription: str


@pytest.fixture(scope="module")
def submit_fn(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, subscriber: Any, log_dir: Path
) -> Iterator[Submit]:
    queue = make_queue(
        "records",
        emulator_env,
        gcs_client,
        publisher,
        subscriber,
        {
            "RECLAIM_MAX_BODY_BYTES": str(MAX_BODY),
            "RECLAIM_MAX_BATCH_JOBS": "20",
            "RECLAIM_STALE_SECONDS": "60",
            "THREADS": "4",
        },
    )
    bucket, sub, env = queue.bucket, queue.sub, queue.env
    proc, url = start_function("submit", "submit", env, log_dir)
    try:
        yield Submit(url, bucket, sub)
    finally:
        stop(proc)


def names(bucket: Any) -> list[str]:
    return sorted(b.name for b in bucket.client.list_blobs(bucket.name))


def post(fn: Submit, body: Any, **kw: Any) -> requests.Response:
    return requests.post(f"{fn.url}/jobs", json=body, timeout=30, **kw)


def pull_job_ids(subscriber: Any, sub: str, want: set[str], deadline_s: float = 20) -> set[str]:
    """Doorbell job ids pulled (and acked) until `want` is covered or the deadline passes."""
    seen: set[str] = set()
    end = time.monotonic() + deadline_s
    while not want <= seen and time.monotonic() < end:
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 50}, timeout=5)
        if resp.received_messages:
            subscriber.acknowledge(
                request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]}
            )
        for m in resp.received_messages:
            assert json.loads(m.message.data) == {"job_id": m.message.attributes["job_id"]}
            seen.add(m.message.attributes["job_id"])
    return seen


def new_id(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ happy paths


def test_health(submit_fn: Submit) -> None:
    resp = requests.get(f"{submit_fn.url}/health", timeout=10)
    assert resp.status_code == 200 and resp.json() == {"ok": True}


def test_the_old_health_path_is_an_unknown_route(submit_fn: Submit) -> None:
    # Cloud Run answers some paths ending in "z" itself, so /healthz never reached
    # the function in production (https://cloud.google.com/run/docs/known-issues);
    # the route is gone, and the path is answered like any other unknown one.
    resp = requests.get(f"{submit_fn.url}/healthz", timeout=10)
    assert resp.status_code == 404
    body = resp.json()
    assert body["error"] == "not found" and "no route /healthz" in body["reason"]
    assert "ok" not in body


def test_submit_creates_record_marker_and_rings(submit_fn: Submit, subscriber: Any) -> None:
    job_id = new_id()
    resp = post(submit_fn, {"pipeline": "demo", "payload": {"stages": 2}, "id": job_id})
    assert resp.status_code == 202, resp.text
    assert resp.json() == {
        "id": job_id,
        "status": "queued",
        "status_url": f"/jobs/{job_id}",
        "created": True,
    }
    stored = names(submit_fn.bucket)
    assert job_object(job_id) in stored and pending_object(job_id) in stored
    assert job_id in pull_job_ids(subscriber, submit_fn.subscription, {job_id})
    view = requests.get(f"{submit_fn.url}/jobs/{job_id}", timeout=10)
    assert view.status_code == 200
    body = view.json()
    assert (body["id"], body["pipeline"], body["status"], body["attempts"]) == (
        job_id,
        "demo",
        "queued",
        0,
    )
    assert body["history"][0]["event"] == "submitted"


def test_same_client_id_twice_is_one_job(submit_fn: Submit) -> None:
    job_id = new_id()
    body = {"pipeline": "demo", "payload": {"stages": 1}, "id": job_id}
    first = post(submit_fn, body)
    blob = submit_fn.bucket.get_blob(job_object(job_id))
    replay = post(submit_fn, body)
    assert (first.status_code, replay.status_code) == (202, 200)
    assert replay.json()["id"] == job_id and replay.json()["created"] is False
    assert [n for n in names(submit_fn.bucket) if job_id in n] == [
        job_object(job_id),
        pending_object(job_id),
    ]
    assert submit_fn.bucket.get_blob(job_object(job_id)).generation == blob.generation

    other = post(submit_fn, {**body, "payload": {"stages": 3}})
    assert other.status_code == 409
    assert other.json()["error"] == "conflict" and job_id in other.json()["reason"]
    after = submit_fn.bucket.get_blob(job_object(job_id))
    assert after.generation == blob.generation
    assert json.loads(after.download_as_bytes())["payload"] == {"stages": 1}


def test_batch_submit_and_batch_view(submit_fn: Submit, subscriber: Any) -> None:
    batch_id = new_id("batch")
    ids = [new_id("piece") for _ in range(4)]
    body = {"batch_id": batch_id, "jobs": [{"pipeline": "demo", "id": i} for i in ids]}
    resp = post(submit_fn, body)
    assert resp.status_code == 202, resp.text
    got = resp.json()
    assert got["batch_id"] == batch_id and got["batch_url"] == f"/batches/{batch_id}"
    assert [j["id"] for j in got["jobs"]] == ids and got["created"] == 4
    assert set(ids) <= pull_job_ids(subscriber, submit_fn.subscription, set(ids))
    stored = names(submit_fn.bucket)
    assert all(f"batches/{batch_id}/{i}" in stored for i in ids)

    view = requests.get(f"{submit_fn.url}/batches/{batch_id}", timeout=10)
    assert view.status_code == 200
    assert view.json()["counts"] == {"queued": 4} and view.json()["done"] is False
    assert sorted(j["id"] for j in view.json()["jobs"]) == sorted(ids)
    assert post(submit_fn, body).status_code == 200  # the whole batch again: nothing new


def test_tags_are_indexed_shown_and_listed_and_bad_ones_write_nothing(
    submit_fn: Submit, gcs_client: Any
) -> None:
    from shared.config import Settings
    from shared.queue import Queue
    from shared.stores.gcs import GcsStore
    from tests.unit.unit_support import Bell

    batch_id, tag = new_id("tagged"), new_id("t").lower()
    ids = [new_id("piece") for _ in range(3)]
    jobs = [
        {"pipeline": "demo", "id": i, **({"tags": [tag]} if n != 1 else {})}
        for n, i in enumerate(ids)
    ]
    assert post(submit_fn, {"batch_id": batch_id, "jobs": jobs}).status_code == 202
    stored = names(submit_fn.bucket)
    assert [n for n in stored if n.startswith(f"tags/{tag}/")] == sorted(
        f"tags/{tag}/{i}" for i in (ids[0], ids[2])
    )
    shown = requests.get(f"{submit_fn.url}/jobs/{ids[0]}", timeout=10).json()
    assert shown["tags"] == [tag]
    members = requests.get(f"{submit_fn.url}/batches/{batch_id}", timeout=10).json()["jobs"]
    assert {m["id"]: m.get("tags") for m in members} == {ids[0]: [tag], ids[1]: None, ids[2]: [tag]}
    store = GcsStore(submit_fn.bucket.name, gcs_client)
    queue = Queue(store, Bell(), Settings.from_env({"RECLAIM_RECORDS_BUCKET": store.bucket_name}))
    listed = queue.list_jobs(where={"tag": tag})
    assert sorted(r["id"] for r in listed.records) == sorted((ids[0], ids[2]))
    assert store.calls["read"] == 2  # the two marked records, not the bucket's history

    before = names(submit_fn.bucket)
    bad = post(submit_fn, {"pipeline": "demo", "id": new_id(), "tags": ["Upper", "ok", "ok"]})
    assert bad.status_code == 400 and "tags: tag 'Upper' is not" in bad.json()["reason"], bad.text
    assert names(submit_fn.bucket) == before


def test_batch_without_id_gets_one(submit_fn: Submit) -> None:
    resp = post(submit_fn, {"jobs": [{"pipeline": "demo"}, {"pipeline": "demo"}]})
    assert resp.status_code == 202
    batch = requests.get(f"{submit_fn.url}{resp.json()['batch_url']}", timeout=10)
    assert batch.status_code == 200 and batch.json()["total"] == 2


# ------------------------------------------------------------------ refusals


def _raw(
    fn: Submit, method: str, path: str, data: Any = None, headers: dict[str, str] | None = None
) -> requests.Response:
    return requests.request(
        method,
        f"{fn.url}{path}",
        data=data,
        timeout=30,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _chunks(total: int) -> Iterator[bytes]:
    yield b'{"pipeline": "demo", "payload": {"pad": "'
    sent = 0
    while sent < total:
        yield b"x" * 8192
        sent += 8192
    yield b'"}}'


REFUSALS = [
    ("POST", "/jobs", b"{not json", {}, 400, "malformed JSON"),
    ("POST", "/jobs", b"", {}, 400, "empty"),
    ("POST", "/jobs", b"[1, 2]", {}, 400, "JSON object"),
    ("POST", "/jobs", b'{"pipeline": 5}', {}, 400, "pipeline must be a string"),
    ("POST", "/jobs", b'{"pipeline": "nope"}', {}, 400, "known: demo, upload-digest"),
    ("POST", "/jobs", b'{"pipeline": "demo", "payload": []}', {}, 400, "payload"),
    ("POST", "/jobs", b'{"pipeline": "demo", "max_attempts": "3"}', {}, 400, "max_attempts"),
    ("POST", "/jobs", b'{"pipeline": "demo", "speed": 1}', {}, 400, "unknown key(s) speed"),
    ("POST", "/jobs", b'{"pipeline": "demo", "id": "a/b"}', {}, 400, "id: job id 'a/b'"),
    ("POST", "/jobs", b'{"pipeline": "demo", "id": "a..b"}', {}, 400, "'..'"),
    ("POST", "/jobs", b'{"pipeline": "demo", "batch_id": "../up"}', {}, 400, "batch id"),
    ("POST", "/jobs", b'{"pipeline": "demo", "payload": {"x": NaN}}', {}, 400, "NaN"),
    (
        "POST",
        "/jobs",
        b'{"jobs": [{"pipeline": "demo", "id": "ok-1"}, {"pipeline": "x"}]}',
        {},
        400,
        "jobs[1].pipeline",
    ),
    ("POST", "/jobs", b'{"pipeline": "demo"}', {"Content-Type": "text/plain"}, 415, "text/plain"),
    (
        "POST",
        "/jobs",
        b'{"pipeline": "demo"}',
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "application/json",
    ),
    ("POST", "/jobs", b"{" + b" " * (MAX_BODY + 10) + b"}", {}, 413, "limit"),
    ("PUT", "/jobs", b'{"pipeline": "demo"}', {}, 405, "PUT"),
    ("DELETE", "/jobs/abc", None, {}, 405, "GET"),
    ("POST", "/jobs/abc", b"{}", {}, 405, "GET"),
    ("GET", "/jobs/a..b", None, {}, 400, "'..'"),
    ("GET", "/jobs/a%2Fb", None, {}, 400, "job id"),
    ("GET", "/jobs/nope-nothing", None, {}, 404, "no job"),
    ("GET", "/batches/nope-nothing", None, {}, 404, "no batch"),
    ("GET", "/batches/x..y", None, {}, 400, "batch id"),
    ("GET", "/elsewhere", None, {}, 404, "no route"),
    ("GET", "/", None, {}, 404, "no route"),
]


@pytest.mark.parametrize(("method", "path", "data", "headers", "status", "reason"), REFUSALS)
def test_bad_input_is_refused_and_writes_nothing(
    submit_fn: Submit,
    method: str,
    path: str,
    data: bytes | None,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    before = names(submit_fn.bucket)
    resp = _raw(submit_fn, method, path, data, headers)
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    body = resp.json()
    assert set(body) >= {"error", "reason"} and reason in body["reason"], body
    if status == 405:
        assert resp.headers["Allow"] in ("GET", "POST", "GET, POST")
    assert names(submit_fn.bucket) == before


def test_chunked_oversize_body_is_413_and_writes_nothing(submit_fn: Submit) -> None:
    before = names(submit_fn.bucket)
    resp = requests.post(
        f"{submit_fn.url}/jobs",
        data=_chunks(MAX_BODY * 2),
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 413 and resp.json()["error"] == "body too large"
    assert names(submit_fn.bucket) == before


def test_batch_over_the_job_limit_writes_nothing(submit_fn: Submit) -> None:
    before = names(submit_fn.bucket)
    resp = post(submit_fn, {"jobs": [{"pipeline": "demo"}] * 21})
    assert resp.status_code == 400 and "at most 20" in resp.json()["reason"]
    assert names(submit_fn.bucket) == before


# ------------------------------------------------------------------ damaged records


def test_corrupt_record_is_reported_and_left_alone(submit_fn: Submit) -> None:
    job_id = new_id("corrupt")
    blob = submit_fn.bucket.blob(job_object(job_id))
    blob.upload_from_string(b'{"schema": 1, "id": "trunc', content_type="application/json")
    generation = submit_fn.bucket.get_blob(blob.name).generation
    resp = requests.get(f"{submit_fn.url}/jobs/{job_id}", timeout=10)
    assert resp.status_code == 409
    assert resp.json()["error"] == "record unreadable" and "left untouched" in resp.json()["reason"]
    again = submit_fn.bucket.get_blob(blob.name)
    assert again.generation == generation
    assert again.download_as_bytes() == b'{"schema": 1, "id": "trunc'
    replay = post(submit_fn, {"pipeline": "demo", "id": job_id})
    assert replay.status_code == 409 and "unreadable" in replay.json()["reason"]
    assert submit_fn.bucket.get_blob(blob.name).generation == generation


def _hand_edit(fn: Submit, job_id: str, **changes: Any) -> None:
    blob = fn.bucket.get_blob(job_object(job_id))
    record = json.loads(blob.download_as_bytes())
    record.update(changes)
    blob.upload_from_string(
        json.dumps(record).encode(),
        content_type="application/json",
        if_generation_match=blob.generation,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"attempts": "many", "history": "lost", "checkpoint": 7},
        {"status": "running", "updated_at": "last tuesday", "attempts": 1, "owner": None},
        {"status": "running", "updated_at": "2999-01-01T00:00:00+00:00", "attempts": 1},
        {"max_attempts": -4, "error": "plain text", "result": [1, 2], "rescues": "x"},
    ],
)
def test_hand_edited_records_do_not_crash_get(submit_fn: Submit, changes: dict[str, Any]) -> None:
    job_id = new_id("edited")
    assert post(submit_fn, {"pipeline": "demo", "id": job_id}).status_code == 202
    _hand_edit(submit_fn, job_id, **changes)
    resp = requests.get(f"{submit_fn.url}/jobs/{job_id}", timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()["id"] == job_id and resp.json()["status"] in ("queued", "running", "failed")


def test_stale_running_job_is_requeued_by_a_status_read(submit_fn: Submit, subscriber: Any) -> None:
    job_id = new_id("stale")
    assert post(submit_fn, {"pipeline": "demo", "id": job_id}).status_code == 202
    pull_job_ids(subscriber, submit_fn.subscription, {job_id})
    _hand_edit(
        submit_fn,
        job_id,
        status="running",
        attempts=1,
        owner="vanished",
        updated_at="2020-01-01T00:00:00+00:00",
    )
    resp = requests.get(f"{submit_fn.url}/jobs/{job_id}", timeout=10)
    assert resp.status_code == 200
    assert resp.json()["status"] == "queued" and resp.json()["watchdog"] == "requeue"
    stored = json.loads(submit_fn.bucket.get_blob(job_object(job_id)).download_as_bytes())
    assert stored["status"] == "queued"
    assert job_id in pull_job_ids(subscriber, submit_fn.subscription, {job_id})


def test_batch_view_with_a_corrupt_member(submit_fn: Submit) -> None:
    batch_id = new_id("mixed")
    ok = new_id("fine")
    assert (
        post(
            submit_fn, {"batch_id": batch_id, "jobs": [{"pipeline": "demo", "id": ok}]}
        ).status_code
        == 202
    )
    bad = new_id("mangled")
    submit_fn.bucket.blob(f"batches/{batch_id}/{bad}").upload_from_string(b"")
    submit_fn.bucket.blob(f"jobs/{bad}.json").upload_from_string(b"\x00\x01")
    resp = requests.get(f"{submit_fn.url}/batches/{batch_id}", timeout=10)
    assert resp.status_code == 200
    assert resp.json()["counts"] == {"queued": 1, "unreadable": 1}


def test_missing_records_bucket_answers_503_not_a_crash(
    emulator_env: dict[str, str], log_dir: Path
) -> None:
    env = {
        **emulator_env,
        "PYTHONPATH": str(ROOT),
        "RECLAIM_PROJECT": "reclaim-test",
        "RECLAIM_RECORDS_BUCKET": f"absent-{uuid.uuid4().hex[:8]}",
        "RECLAIM_JOBS_TOPIC": "absent-topic",
    }
    proc, url = start_function("submit", "submit", env, log_dir)
    try:
        resp = requests.post(f"{url}/jobs", json={"pipeline": "demo"}, timeout=60)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"] == "unavailable" and resp.headers["Retry-After"]
        assert requests.get(f"{url}/health", timeout=10).status_code == 200
    finally:
        stop(proc)


def test_a_deployments_own_pipeline_module_is_accepted(
    submit_fn: Submit, emulator_env: dict[str, str], log_dir: Path
) -> None:
    bucket = submit_fn.bucket
    env = {
        **emulator_env,
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'integration'}",
        "RECLAIM_RECORDS_BUCKET": bucket.name,
        "RECLAIM_PIPELINE_MODULES": "sample_pipelines",
    }
    proc, url = start_function("submit", "submit", env, log_dir)
    try:
        job_id = f"shout-{uuid.uuid4().hex[:8]}"
        body = {"pipeline": "shout", "id": job_id, "payload": {"text": "hi"}}
        resp = requests.post(f"{url}/jobs", json=body, timeout=30)
        assert resp.status_code == 202, resp.text
        assert bucket.get_blob(job_object(job_id)) is not None
    finally:
        stop(proc)
    # the default deployment does not know it: a 400 that names the known pipelines
    resp = post(submit_fn, {"pipeline": "shout"})
    assert resp.status_code == 400 and "demo" in resp.json()["reason"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("RECLAIM_MAX_BODY_BYTES", "lots"), ("RECLAIM_PIPELINE_MODULES", "no_such_pipes")],
)
def test_bad_settings_answer_500_naming_the_problem(
    emulator_env: dict[str, str], log_dir: Path, variable: str, value: str
) -> None:
    env = {**emulator_env, "PYTHONPATH": str(ROOT), variable: value}
    proc, url = start_function("submit", "submit", env, log_dir)
    try:
        resp = requests.post(f"{url}/jobs", json={"pipeline": "demo"}, timeout=30)
        assert resp.status_code == 500
        assert resp.json()["error"] == "misconfigured"
        assert variable in resp.json()["reason"] and value in resp.json()["reason"]
    finally:
        stop(proc)
