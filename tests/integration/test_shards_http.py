"""Two record shards on fake-gcs-server, every run: the key scenarios with the records of
one batch spread over two buckets by a hash of the job id (docs/capacity.md, "Sharding").

The whole integration suite runs on two shards with RECLAIM_TEST_SHARDS=2; this module
proves on every run that submit, claim, the sweep's rescue, the CLI's list and a batch's
progress work across buckets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.cloud import ROOT, LocalCloud
from reclaim.local.wiring import RECORDS_BUCKET
from shared import records, timing
from shared.hints import index_board
from shared.shards import shard_of
from shared.storage import job_object
from tests.integration.cloud_support import (
    cloud_store,
    fast_cloud,
    job,
    lines_about,
    record_buckets,
    records_bucket,
)
from tests.polling import wait_for

JOBS = 12


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(2, 4, shard_buckets=(f"{RECORDS_BUCKET}-s1",)) as started:
        yield started


def _submit(cloud: LocalCloud, jobs: list[dict[str, Any]], batch_id: str) -> list[str]:
    body: dict[str, Any] = {"batch_id": batch_id, "jobs": jobs}
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=60)
    assert resp.status_code == 202, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


def _record_names(cloud: LocalCloud) -> list[set[str]]:
    return [{b.name for b in bucket.list_blobs(prefix="jobs/")} for bucket in record_buckets(cloud)]


def test_a_batch_spreads_over_both_shards_and_ends_with_its_progress(cloud: LocalCloud) -> None:
    assert len(cloud.topology.records_buckets) == 2
    batch_id = f"sh-{uuid.uuid4().hex[:8]}"
    ids = _submit(
        cloud,
        [
            {"pipeline": "demo", "id": f"order-{i:03d}-{batch_id}", "payload": {"stages": 2}}
            for i in range(JOBS)
        ],
        batch_id,
    )
    by_bucket = _record_names(cloud)
    for shard, names in enumerate(by_bucket):
        mine = {job_object(j) for j in ids if shard_of(j, 2) == shard}
        others = {job_object(j) for j in ids} - mine
        assert mine and mine <= names and not others & names  # each in its shard alone

    def progress() -> dict[str, Any] | None:
        resp = requests.get(f"{cloud.endpoints['submit']}/batches/{batch_id}/progress", timeout=30)
        assert resp.status_code == 200, resp.text
        body = dict(resp.json())
        return body if body["pending"] == 0 else None

    body = wait_for("the sharded batch finished", progress, timeout=120)
    assert (body["total"], body["done"], body["finished"]) == (JOBS, JOBS, True)
    assert all(job(cloud, j)["status"] == "done" for j in ids)
    assert not {e.job_id for e in cloud_store(cloud).list_pending()} & set(ids)  # markers gone


def test_the_sweep_rescues_a_job_in_the_far_shard_whose_doorbell_was_lost(
    cloud: LocalCloud,
) -> None:
    store = cloud_store(cloud)
    candidates = (f"lost-{uuid.uuid4().hex[:8]}" for _ in range(64))
    job_id = next(j for j in candidates if shard_of(j, 2) == 1)  # not the home bucket
    then = datetime.now(UTC) - timedelta(hours=1)
    store.add_pending(job_id)  # marker, record, and no doorbell: only the sweep finds it
    store.create(records.new_record(job_id, "demo", {"stages": 1}, then))
    assert list(record_buckets(cloud)[1].list_blobs(prefix=job_object(job_id)))
    # read through the store, not GET /jobs (whose watchdog would ring it itself)
    wait_for(f"{job_id} done", lambda: store.read(job_id).record["status"] == "done", timeout=90)
    assert "sweep" in lines_about(Path(cloud.endpoints["log_dir"]), job_id)  # the sweep rang


def test_the_cli_lists_jobs_of_both_shards(cloud: LocalCloud) -> None:
    batch_id = f"cli-{uuid.uuid4().hex[:8]}"
    candidates = [f"c{i}-{batch_id}" for i in range(64)]
    chosen = [j for s in (0, 1) for j in [c for c in candidates if shard_of(c, 2) == s][:3]]
    jobs = [{"pipeline": "demo", "id": j, "payload": {"stages": 1}} for j in chosen]
    ids = _submit(cloud, jobs, batch_id)
    assert {shard_of(j, 2) for j in ids} == {0, 1}
    proc = subprocess.run(
        [sys.executable, "-m", "reclaim.cli", "list", "--batch", batch_id, "--json"],
        env={**_clean_env(), **cloud.client_env()},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(j["id"] for j in json.loads(proc.stdout)["jobs"]) == sorted(ids)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}


def test_a_delayed_job_indexed_under_the_old_name_is_released_by_the_sweep(
    cloud: LocalCloud,
) -> None:
    """scheduled/<hour>/<id>, as written before the fan-out slots, over the wire: the
    sweep of this version still finds it, releases it, and claim runs it."""
    store = cloud_store(cloud)
    store.allow_index_prefixes([timing.SCHEDULED_PREFIX])  # time's index (the feature table)
    # old names are a deployment's from before the fan-out, so from before the index
    # board too (shared.hints.index_board): without a board the sweep checks every index whole
    board = records_bucket(cloud).blob(index_board.BOARD)
    if board.exists():
        board.delete()
    job_id = f"old-delayed-{uuid.uuid4().hex[:8]}"
    run_at = datetime.now(UTC) - timedelta(seconds=1)
    record = records.new_record(job_id, "demo", {"stages": 1}, run_at - timedelta(hours=1))
    old_name = timing.legacy_scheduled_name(job_id, run_at)
    store.put_blob(old_name, b"", generation=0)  # index first, as submit did
    store.create({**record, "run_at": run_at.isoformat()})
    wait_for(f"{job_id} done", lambda: store.read(job_id).record["status"] == "done", timeout=90)
    # only the sweep's release deletes a scheduled marker (no doorbell, no pending marker)
    assert not list(records_bucket(cloud).list_blobs(prefix=old_name))
