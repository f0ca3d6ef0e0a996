"""The fan-out chaos test: a 1,000-child fan-out while its parent is SIGKILLed during the
children's creation and random claim instances (running children) are killed.

The parent's first attempt dies after its first 250 children (the test-only fault
``fan-out.1:<parent>``: shared.faults, right after a chunk is written), so the sweep
rescues it and its rerun of the stage creates the other 750 (ids derived from the parent,
its stage and the index: nothing twice). While the children run, at seeded random moments
reached by state (children done), claim instances are SIGKILLed (the platform's hard
reclaim: a host failure), so the children they ran wait for the staleness rescue. Then:
exactly 1,000 child records, every one done; the join stage ran exactly once (one
"join ran" line, one resume of the parent) and saw every child; no open marker and no
pending marker left. RECLAIM_CHAOS_SEED replays one run.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared.features.waits import rules
from shared.storage import record_name_id
from tests import polling
from tests.integration.cloud_support import lines_about, record_buckets, records_bucket

CHILDREN = 1000
KILLS_AFTER = (50, 200)  # children done since the park when an instance is killed
PARENT = f"chaos-fan-{uuid.uuid4().hex[:8]}"
SEED = int(os.environ.get("RECLAIM_CHAOS_SEED") or random.SystemRandom().randrange(10**6))

# bounded: 1,000 children on 3 instances x 4 slots take minutes on 2 busy cores
pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=3,
        concurrency=4,
        stale_seconds=4.0,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=2.0,
        idle_timeout_seconds=5.0,
        function_env={
            "RECLAIM_PIPELINE_MODULES": "tests.integration.wait_pipelines",
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
            "RECLAIM_MAX_ATTEMPTS": "8",
            "RECLAIM_FAULT_KILL": f"fan-out.1:{PARENT}",  # shared.faults, test-only
        },
    ) as c:
        yield c


def view(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    resp = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=60)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def child_ids(cloud: LocalCloud) -> list[str]:
    prefix = f"{PARENT}-s0-"
    names = [b.name for bucket in record_buckets(cloud) for b in bucket.list_blobs(prefix="jobs/")]
    return sorted(i for i in map(record_name_id, names) if i and i.startswith(prefix))


def done_children(cloud: LocalCloud, fanout: str) -> int:
    """Children done, from the batch's markers and indexes (GET /batches/<id>/progress)."""
    resp = requests.get(f"{cloud.endpoints['submit']}/batches/{fanout}/progress", timeout=60)
    return int(resp.json().get("done", 0)) if resp.status_code == 200 else 0


def test_a_thousand_children_with_the_parent_and_children_killed_join_once(
    cloud: LocalCloud,
) -> None:
    rng = random.Random(SEED)
    where = f"seed {SEED} (RECLAIM_CHAOS_SEED={SEED} replays it)"
    body = {"id": PARENT, "pipeline": "fan", "payload": {"n": CHILDREN}, "max_attempts": 8}
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=60)
    assert resp.status_code == 202, resp.text
    fanout = rules.fanout_id(PARENT, 0)
    # the first attempt dies mid-creation; the rescue's rerun parks the parent
    shown = polling.wait_for(
        "the parent parked by its rerun",
        lambda: (v := view(cloud, PARENT)).get("park") and v,
        timeout=300,
        interval=0.5,
    )
    assert shown["attempts"] >= 2, where  # the kill happened during creation
    claim = cloud.service("claim")
    kills = 0
    base = done_children(cloud, fanout)
    for at in (min(base + n, CHILDREN - 100) for n in KILLS_AFTER):
        polling.wait_for(
            f"{at} children done",
            lambda a=at: done_children(cloud, fanout) >= a,
            timeout=600,
            interval=0.5,
        )
        live = sorted(claim.pids())
        if live:
            claim.reclaim(rng.choice(live), graceful=False)  # SIGKILL: its children go stale
            kills += 1
    final = polling.wait_for(
        "the parent ended",
        lambda: (v := view(cloud, PARENT))["status"] in ("done", "failed", "cancelled") and v,
        timeout=900,
        interval=1.0,
    )
    assert final["status"] == "done", (where, final.get("error"))
    assert kills >= 1, where
    ids = child_ids(cloud)
    assert len(ids) == CHILDREN and len(set(ids)) == CHILDREN, where
    assert final["result"]["children"] == CHILDREN and final["result"]["indexes"] is True
    assert final["result"]["statuses"] == ["done"], where
    assert final["result"]["squares"] == sum(i * i for i in range(CHILDREN)), where
    history = [e["event"] for e in final["history"]]
    assert history.count("resumed") == 1, (where, history)
    joins = [
        x
        for lines in lines_about(cloud.config.log_dir, PARENT).values()
        for x in lines
        if x.get("message") == "join ran"
    ]
    assert len(joins) == 1 and joins[0]["children"] == CHILDREN, where
    assert not list(records_bucket(cloud).list_blobs(prefix=rules.open_prefix(fanout))), where
    leftover = polling.wait_for(
        "no pending marker left",
        lambda: not [b for r in record_buckets(cloud) for b in r.list_blobs(prefix="pending/")],
        timeout=120,
        interval=1.0,
    )
    assert leftover, where
