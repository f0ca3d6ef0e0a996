"""A deployment's own pipeline on the local cloud, as `make dev` runs it: the
functions import `pipelines.csv_summary` (RECLAIM_PIPELINE_MODULES), a CSV is
uploaded, a csv-summary job submitted over HTTP runs to done, and its summary.json
holds the CSV's figures. No file under shared/ knows the pipeline."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from tests.integration.cloud_support import job_bucket
from tests.polling import wait_for as _wait_for

CSV = b"region,units,price\nnorth,3,2.5\nsouth,5,\neast,,4.0\n"


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        sweep_interval_seconds=1.0,
        function_env={"RECLAIM_PIPELINE_MODULES": "pipelines.csv_summary"},
    ) as c:
        yield c


def _storage(cloud: LocalCloud) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )


def test_a_csv_summary_job_runs_to_done_with_its_summary(cloud: LocalCloud) -> None:
    client = _storage(cloud)
    uploads = cloud.endpoints["uploads_bucket"]
    name = f"in/{uuid.uuid4().hex}.csv"
    client.bucket(uploads).blob(name).upload_from_string(CSV, content_type="text/csv")
    job_id = f"csv-{uuid.uuid4().hex[:8]}"

    body = {"pipeline": "csv-summary", "payload": {"bucket": uploads, "name": name}, "id": job_id}
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert resp.status_code == 202, resp.text

    def done() -> dict[str, Any] | None:
        view = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30).json()
        assert view["status"] in ("queued", "running", "done"), view
        return view if view["status"] == "done" else None

    view = _wait_for("the csv-summary job done", done)
    assert view["pipeline"] == "csv-summary"
    assert (view["result"]["rows"], view["result"]["columns"]) == (3, 3)
    summary_name = view["result"]["summary"]
    assert summary_name == f"outputs/{job_id}/{view['attempts']}/summary.json"
    records = client.bucket(job_bucket(cloud, job_id).name)
    summary = json.loads(records.blob(summary_name).download_as_bytes())
    assert summary["source"] == f"gs://{uploads}/{name}"
    assert (summary["bytes"], summary["rows"], summary["truncated"]) == (len(CSV), 3, False)
    assert summary["columns"] == [
        {"name": "region", "filled": 3, "empty": 0, "numeric": 0},
        {
            "name": "units",
            "filled": 2,
            "empty": 1,
            "numeric": 2,
            "min": 3.0,
            "max": 5.0,
            "mean": 4.0,
        },
        {
            "name": "price",
            "filled": 2,
            "empty": 1,
            "numeric": 2,
            "min": 2.5,
            "max": 4.0,
            "mean": 3.25,
        },
    ]


def test_the_pipelines_own_validation_answers_400(cloud: LocalCloud) -> None:
    body = {"pipeline": "csv-summary", "payload": {"bucket": "b"}}
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    assert "payload.name" in resp.json()["reason"]
