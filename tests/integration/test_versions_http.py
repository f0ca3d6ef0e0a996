"""Deploying a changed pipeline mid-job, over HTTP on the local Cloud Run (shared.resume):
an inserted stage resumes by name, a removed one ends the job with the documented reason,
a pipeline submit learns before claim waits at no cost, and a replay that changed a field
is a 409 naming it. Every situation is arranged by state: a job held in a stage (which
calls check(), so a rollout's SIGTERM hands it back there), revisions waited on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, submit_batch
from tests import polling
from tests.integration.cloud_support import job_bucket, roll_out

MODULE = "tests.integration.versioned_pipelines"
FRESH = "tests.integration.versioned_fresh"


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=60.0,  # beyond the tests: only a hand-back moves a held job on
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=5.0,
        max_delivery_attempts=100,  # a deferred doorbell keeps coming back, never dead
        function_env={
            "RECLAIM_PIPELINE_MODULES": MODULE,
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "TEST_STEPS": "one,two,three",
        },
    ) as c:
        yield c


def wait_for(what: str, fn: Any) -> Any:
    return polling.wait_for(what, fn, timeout=120, interval=0.1)


def completed(record: dict[str, Any]) -> list[str]:
    checkpoint = record.get("checkpoint") or {}
    return list(checkpoint.get("completed") or [])


def written(cloud: LocalCloud, job_id: str) -> Counter[str]:
    """Stage name -> how many times its output was written (once per attempt that ran it)."""
    storage = wiring.storage_client(cloud.gcs_url, cloud.endpoints["project"])
    blobs = storage.list_blobs(job_bucket(cloud, job_id).name, prefix=f"outputs/{job_id}/")
    return Counter(b.name.rsplit("/", 1)[-1].removesuffix(".json") for b in blobs)


def held_after(cloud: LocalCloud, watch: Watch, done: list[str], steps: str) -> str:
    """A job of `steps` running, held in the stage after `done` on a claim revision
    that holds there; its id."""
    hold = steps.split(",")[len(done)]
    roll_out(cloud, "claim", env={"TEST_STEPS": steps, "TEST_HOLD": hold})
    _batch, (job_id,) = submit_batch(cloud.endpoints["jobs"], [{"pipeline": "steps"}])
    wait_for(
        f"the job held in {hold}",
        lambda: (
            (r := watch.snapshot([job_id])[job_id])["status"] == "running" and completed(r) == done
        ),
    )
    return job_id


def test_an_inserted_stage_resumes_by_name_and_reruns_no_completed_stage(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    job_id = held_after(cloud, watch, ["one", "two"], "one,two,three")
    # the new revision inserts a stage before the one the job is in; SIGTERM at once
    roll_out(
        cloud,
        "claim",
        env={"TEST_STEPS": "one,two,inserted,three", "TEST_HOLD": None},
        drain_timeout_seconds=0,
    )
    record = wait_for(
        "the job done", lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "done" and r
    )
    assert record["result"]["ran"] == ["one", "two", "inserted", "three"]
    assert written(cloud, job_id) == Counter(one=1, two=1, inserted=1, three=1)
    events = [e["event"] for e in record["history"]]
    assert "handed back" in events and events.count("done") == 1
    resumed = [e for e in record["history"] if e["event"] == "claimed"][-1]
    assert resumed["resume"] == "by name" and resumed["from_version"] != resumed["version"]


def test_a_removed_completed_stage_ends_the_job_with_the_documented_reason(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    job_id = held_after(cloud, watch, ["one", "two", "inserted"], "one,two,inserted,three")
    attempts = watch.snapshot([job_id])[job_id]["attempts"]
    roll_out(
        cloud, "claim", env={"TEST_STEPS": "one,three", "TEST_HOLD": None}, drain_timeout_seconds=0
    )
    record = wait_for(
        "the job failed",
        lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "failed" and r,
    )
    assert record["error"]["type"] == "PipelineChanged"
    assert "retry the job to run it from the start" in record["error"]["message"]
    assert record["attempts"] == attempts  # ended unclaimed: no attempt spent
    assert record["checkpoint"] == {"next_stage": 0, "state": {}}  # a retry starts afresh
    assert written(cloud, job_id) == Counter(one=1, two=1, inserted=1)  # no half-run stage
    assert [e["event"] for e in record["history"]][-2:] == ["handed back", "failed"]


def test_a_pipeline_submit_learns_first_waits_for_claim_at_no_cost(cloud: LocalCloud) -> None:
    watch = Watch(cloud)
    roll_out(cloud, "submit", pipeline_modules=[MODULE, FRESH])
    _batch, ids = submit_batch(
        cloud.endpoints["jobs"],
        [{"pipeline": "fresh", "payload": {"name": str(i)}} for i in range(4)],
    )

    def all_deferred() -> bool:
        records = watch.snapshot(ids)
        return all(any(e["event"] == "deferred" for e in r["history"]) for r in records.values())

    wait_for("claim's revision handing every job back", all_deferred)
    waiting = watch.snapshot(ids)
    assert all(r["status"] == "queued" and r["attempts"] == 0 for r in waiting.values())
    assert all("'fresh'" in r["history"][-1]["reason"] for r in waiting.values())

    roll_out(cloud, "claim", pipeline_modules=[MODULE, FRESH])
    records = wait_for(
        "every job done",
        lambda: (r := watch.snapshot(ids)) and all(x["status"] == "done" for x in r.values()) and r,
    )
    for i, job_id in enumerate(ids):
        assert records[job_id]["attempts"] == 1  # claimed once, by the revision that knew it
        assert records[job_id]["result"] == {"greeting": f"hello {i}"}


def test_a_replay_with_a_changed_field_is_a_409_naming_it(cloud: LocalCloud) -> None:
    job = {"pipeline": "steps", "id": "replayed", "delay_seconds": 3600, "concurrency_key": "k1"}
    url = cloud.endpoints["jobs"]
    assert requests.post(url, json=job, timeout=30).status_code == 202
    assert requests.post(url, json=job, timeout=30).status_code == 200
    changed = requests.post(url, json={**job, "concurrency_key": "k2"}, timeout=30)
    assert changed.status_code == 409
    assert "different concurrency_key;" in changed.json()["reason"]
