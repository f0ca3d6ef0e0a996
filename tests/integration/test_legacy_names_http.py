"""A job whose record has its old name (jobs/<id>.json, written by a reclaim from before
the hash segment) is still run: the sweep finds its marker, claim reads and updates the
record where it is, GET /jobs/<id> shows it, and a replayed submit finds it instead of
making a second record (docs/capacity.md, "Names that spread load")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared import records
from shared.storage import job_object, legacy_job_object, pending_object
from tests.integration.cloud_support import cloud_store, fast_cloud, job, job_bucket
from tests.polling import wait_for


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(1, 4) as started:
        yield started


def _plant_old_job(cloud: LocalCloud, job_id: str) -> None:
    """What an earlier reclaim's submit left: a queued record under the old name and its
    pending marker, written with the official client; its doorbell was lost."""
    then = datetime.now(UTC) - timedelta(hours=1)
    record = {**records.new_record(job_id, "demo", {"stages": 2}, then), "write_id": "0" * 32}
    bucket = job_bucket(cloud, job_id)
    bucket.blob(pending_object(job_id, legacy=True)).upload_from_string(b"", if_generation_match=0)
    bucket.blob(legacy_job_object(job_id)).upload_from_string(
        records.encode(record), content_type="application/json", if_generation_match=0
    )


def test_a_job_under_its_old_record_name_is_claimed_run_and_shown(cloud: LocalCloud) -> None:
    job_id = f"order-{uuid.uuid4().hex[:8]}"
    _plant_old_job(cloud, job_id)
    bucket = job_bucket(cloud, job_id)

    def done() -> dict[str, object] | None:
        view = job(cloud, job_id)  # GET /jobs/<id>
        return view if view["status"] == "done" else None

    shown = wait_for(f"{job_id} done", done, timeout=90)
    assert shown["id"] == job_id and shown["attempts"] == 1
    assert bucket.get_blob(job_object(job_id)) is None  # never split between two names
    stored = records.decode(bucket.blob(legacy_job_object(job_id)).download_as_bytes())
    assert stored["status"] == "done"  # updated in place
    # its marker goes with it: the finisher deletes it just after the terminal write
    old_marker = pending_object(job_id, legacy=True)
    wait_for(f"{old_marker} removed", lambda: bucket.get_blob(old_marker) is None, timeout=30)

    replay = requests.post(
        cloud.endpoints["jobs"],
        json={"pipeline": "demo", "id": job_id, "payload": {"stages": 2}},
        timeout=30,
    )
    assert replay.status_code == 200, replay.text
    assert replay.json()["id"] == job_id and replay.json()["created"] is False
    assert bucket.get_blob(job_object(job_id)) is None  # no second record

    assert job_id in cloud_store(cloud).list_jobs()  # the operator's listing (reclaim list)
