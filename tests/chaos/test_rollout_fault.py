"""The rollout fault on its own (tests/chaos/rollout_fault.py): submit's new revision
first, then claim's mid-batch, drained at once; every job ends once and none for its code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, all_terminal, submit_batch
from tests.chaos.rollout_fault import RolloutFault, check

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]
JOBS = 16
DEADLINE_S = 150.0


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=8.0,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=5.0,
        max_delivery_attempts=100,
        function_env={"RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2"},
    ) as c:
        yield c


def test_a_rollout_of_submit_then_claim_mid_batch(cloud: LocalCloud) -> None:
    watch = Watch(cloud)
    payload = {"stages": 3, "sleep_s": [0.5, 3.0, 0.5], "output": True}
    fault = RolloutFault()
    ids: list[str] = []

    def mid_pipeline() -> bool:  # claim's rollout lands while a job is in its middle stage
        records = watch.snapshot(ids)
        return any(
            r["status"] == "running" and (r.get("checkpoint") or {}).get("next_stage") == 1
            for r in records.values()
        )

    t0 = time.monotonic()
    records: dict[str, dict[str, Any]] = {}
    while time.monotonic() - t0 < DEADLINE_S:
        line = fault.step(cloud, watch, ready=mid_pipeline)
        if line:
            print(line)
        if fault.state == "submit first" and not ids:  # the batch starts as submit rolls out
            _batch, ids = submit_batch(
                cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": payload}] * JOBS
            )
        records = watch.snapshot(ids + fault.fresh_ids)
        if fault.done and all_terminal(records):
            break
        time.sleep(0.2)
    assert fault.done and all_terminal(records), (fault.state, records)
    assert check(records, fault) == []
    assert all(r["status"] == "done" for r in records.values())
    resumed = [
        e.get("resume") for r in records.values() for e in r["history"] if e["event"] == "claimed"
    ]
    assert "by name" in resumed  # a job mid-pipeline moved to the new release by name
