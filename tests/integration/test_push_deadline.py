"""A push cut at its deadline while the instance keeps running, as Pub/Sub and Cloud Run
do, and the job still ends exactly once.

Two deadlines can cut a push to claim: Pub/Sub's ack deadline (it stops waiting for the
answer and redelivers, https://cloud.google.com/pubsub/docs/push) and Cloud Run's request
timeout (the front answers 504 while the instance goes on,
https://cloud.google.com/run/docs/configuring/request-timeout). Either way the job keeps
running in the instance that claimed it, the redelivered doorbell finds it running and
fresh and is acked, and the job is claimed once and done once."""

from __future__ import annotations

from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, emulator_stats, submit_batch
from tests.polling import wait_for

JOB_S = 15.0  # 3 stages of 5 s: longer than either deadline below


@pytest.mark.parametrize(
    ("cut_by", "overrides"),
    [
        ("Pub/Sub's ack deadline", {"claim_ack_deadline_seconds": 10}),
        ("Cloud Run's request timeout", {"claim_timeout_seconds": 5.0}),
    ],
)
def test_a_push_cut_at_its_deadline_leaves_the_job_running_and_it_ends_once(
    cut_by: str, overrides: dict[str, Any]
) -> None:
    # One warm instance (min_instances): the deadline must cut the job's run, not a cold
    # start, which on a busy machine can itself outlast the 5 s request timeout.
    with LocalCloud.for_tests(
        max_instances=1,
        min_instances=1,
        concurrency=4,
        stale_seconds=30.0,
        sweep_interval_seconds=1.0,
        function_env={"RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.5"},
        **overrides,
    ) as cloud:
        watch = Watch(cloud)
        claim = cloud.service("claim")
        payload = {"stages": 3, "sleep_s": JOB_S / 3, "output": True}
        _batch, (job_id,) = submit_batch(
            cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": payload}]
        )

        def pushes() -> dict[str, int]:
            subs = emulator_stats(cloud.endpoints["emulator_admin"])["subscriptions"]
            counts = next(v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION))
            return {k: int(counts.get(k) or 0) for k in ("push_failures", "acked")}

        # the first push is cut while the job runs; its redelivery is answered at once
        wait_for(f"the push cut by {cut_by}", lambda: pushes()["push_failures"] >= 1)
        assert watch.snapshot([job_id])[job_id]["status"] == "running"
        if "timeout" in cut_by:
            assert claim.stats()["requests"]["timed_out"] >= 1  # the front's 504
        wait_for("the redelivered doorbell acked", lambda: pushes()["acked"] >= 1)

        record = wait_for(
            "the job done",
            lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "done" and r,
        )
        events = [e["event"] for e in record["history"]]
        assert events.count("claimed") == 1 and events.count("done") == 1, events
        assert record["attempts"] == 1 and record["rescues"] == 0
        assert record["result"]["attempt"] == 1 and len(record["result"]["outputs"]) == 3
        # the cut request kept its slot until the instance answered it (no slot was lent
        # to a request that would have queued inside gunicorn behind it)
        wait_for("every slot free again", lambda: claim.stats()["in_flight"] == 0)
        stats = claim.stats()
        assert stats["peak_in_flight_per_instance"] <= 4 and stats["instances"]["peak"] == 1
