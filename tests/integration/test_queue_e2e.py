"""The whole queue on the local cloud: a batch submitted over HTTP runs to done
through the push subscription, the claim service on the local Cloud Run (scaled
from zero) and the scheduler's sweep, although the platform SIGKILLs a claim
instance while it owns a job (the staleness rescue), or reclaims one gracefully
(the hand-back)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from tests.integration.cloud_support import (
    batch,
    fast_cloud,
    job,
    job_bucket,
    running_on,
)
from tests.polling import wait_for

JOBS = 8


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    # Cloud Run's own SIGTERM grace (10 s, https://cloud.google.com/run/docs/container-contract
    # #instance-shutdown): a gracefully reclaimed instance must hand back and exit within it.
    # With 2 s, a loaded machine had it killed after the grace although it did all it should.
    with fast_cloud(max_instances=2, concurrency=2, shutdown_grace_seconds=10.0) as c:
        yield c


def test_a_batch_finishes_although_an_instance_is_killed_mid_job(cloud: LocalCloud) -> None:
    batch_id = f"b-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {
        "batch_id": batch_id,
        "jobs": [
            {"pipeline": "demo", "payload": {"stages": 2, "sleep_s": 1.0, "output": True}}
            for _ in range(JOBS)
        ],
    }
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert resp.status_code in (200, 201, 202), resp.text
    job_ids = [j["id"] for j in batch(cloud, batch_id)["jobs"]]
    assert len(job_ids) == JOBS

    index, victim_job = wait_for("a running job", lambda: running_on(cloud, job_ids))
    cloud.service("claim").reclaim(index, graceful=False)

    final = wait_for("every job terminal", lambda: (b := batch(cloud, batch_id))["done"] and b)
    assert final["counts"] == {"done": JOBS}, final["counts"]
    victim = job(cloud, victim_job)
    assert victim["status"] == "done" and victim["attempts"] >= 2
    for job_id in job_ids:
        view = job(cloud, job_id)
        attempt = view["attempts"]
        outputs = view["result"]["outputs"]
        assert len(outputs) == 2
        # every output the result names was written by an attempt that committed its stage
        assert all(o.startswith(f"outputs/{job_id}/") for o in outputs)
        assert view["result"]["attempt"] == attempt
    assert cloud.dead_children() == {}  # the platform's kill is no crash; nothing else died
    assert cloud.service("claim").stats()["reclaims"]["hard"] == 1


def test_a_busy_instance_reclaimed_gracefully_still_ends_each_job_once(cloud: LocalCloud) -> None:
    """SIGTERM, the 10 s grace, SIGKILL (a rollout or host maintenance) while the instance
    runs 3-stage jobs of 1.5 s a stage: its jobs are handed back (no staleness rescue, no
    attempt spent), the instance exits within the grace, and every job is done exactly
    once, by its final attempt."""
    claim = cloud.service("claim")
    batch_id = f"g-{uuid.uuid4().hex[:8]}"
    body = {
        "batch_id": batch_id,
        "jobs": [
            {"pipeline": "demo", "payload": {"stages": 3, "sleep_s": 1.5, "output": True}}
            for _ in range(4)
        ],
    }
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert resp.status_code in (200, 201, 202), resp.text
    job_ids = [j["id"] for j in batch(cloud, batch_id)["jobs"]]
    index, victim = wait_for("a running job", lambda: running_on(cloud, job_ids))
    claim.reclaim(index, graceful=True)

    final = wait_for("every job terminal", lambda: (b := batch(cloud, batch_id))["done"] and b)
    assert final["counts"] == {"done": 4}, final["counts"]
    for job_id in job_ids:
        view = job(cloud, job_id)
        done = [e for e in view["history"] if e.get("event") == "done"]
        assert len(done) == 1 and done[0]["attempt"] == view["attempts"]
        assert view["result"]["attempt"] == view["attempts"]
        assert len(view["result"]["outputs"]) == 3
        assert view["rescues"] == 0  # nobody waited for the stale time
    handed = [e for e in job(cloud, victim)["history"] if e.get("event") == "handed back"]
    assert [e["attempt"] for e in handed] == [1] and job(cloud, victim)["attempts"] == 2
    gone = wait_for(
        "the reclaimed instance gone",
        lambda: next(
            (
                i["shutdown"]
                for i in claim.stats()["instance_list"]
                if i["id"] == index and i["state"] == "gone"
            ),
            None,
        ),
    )
    assert (gone["reason"], gone["outcome"]) == ("reclaim", "exited")  # within the grace
    assert claim.stats()["reclaims"]["graceful"] == 1


def test_an_upload_is_digested_end_to_end(cloud: LocalCloud) -> None:
    """upload -> notification -> push -> submit_upload -> doorbell -> claim -> done."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from shared import records

    client = storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )
    data = b"line one\nline two\n"
    blob = client.bucket(cloud.endpoints["uploads_bucket"]).blob(f"in/{uuid.uuid4().hex}.txt")
    blob.upload_from_string(data, content_type="text/plain")
    job_id = records.upload_job_id(blob.bucket.name, blob.name, blob.generation)

    def finished() -> dict[str, Any] | None:
        resp = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30)
        return resp.json() if resp.status_code == 200 and resp.json()["status"] == "done" else None

    view = wait_for("the upload's job done", finished)
    assert view["pipeline"] == "upload-digest" and view["attempts"] == 1
    assert view["result"]["size"] == len(data)
    report_name = view["result"]["report"]
    assert report_name == f"outputs/{job_id}/{view['attempts']}/report.json"
    assert report_name in view["outputs"]
    records_bucket = client.bucket(job_bucket(cloud, job_id).name)
    report = json.loads(records_bucket.blob(report_name).download_as_bytes())
    assert report["sha256"] == hashlib.sha256(data).hexdigest()
    assert (report["size"], report["lines"], report["content_type"]) == (18, 2, "text/plain")
    assert report["name"] == blob.name
