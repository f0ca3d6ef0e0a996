"""Upload routes over the local cloud (one cloud for the module): fake-gcs-server's
notification, pushed by the Pub/Sub emulator into submit_upload, starts the routed
pipeline; the unrouted default; a redelivered notification; a folder as one batch with
its callback; a deleted object; a bad routes file refused at start, naming the route."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared import records
from shared.storage import job_object
from tests.integration.cloud_support import batch, fast_cloud, job, job_bucket
from tests.polling import wait_for

ROUTES = {
    "unrouted": "upload-digest",
    "routes": [
        {
            "name": "csv-reports",
            "prefix": "reports/",
            "suffixes": [".csv"],
            "pipeline": "csv-summary",
            "metadata": {"delimiter": "delimiter"},
            "payload": {"max_rows": 1000},
            "batch": {
                "from": "folder",
                "close_with": "_done",
                "on_complete": {"pipeline": "demo", "payload": {"stages": 1}},
            },
        },
        {
            "name": "plain-csv",
            "prefix": "plain/",
            "pipeline": "csv-summary",
            "metadata": {"delimiter": "delimiter"},
        },
    ],
}
ENDED = ("done", "failed", "cancelled")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    path = tmp_path_factory.mktemp("routes") / "uploads.json"
    path.write_text(json.dumps(ROUTES))
    base = fast_cloud(max_instances=1, concurrency=4)
    env = {**base.config.function_env, "RECLAIM_PIPELINE_MODULES": "pipelines.csv_summary"}
    with LocalCloud.for_tests(
        max_instances=1,  # one claim instance: one process's view of a pause
        concurrency=4,
        stale_seconds=3.0,
        sweep_interval_seconds=1.0,
        function_env=env,
        uploads_file=path,
    ) as started:
        yield started


def bucket(cloud: LocalCloud) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    ends = cloud.endpoints
    client = storage.Client(
        project=ends["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": ends["storage_emulator_host"]},
    )
    return client.bucket(ends["uploads_bucket"])


def upload(cloud: LocalCloud, name: str, data: bytes, **metadata: str) -> tuple[str, int]:
    """Upload an object; its job id (bucket, name, generation) and generation."""
    blob = bucket(cloud).blob(name)
    blob.metadata = metadata or None
    blob.upload_from_string(data, content_type="text/csv")
    generation = int(bucket(cloud).get_blob(name).generation)
    return records.upload_job_id(bucket(cloud).name, name, generation), generation


def ended(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    def view() -> dict[str, Any] | None:
        resp = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30)
        body = resp.json() if resp.status_code == 200 else {}
        return body if body.get("status") in ENDED else None

    return dict(wait_for(f"job {job_id} ended", view, timeout=90))


def test_routed_upload_starts_its_pipeline_with_object_and_metadata(cloud: LocalCloud) -> None:
    job_id, generation = upload(cloud, "plain/prices.csv", b"item;price\na;1\nb;3\n", delimiter=";")
    body = ended(cloud, job_id)
    assert body["status"] == "done", body
    assert body["pipeline"] == "csv-summary"
    record = json.loads(job_bucket(cloud, job_id).blob(job_object(job_id)).download_as_bytes())
    assert record["payload"]["delimiter"] == ";"  # from the object's custom metadata
    assert record["payload"]["name"] == "plain/prices.csv"
    assert record["payload"]["generation"] == generation
    assert record["source"]["generation"] == generation
    assert body["result"]["rows"] == 2  # split on ';': the metadata reached the stage


def test_unrouted_upload_becomes_an_upload_digest_job(cloud: LocalCloud) -> None:
    job_id, _ = upload(cloud, "notes/readme.txt", b"one\ntwo\n")
    body = ended(cloud, job_id)
    assert body["status"] == "done" and body["pipeline"] == "upload-digest"
    assert body["result"]["size"] == 8


def test_redelivered_notification_finds_its_job_and_overwrite_makes_a_new_one(
    cloud: LocalCloud,
) -> None:
    name = "plain/again.csv"
    job_id, generation = upload(cloud, name, b"a\n1\n")
    ended(cloud, job_id)
    resource = {
        "bucket": bucket(cloud).name,
        "name": name,
        "generation": str(generation),
        "contentType": "text/csv",
        "size": "4",
    }
    envelope = {
        "message": {
            "data": base64.b64encode(json.dumps(resource).encode()).decode(),
            "attributes": {
                "eventType": "OBJECT_FINALIZE",
                "payloadFormat": "JSON_API_V1",
                "bucketId": resource["bucket"],
                "objectId": name,
                "objectGeneration": str(generation),
            },
            "messageId": "redelivered-1",
        }
    }
    again = requests.post(cloud.endpoints["submit_upload"], json=envelope, timeout=30)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == job_id and again.json()["created"] is False
    assert job(cloud, job_id)["attempts"] == 1  # not run a second time
    newer_id, newer_generation = upload(cloud, name, b"a\n1\n2\n")
    assert newer_generation != generation and newer_id != job_id
    assert ended(cloud, newer_id)["result"]["rows"] == 2


def test_a_folder_of_uploads_is_one_batch_called_back_once_closed(cloud: LocalCloud) -> None:
    ids = [upload(cloud, f"reports/2026-12/{n}.csv", b"x,y\n1,2\n")[0] for n in "abc"]
    views = [ended(cloud, i) for i in ids]
    assert {v["status"] for v in views} == {"done"}
    batch_id = views[0]["batch_id"]
    assert batch_id and {v["batch_id"] for v in views} == {batch_id}
    held = batch(cloud, batch_id)
    assert sorted(m["id"] for m in held["jobs"]) == sorted(ids)
    assert held["on_complete"]["id"] is None  # every member ended, but the folder is open
    upload(cloud, "reports/2026-12/_done", b"")

    def called_back() -> dict[str, Any] | None:
        found = batch(cloud, batch_id)["on_complete"]
        return found if found.get("status") == "done" else None

    callback = wait_for("the batch's callback done", called_back, timeout=90)
    assert callback["pipeline"] == "demo"
    assert job(cloud, callback["id"])["callback_of"] == batch_id


def test_an_object_deleted_before_its_job_runs_fails_it_with_the_reason(
    cloud: LocalCloud,
) -> None:
    admin = cloud.endpoints["admin"]  # pause and resume are operator routes
    assert requests.post(f"{admin}/pipelines/csv-summary/pause", json={}, timeout=30).ok
    try:
        wait_for("claim holding csv-summary jobs back", lambda: _probe_parked(cloud), timeout=60)
        job_id, generation = upload(cloud, "plain/gone.csv", b"a\n1\n")
        wait_for(
            "the job parked (its pipeline is paused)",
            lambda: _records(cloud).get_blob(f"parked/csv-summary/{job_id}") is not None,
        )
        assert job(cloud, job_id)["status"] == "queued"
        bucket(cloud).blob("plain/gone.csv").delete()
    finally:
        assert requests.post(f"{admin}/pipelines/csv-summary/resume", json={}, timeout=30).ok
    body = ended(cloud, job_id)
    assert body["status"] == "failed" and body["attempts"] == 1
    assert f"plain/gone.csv at generation {generation} does not exist" in json.dumps(body)


def _records(cloud: LocalCloud) -> Any:
    return bucket(cloud).client.bucket(cloud.endpoints["records_bucket"])


def _probe_parked(cloud: LocalCloud) -> bool:
    """A csv-summary job submitted now is parked, not run (a claim process trusts a pause
    flag it read for a moment: flow.PAUSE_CACHE_S)."""
    bucket(cloud).blob("probe/p.csv").upload_from_string(b"a\n1\n")
    body = {
        "pipeline": "csv-summary",
        "payload": {"bucket": bucket(cloud).name, "name": "probe/p.csv"},
    }
    job_id = requests.post(cloud.endpoints["jobs"], json=body, timeout=30).json()["id"]
    parked = f"parked/csv-summary/{job_id}"

    def fate() -> str | None:
        if _records(cloud).get_blob(parked) is not None:
            return "parked"
        return "ran" if job(cloud, job_id)["status"] in ENDED else None

    return bool(wait_for(f"probe {job_id} parked or ended", fate, timeout=60) == "parked")


def test_a_bad_routes_file_is_refused_at_start_naming_the_route(tmp_path: Path) -> None:
    bad = tmp_path / "uploads.json"
    bad.write_text(
        json.dumps(
            {
                "routes": [
                    {"name": "renders", "prefix": "r/", "pipeline": "demo"},
                    {"name": "thumbs", "prefix": "r/t/", "pipeline": "demo"},
                ]
            }
        )
    )
    cloud = LocalCloud.for_tests(uploads_file=bad)
    with pytest.raises(ValueError, match="route thumbs: prefix 'r/t/' overlaps route renders"):
        cloud.start()
    assert not cloud.started or not cloud._procs
