"""Claim rolled out twice mid-batch on the local Cloud Run, over HTTP as in production,
and every job ends exactly once: done once, every stage completed once (one output per
stage in the bucket, checkpoints that only move forward), nothing lost.

The first rollout is Cloud Run's: the old revision's instances keep the jobs they
are running until they end, then get SIGTERM; queued jobs go to whichever revision
claims them first. The second, during a second batch, drains at once
(drain_timeout_seconds=0): the second revision's busy instances get SIGTERM while a
job is in its long stage, hand it back, and the third revision resumes it from its
checkpoint. Which revision ran what comes from each
instance's log (owner and stages) and the platform's list of instances."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, instance_pids, running_on, submit_batch
from shared.job_queue import checkpoint_of
from tests import polling
from tests.integration.cloud_support import job_bucket, roll_out

JOBS = 12
MORE_JOBS = 4
STAGES = 3
SLEEPS = [0.2, 6.0, 0.2]  # the middle stage is where a rollout finds a job
PIPELINES = "tests.integration.sample_pipelines"


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=60.0,  # beyond the test: only a hand-back can move a job on
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=5.0,
        # DEBUG: "stage finished" (read below) is a DEBUG line since the hot path went quiet
        function_env={"RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2", "RECLAIM_LOG_LEVEL": "DEBUG"},
    ) as c:
        yield c


def wait_for(what: str, fn: Any) -> Any:
    return polling.wait_for(what, fn, timeout=120, interval=0.1)


def revision_of_instances(cloud: LocalCloud) -> dict[int, str]:
    """instance id -> its revision, for every claim instance ever started."""
    return {i["id"]: i["revision"] for i in cloud.service("claim").stats()["instance_list"]}


def running_in_long_stage(cloud: LocalCloud, watch: Watch, ids: list[str], revision: str) -> bool:
    """Some job is in its middle stage on an instance of `revision`."""
    records = watch.snapshot(ids)
    revs = revision_of_instances(cloud)
    for index, pids in instance_pids(cloud).items():
        if revs.get(index) != revision:
            continue
        held = running_on(records, pids)
        if any(checkpoint_of(records[j])[0] == 1 for j in held):
            return True
    return False


def drained(cloud: LocalCloud, revision: str) -> bool:
    return bool(cloud.revision("claim", revision)["drained"])


def log_lines(log_dir: Path, revs: dict[int, str]) -> list[tuple[str, dict[str, Any]]]:
    """(revision, JSON line) of every claim instance's log line about a job."""
    out = []
    for index, revision in revs.items():
        path = log_dir / f"claim-{index}.log"
        for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("job_id"):
                out.append((revision, entry))
    return out


def assert_each_ended_once(cloud: LocalCloud, records: dict[str, dict[str, Any]]) -> None:
    """One done each, every stage completed once (and its output written once, by one
    attempt), checkpoints that only move forward."""
    storage = wiring.storage_client(cloud.gcs_url, cloud.endpoints["project"])
    for job_id, rec in records.items():
        events = [e["event"] for e in rec["history"]]
        assert events.count("done") == 1 and "failed" not in events, events
        completed = rec["result"]["completed"]
        assert [c["stage"] for c in completed] == list(range(STAGES))
        nexts = [e["next_stage"] for e in rec["history"] if e["event"] == "checkpoint"]
        assert nexts == sorted(set(nexts)), nexts
        blobs = storage.list_blobs(job_bucket(cloud, job_id).name, prefix=f"outputs/{job_id}/")
        written = Counter(b.name.rsplit("/", 1)[-1] for b in blobs)
        assert written == Counter(f"stage-{i}.json" for i in range(STAGES)), written


def test_claim_rolled_out_twice_mid_batch_ends_every_job_once(cloud: LocalCloud) -> None:
    watch = Watch(cloud)
    first = cloud.revisions("claim")["serving"]
    payload = {"stages": STAGES, "sleep_s": SLEEPS, "output": True}
    _batch, ids = submit_batch(
        cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": payload}] * JOBS
    )

    # rollout 1 while the first revision runs jobs in their middle stage and others wait
    def mid_batch() -> bool:
        records = watch.snapshot(ids)
        queued = [j for j, r in records.items() if r["status"] == "queued"]
        return bool(queued) and running_in_long_stage(cloud, watch, ids, first)

    wait_for("jobs in their middle stage on the first revision, others queued", mid_batch)
    second = roll_out(cloud, "claim", env={"ROLLOUT_MARK": "2"}, pipeline_modules=[PIPELINES])
    # the first revision's instances end what they run (and may take queued jobs meanwhile:
    # a claim slot that frees takes due jobs itself), then stop
    wait_for("the first revision drained", lambda: drained(cloud, first))

    # rollout 2, draining at once, while the second revision runs a job in its middle stage:
    # a second batch, which only the second revision can take
    _batch, more = submit_batch(
        cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": payload}] * MORE_JOBS
    )
    ids += more
    wait_for(
        "a job in its middle stage on the second revision",
        lambda: running_in_long_stage(cloud, watch, ids, second),
    )
    third = cloud.deploy_revision("claim", env={"ROLLOUT_MARK": "3"}, drain_timeout_seconds=0)
    records = wait_for(
        "every job done",
        lambda: (r := watch.snapshot(ids)) and all(x["status"] == "done" for x in r.values()) and r,
    )

    assert_each_ended_once(cloud, records)

    # the revisions: the first two drained and gone, the third serving
    state = cloud.revisions("claim")
    assert state["serving"] == third
    by_name = {r["name"]: r for r in state["revisions"]}
    assert [by_name[n]["state"] for n in (first, second, third)] == [
        "retired",
        "retired",
        "serving",
    ]
    wait_for("the second revision drained", lambda: drained(cloud, second))
    assert by_name[second]["env"] == {
        "ROLLOUT_MARK": "2",
        "RECLAIM_PIPELINE_MODULES": PIPELINES,
    }
    assert by_name[third]["env"]["RECLAIM_PIPELINE_MODULES"] == PIPELINES  # kept
    revs = revision_of_instances(cloud)
    shutdowns = {i["id"]: i["shutdown"] for i in cloud.service("claim").stats()["instance_list"]}
    for index, revision in revs.items():
        if revision == first:  # Cloud Run's drain: they ended their jobs first
            assert shutdowns[index]["reason"] == "rollout"
            assert shutdowns[index]["outcome"] == "exited"

    # which revision ran what, from the instances' logs
    lines = log_lines(Path(cloud.endpoints["log_dir"]), revs)
    stages_on = Counter(rev for rev, e in lines if e.get("message") == "stage finished")
    assert stages_on[first] and stages_on[second] and stages_on[third], stages_on
    owner_rev = {e["owner"]: rev for rev, e in lines if e.get("message") == "claimed"}
    handed = [
        (owner_rev.get(e["owner"]), job_id)
        for job_id, rec in records.items()
        for e in rec["history"]
        if e["event"] == "handed back"
    ]
    assert second in {rev for rev, _ in handed}, handed  # rollout 2 caught a job mid-stage
    assert first not in {rev for rev, _ in handed}, handed  # rollout 1 let its jobs end
    for _rev, job_id in handed:
        last = [e for e in records[job_id]["history"] if e["event"] == "claimed"][-1]
        assert owner_rev.get(last["owner"]) == third  # resumed on the newest revision
