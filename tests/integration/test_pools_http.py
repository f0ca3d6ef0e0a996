"""Pools on the local Cloud Run, over HTTP as in production: one claim service per pool,
each fed by its own topic and push subscription (docs/pools.md).

- Isolation, arranged by state: the heavy pool's one slot is held by a job that lets go
  only once the test releases it, and a second heavy job waits behind it; a light job is
  submitted and finishes on the light pool's claim while the heavy slot is still held.
  Sharing one claim (two slots), the light job would wait behind both heavy ones.
- A delivery that reaches the wrong pool is sent on to the right one and acked, not run.
- A marker written before pools (pending/<id>) of a pipeline now in a pool: the sweep
  rings the job on its pool's topic, and removes the old marker once the job is done.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared import records
from shared.storage import Store, pending_object
from tests import polling
from tests.integration.cloud_support import cloud_store, job

PIPELINES = "tests.integration.pool_pipelines"
POOLS = {
    "pools": {
        "light": {
            "pipelines": ["pool-quick"],
            "concurrency": 2,
            "max_instances": 1,
            "timeout_seconds": 120,
            "ack_deadline_seconds": 60,
            "stale_seconds": 10,
        },
        "heavy": {
            "pipelines": ["pool-heavy"],
            "concurrency": 1,
            "max_instances": 1,
            "timeout_seconds": 120,
            "ack_deadline_seconds": 60,
        },
    }
}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    path = tmp_path_factory.mktemp("pools") / "pools.json"
    path.write_text(json.dumps(POOLS))
    with LocalCloud.for_tests(
        max_instances=1,
        concurrency=2,
        stale_seconds=10.0,
        sweep_interval_seconds=0,  # the tests call sweep themselves
        pools_file=path,
        # and nothing else takes a job whose doorbell was lost: a drain's safety net
        # (an old queued job in its listing) raced the sweep these tests call
        function_env={"RECLAIM_PIPELINE_MODULES": PIPELINES, "RECLAIM_DRAIN_MAX_JOBS": "0"},
    ) as started:
        yield started


def submit(cloud: LocalCloud, pipeline: str, job_id: str, payload: dict[str, Any]) -> None:
    body = {"pipeline": pipeline, "id": job_id, "payload": payload}
    answer = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert answer.status_code == 202, answer.text


def status(cloud: LocalCloud, job_id: str) -> str:
    return str(job(cloud, job_id)["status"])


def ran_on(cloud: LocalCloud, job_id: str) -> str:
    """The claim revision that ran the job (claim-light-00001-xyz: its service first)."""
    return str(store(cloud).read(job_id).record.get("pipeline_revision"))


def store(cloud: LocalCloud) -> Store:
    return cloud_store(cloud)


def test_each_pool_has_its_own_claim_service_topic_and_subscription(cloud: LocalCloud) -> None:
    urls = cloud.function_urls()
    assert {"claim", "claim-light", "claim-heavy"} <= set(urls)
    assert cloud.service("claim-heavy").config.concurrency == 1
    topics = set(cloud.topology.topics)
    assert {"reclaim-jobs", "reclaim-jobs-light", "reclaim-jobs-heavy"} <= topics
    subscriptions = {s.name: s for s in cloud.topology.subscriptions}
    light = subscriptions["reclaim-claim-light"]
    assert (light.topic, light.push_function, light.ack_deadline_seconds) == (
        "reclaim-jobs-light",
        "claim-light",
        60,
    )


def test_a_saturated_heavy_pool_does_not_delay_a_light_job(cloud: LocalCloud) -> None:
    tag = uuid.uuid4().hex[:8]
    quick, release = f"quick-{tag}", f"release-{tag}"
    heavy = [f"holder-{tag}", f"waiter-{tag}"]  # each holds its slot until `release` ends
    submit(cloud, "pool-heavy", heavy[0], {"until": release, "limit_s": 120})
    polling.wait_for(f"{heavy[0]} running", lambda: status(cloud, heavy[0]) == "running")
    submit(cloud, "pool-heavy", heavy[1], {"until": release, "limit_s": 120})
    # the heavy pool is saturated: its one slot is held, and a job waits for it
    submit(cloud, "pool-quick", quick, {})
    polling.wait_for(f"{quick} done", lambda: status(cloud, quick) == "done", timeout=60)
    assert ran_on(cloud, quick).startswith("claim-light-")
    assert status(cloud, heavy[0]) == "running"  # still held: nothing released it yet
    assert status(cloud, heavy[1]) in ("queued", "running")
    submit(cloud, "pool-quick", release, {})
    for job_id in heavy:
        polling.wait_for(f"{job_id} done", lambda j=job_id: status(cloud, j) == "done")
        assert ran_on(cloud, job_id).startswith("claim-heavy-")


def _envelope(job_id: str) -> dict[str, Any]:
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    message = {"data": data, "attributes": {"job_id": job_id}, "messageId": job_id}
    return {"message": message, "subscription": "projects/reclaim-local/subscriptions/x"}


def _queued_without_doorbell(cloud: LocalCloud, job_id: str, *, pool: str | None) -> None:
    """A queued pool-quick job whose doorbell never rang: marker (where `pool` says),
    record. Dated an hour back, so the sweep counts its doorbell as lost."""
    gcs = store(cloud)
    then = datetime.now(UTC) - timedelta(hours=1)
    gcs.add_pending(job_id, pool=pool)
    gcs.create(records.new_record(job_id, "pool-quick", {}, then))


def test_a_delivery_to_the_wrong_pool_is_sent_on_and_not_run(cloud: LocalCloud) -> None:
    job_id = f"misrouted-{uuid.uuid4().hex[:8]}"
    _queued_without_doorbell(cloud, job_id, pool="light")
    before = store(cloud).read(job_id)
    answer = requests.post(cloud.endpoints["claim-heavy"], json=_envelope(job_id), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "rerouted"
    assert "runs in pool light, not heavy" in answer.json()["detail"]
    polling.wait_for(f"{job_id} done", lambda: status(cloud, job_id) == "done", timeout=60)
    done = store(cloud).read(job_id).record
    assert done["attempts"] == before.record.get("attempts", 0) + 1  # one claim: light's
    assert [e["event"] for e in done["history"]].count("claimed") == 1
    assert ran_on(cloud, job_id).startswith("claim-light-")


def test_an_old_marker_is_swept_to_its_pool_and_removed_after(cloud: LocalCloud) -> None:
    job_id = f"old-{uuid.uuid4().hex[:8]}"
    _queued_without_doorbell(cloud, job_id, pool=None)  # top level of pending/, as before pools
    sweep = requests.post(cloud.endpoints["sweep"], json={}, timeout=120)
    # rung: the sweep rang the lost doorbell (its requeue write may then lose to the claim
    # that doorbell started, which is no requeue to count)
    assert sweep.status_code == 200 and sweep.json()["rung"] >= 1, sweep.text
    polling.wait_for(f"{job_id} done", lambda: status(cloud, job_id) == "done", timeout=60)
    assert ran_on(cloud, job_id).startswith("claim-light-")

    def markers() -> list[str]:
        return [e.key for e in store(cloud).list_pending() if e.job_id == job_id]

    top_level = pending_object(job_id).removeprefix("pending/")
    assert markers() == [top_level]  # light's finish removed pending/light/...: none there

    def swept() -> bool:
        """A sweep run; a job that ended within the clocks' slack of it is the finisher's
        still (shared.recovery), so the runs after that remove the marker."""
        sweep = requests.post(cloud.endpoints["sweep"], json={}, timeout=120)
        assert sweep.status_code == 200, sweep.text
        return markers() == []

    polling.wait_for("the old marker removed by a sweep", swept, timeout=60)


def test_a_bad_pools_file_stops_the_cloud_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "pools.json"
    bad.write_text(json.dumps({"pools": {"a": {"pipelines": ["x"]}, "b": {"pipelines": ["x"]}}}))
    with pytest.raises(ValueError, match="'x' is in two pools"):
        LocalCloud.for_tests(pools_file=bad)
