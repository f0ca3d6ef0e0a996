"""An upload becomes an upload-digest job: submit_upload over HTTP, fed by a
hand-posted push envelope, an Eventarc CloudEvent, and fake-gcs-server's own
notifications pushed by the Pub/Sub emulator."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from reclaim.local.gcs import start_fake_gcs
from reclaim.local.procs import free_port, spawn, stop, wait_for_port
from shared import records
from shared.storage import job_object

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"
FINALIZED = "google.cloud.storage.object.v1.finalized"


@dataclass
class Upload:
    url: str
    project: str
    records: Any
    uploads: Any
    topic_id: str
    gcs_url: str


def _client(url: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="reclaim-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": url},
    )


@pytest.fixture(scope="module")
def upload_fn(emulator_env: dict[str, str], publisher: Any, log_dir: Path) -> Iterator[Upload]:
    """submit_upload, and a fake-gcs-server that notifies the uploads topic."""
    project = emulator_env["GOOGLE_CLOUD_PROJECT"]
    suffix = uuid.uuid4().hex[:10]
    topic_id = f"uploads-{suffix}"
    publisher.create_topic(name=publisher.topic_path(project, topic_id))
    publisher.create_topic(name=publisher.topic_path(project, f"jobs-{suffix}"))
    gcs_port = free_port()
    gcs = start_fake_gcs(
        "127.0.0.1",
        gcs_port,
        pubsub_emulator_host=emulator_env["PUBSUB_EMULATOR_HOST"],
        event_project=project,
        event_topic=topic_id,
        event_bucket=f"uploads-{suffix}",
        log_path=log_dir / f"fake-gcs-events-{gcs_port}.log",
    )
    gcs_url = f"http://127.0.0.1:{gcs_port}"
    client = _client(gcs_url)
    records_bucket = client.create_bucket(f"records-{suffix}")
    uploads_bucket = client.create_bucket(f"uploads-{suffix}")
    port = free_port()
    env = {
        **os.environ,
        **emulator_env,
        "STORAGE_EMULATOR_HOST": gcs_url,
        "PYTHONPATH": str(ROOT),
        "RECLAIM_PROJECT": project,
        "RECLAIM_RECORDS_BUCKET": records_bucket.name,
        "RECLAIM_JOBS_TOPIC": f"jobs-{suffix}",
        "WORKERS": "1",
        "THREADS": "4",
    }
    args = [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(ROOT / "functions" / "submit" / "main.py"),
        "--target",
        "submit_upload",
        "--signature-type",
        "http",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log_path = log_dir / f"submit_upload-{port}.log"
    proc = spawn(args, env=env, cwd=ROOT, log_path=log_path, die_with_parent=True)
    try:
        wait_for_port("127.0.0.1", port, proc=proc, timeout=30)
        yield Upload(
            f"http://127.0.0.1:{port}", project, records_bucket, uploads_bucket, topic_id, gcs_url
        )
    finally:
        stop(proc)
        stop(gcs)


def names(bucket: Any) -> list[str]:
    return sorted(b.name for b in bucket.client.list_blobs(bucket.name))


def job_record(fn: Upload, job_id: str) -> dict[str, Any]:
    return json.loads(fn.records.blob(job_object(job_id)).download_as_bytes())


def notification(
    bucket: str,
    name: str,
    generation: int,
    *,
    event: str = "OBJECT_FINALIZE",
    content_type: str = "text/plain",
    size: int = 5,
) -> dict[str, Any]:
    """A push envelope of a JSON_API_V1 notification, as Pub/Sub delivers it."""
    resource = {
        "kind": "storage#object",
        "name": name,
        "bucket": bucket,
        "generation": str(generation),
        "metageneration": "1",
        "contentType": content_type,
        "size": str(size),
        "timeCreated": "2026-11-30T09:00:00.123Z",
        "storageClass": "STANDARD",
    }
    attrs = {
        "bucketId": bucket,
        "objectId": name,
        "objectGeneration": str(generation),
        "eventType": event,
        "payloadFormat": "JSON_API_V1",
        "eventTime": "2026-11-30T09:00:00.123456Z",
    }
    return {
        "message": {
            "data": base64.b64encode(json.dumps(resource).encode()).decode(),
            "attributes": attrs,
            "messageId": "1",
            "message_id": "1",
            "publishTime": "2026-11-30T09:00:00.200Z",
        },
        "subscription": "projects/reclaim-test/subscriptions/reclaim-submit-upload",
    }


def post_envelope(fn: Upload, envelope: Any) -> requests.Response:
    return requests.post(fn.url, json=envelope, timeout=30)


def test_push_notification_creates_one_job(upload_fn: Upload) -> None:
    blob = upload_fn.uploads.blob("in/report one.csv")
    blob.upload_from_string(b"a,b\n1,2\n", content_type="text/csv")
    generation = upload_fn.uploads.get_blob(blob.name).generation
    envelope = notification(
        upload_fn.uploads.name, blob.name, generation, content_type="text/csv", size=8
    )
    first = post_envelope(upload_fn, envelope)
    assert first.status_code == 202, first.text
    job_id = records.upload_job_id(upload_fn.uploads.name, blob.name, generation)
    assert first.json()["id"] == job_id and first.json()["created"] is True
    record = job_record(upload_fn, job_id)
    assert record["pipeline"] == "upload-digest" and record["status"] == "queued"
    assert record["payload"] == {
        "bucket": upload_fn.uploads.name,
        "name": blob.name,
        "generation": generation,
        "content_type": "text/csv",
        "size": 8,
    }
    assert record["source"] == {
        "bucket": upload_fn.uploads.name,
        "name": blob.name,
        "generation": generation,
    }
    before = names(upload_fn.records)
    again = post_envelope(upload_fn, envelope)
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["id"] == job_id
    assert names(upload_fn.records) == before
    assert [n for n in before if n.startswith("jobs/")].count(job_object(job_id)) == 1


def test_eventarc_binary_cloudevent_creates_one_job(upload_fn: Upload) -> None:
    data = json.loads((EVENTS / "storage-StorageObjectData-complex.json").read_text())
    data["generation"] = str(int(time.time() * 1e6))  # int64 as a string, like production
    event = CloudEvent(
        {
            "type": FINALIZED,
            "source": "//storage.googleapis.com/projects/_/buckets/sample-bucket",
            "id": uuid.uuid4().hex,
            "subject": "objects/MyFile",
            "datacontenttype": "application/json",
        },
        data,
    )
    headers, body = to_binary(event)
    first = requests.post(upload_fn.url, data=body, headers=dict(headers), timeout=30)
    assert first.status_code == 202, first.text
    job_id = records.upload_job_id("sample-bucket", "MyFile", int(data["generation"]))
    assert first.json()["id"] == job_id
    assert job_record(upload_fn, job_id)["payload"]["content_type"] == "esse commodo"
    before = names(upload_fn.records)
    again = requests.post(upload_fn.url, data=body, headers=dict(headers), timeout=30)
    assert again.status_code == 200 and again.json()["id"] == job_id
    assert names(upload_fn.records) == before


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        (b"{broken", {"Content-Type": "application/json"}, 400, "not valid JSON"),
        (b"{}", {"Content-Type": "application/json"}, 400, "no 'message'"),
        (
            json.dumps(
                {
                    "message": {
                        "data": "%%%",
                        "messageId": "1",
                        "attributes": {"eventType": "OBJECT_FINALIZE"},
                    }
                }
            ).encode(),
            {"Content-Type": "application/json"},
            400,
            "base64",
        ),
        (
            json.dumps({"message": {"data": "", "messageId": "1"}}).encode(),
            {"Content-Type": "application/json"},
            400,
            "eventType",
        ),
        (
            json.dumps(notification("b", "n", 0)).encode(),
            {"Content-Type": "application/json"},
            400,
            "generation",
        ),
        (b"{}", {"ce-specversion": "1.0", "ce-type": FINALIZED, "ce-source": "s"}, 400, "ce-id"),
        (
            b'{"bucket": "b", "name": "n"}',
            {
                "ce-specversion": "1.0",
                "ce-type": FINALIZED,
                "ce-source": "s",
                "ce-id": "1",
                "Content-Type": "application/json",
            },
            400,
            "generation",
        ),
        (
            b"{}",
            {
                "ce-specversion": "1.0",
                "ce-type": "com.example",
                "ce-source": "s",
                "ce-id": "1",
                "Content-Type": "application/json",
            },
            400,
            "neither",
        ),
        (
            json.dumps(notification("b", "n", 5, event="OBJECT_DELETE")).encode(),
            {"Content-Type": "application/json"},
            200,
            "not a finalized upload",
        ),
        (
            b'{"bucket": "b", "name": "n", "generation": "4"}',
            {
                "ce-specversion": "1.0",
                "ce-type": "google.cloud.storage.object.v1.archived",
                "ce-source": "s",
                "ce-id": "1",
                "Content-Type": "application/json",
            },
            200,
            "not a finalized upload",
        ),
    ],
)
def test_bad_or_ignored_events_write_nothing(
    upload_fn: Upload, body: bytes, headers: dict[str, str], status: int, reason: str
) -> None:
    before = names(upload_fn.records)
    resp = requests.post(upload_fn.url, data=body, headers=headers, timeout=30)
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["reason"]
    if status == 400:
        assert resp.json()["error"] == "bad event"
    assert names(upload_fn.records) == before


def test_event_from_the_records_bucket_is_ignored(upload_fn: Upload) -> None:
    before = names(upload_fn.records)
    envelope = notification(upload_fn.records.name, "jobs/x.json", 12)
    resp = post_envelope(upload_fn, envelope)
    assert resp.status_code == 200 and resp.json()["ignored"] is True
    assert names(upload_fn.records) == before


def test_wrong_method_and_oversize(upload_fn: Upload) -> None:
    before = names(upload_fn.records)
    resp = requests.get(upload_fn.url, timeout=10)
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST"
    big = requests.post(
        upload_fn.url,
        data=b"{" + b" " * 1_100_000 + b"}",
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert big.status_code == 413 and big.json()["error"] == "body too large"
    assert names(upload_fn.records) == before


def test_fake_gcs_notification_pushed_by_the_emulator(upload_fn: Upload, subscriber: Any) -> None:
    """The real chain: upload -> fake-gcs-server notification -> emulator push -> job."""
    topic = f"projects/{upload_fn.project}/topics/{upload_fn.topic_id}"
    sub = subscriber.subscription_path(upload_fn.project, f"push-{uuid.uuid4().hex[:8]}")
    subscriber.create_subscription(
        name=sub,
        topic=topic,
        ack_deadline_seconds=10,
        push_config={"push_endpoint": f"{upload_fn.url}/{topic}"},
    )
    try:
        blob = upload_fn.uploads.blob(f"pushed/{uuid.uuid4().hex[:6]}.txt")
        blob.upload_from_string(b"hello\nworld\n", content_type="text/plain")
        generation = upload_fn.uploads.get_blob(blob.name).generation
        job_id = records.upload_job_id(upload_fn.uploads.name, blob.name, generation)
        record = _wait_for_record(upload_fn, job_id)
        assert record["pipeline"] == "upload-digest"
        assert record["payload"]["size"] == 12 and record["payload"]["name"] == blob.name
        assert record["payload"]["content_type"] == "text/plain"
    finally:
        subscriber.delete_subscription(subscription=sub)


def _wait_for_record(fn: Upload, job_id: str, deadline_s: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    blob = fn.records.blob(job_object(job_id))
    while time.monotonic() < end:
        if blob.exists():
            return job_record(fn, job_id)
        time.sleep(0.2)
    raise AssertionError(f"no record for {job_id} after {deadline_s}s")


def test_submit_upload_refuses_a_bad_routes_file_naming_the_route(
    upload_fn: Upload, emulator_env: dict[str, str], log_dir: Path, tmp_path: Path
) -> None:
    """The function checks RECLAIM_UPLOADS_FILE at start: it logs the bad route at once
    and answers every upload 500 misconfigured (Pub/Sub retries it), writing nothing."""
    from reclaim.local.procs import stop
    from tests.integration.function_support import start_function

    bad = tmp_path / "uploads.json"
    bad.write_text(json.dumps({"routes": [{"name": "thumbs", "prefix": "t/", "pipeline": "x"}]}))
    env = {
        **emulator_env,
        "STORAGE_EMULATOR_HOST": upload_fn.gcs_url,
        "PYTHONPATH": str(ROOT),
        "RECLAIM_PROJECT": upload_fn.project,
        "RECLAIM_RECORDS_BUCKET": upload_fn.records.name,
        "RECLAIM_UPLOADS_FILE": str(bad),
    }
    proc, url = start_function("submit", "submit_upload", env, log_dir)
    try:
        before = names(upload_fn.records)
        resp = requests.post(url, json=notification(upload_fn.uploads.name, "t/a", 3), timeout=30)
        assert resp.status_code == 500 and resp.json()["error"] == "misconfigured"
        assert "routes[0] (thumbs): pipeline 'x' is unknown" in resp.json()["reason"]
        assert names(upload_fn.records) == before
    finally:
        stop(proc)
