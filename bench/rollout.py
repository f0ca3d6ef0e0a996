"""A claim rollout in the middle of a 200-job batch, against the same batch without one.

3 claim instances x concurrency 4 on the local Cloud Run. The same batch (200 `demo` jobs,
3 stages of 0.3 s, each stage writing its output) runs twice: first as it is, then with
claim's next release (local/demo_release.py: `demo` plus a `receipt` stage) deployed once
half the jobs have ended, its old revision drained at once (busy instances get SIGTERM mid-
job and hand their jobs back; the new release resumes them by stage name).

Figures: jobs lost (not done at the end; target 0), completed stages run again (a stage
output written by more than one attempt; target 0: a stage's output is written only when
it completes), jobs resumed by name, and the wall-time ratio of the two batches (target
<= 1.3x). The baseline batch runs once before and once after the rollout's batch, and
their mean wall time is the baseline (the machine's load drifts between batches).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.common import Bench, bench_cloud, row, wait_terminal
from local import wiring
from local.demo import RELEASE_MODULE
from local.observe import counts_by_status, emulator_stats, submit_batch

JOBS = 200
PAYLOAD = {"stages": 3, "sleep_s": 0.3, "output": True}
RATIO_TARGET = 1.3


def _batch(b: Bench, roll_out: bool) -> dict[str, Any]:
    started = time.monotonic()
    _id, ids = submit_batch(
        b.cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": PAYLOAD}] * JOBS
    )
    revision, serving_s, before = None, None, _pushes(b)
    if roll_out:
        while sum(1 for r in b.snapshot(ids).values() if r["status"] == "done") < JOBS // 2:
            time.sleep(0.2)
        revision = b.cloud.deploy_revision(
            "claim", pipeline_modules=[RELEASE_MODULE], drain_timeout_seconds=0
        )
        deployed = time.monotonic()
        while b.cloud.revisions("claim")["serving"] != revision:
            time.sleep(0.1)
        serving_s = time.monotonic() - deployed
    records = wait_terminal(b.queue, ids, timeout_s=600)
    wall = time.monotonic() - started
    pushes = _pushes(b)
    resumes = Counter(
        e.get("resume") or "from the checkpoint"
        for r in records.values()
        for e in r["history"]
        if e["event"] == "claimed"
    )
    return {
        "wall_s": round(wall, 2),
        "revision": revision,
        "lost": JOBS - counts_by_status(records).get("done", 0),
        "rerun_stages": _rerun_stages(b, ids),
        "handbacks": sum(int(r.get("handbacks") or 0) for r in records.values()),
        "by_name": resumes.get("by name", 0),
        "receipts": sum(1 for r in records.values() if (r.get("result") or {}).get("receipt")),
        "serving_after_s": None if serving_s is None else round(serving_s, 2),
        "pushes": {k: pushes.get(k, 0) - before.get(k, 0) for k in pushes},
    }


def _pushes(b: Bench) -> dict[str, int]:
    """The claim subscription's push counters (the emulator's /stats)."""
    subs = emulator_stats(b.cloud.endpoints["emulator_admin"]).get("subscriptions") or {}
    found: dict[str, Any] = next(
        (v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION)), {}
    )
    return {k: int(v) for k, v in found.items() if isinstance(v, int)}


def _rerun_stages(b: Bench, ids: list[str]) -> int:
    """Stage outputs written by more than one attempt (outputs/<id>/<attempt>/<name>)."""
    storage = wiring.storage_client(b.cloud.gcs_url, b.cloud.endpoints["project"])
    bucket = b.cloud.endpoints["records_bucket"]
    wanted = set(ids)
    per_stage: Counter[tuple[str, str]] = Counter()
    for blob in storage.list_blobs(bucket, prefix="outputs/"):
        _outputs, job_id, _attempt, name = blob.name.split("/", 3)
        if job_id in wanted:
            per_stage[(job_id, name)] += 1
    return sum(n - 1 for n in per_stage.values() if n > 1)


def run() -> dict[str, Any]:
    with bench_cloud(max_instances=3, min_instances=3, concurrency=4, stale_seconds=30.0) as b:
        before = _batch(b, roll_out=False)
        with_rollout = _batch(b, roll_out=True)
        after = _batch(b, roll_out=False)
    # the baseline brackets the rollout (the mean of a batch before and one after), so a
    # drift of the shared machine's load between batches weighs on both sides alike
    without = {
        "wall_s": round((before["wall_s"] + after["wall_s"]) / 2, 2),
        "lost": before["lost"] + after["lost"],
    }
    ratio = with_rollout["wall_s"] / without["wall_s"]
    met = with_rollout["lost"] == 0 and with_rollout["rerun_stages"] == 0 and ratio <= RATIO_TARGET
    return {
        "raw": {"before": before, "with_rollout": with_rollout, "after": after, "jobs": JOBS},
        "rows": [
            row(
                "claim rollout mid-batch (200 jobs)",
                f"jobs lost {with_rollout['lost']}, completed stages re-run "
                f"{with_rollout['rerun_stages']}; {with_rollout['handbacks']} hand-back(s), "
                f"{with_rollout['by_name']} resumed by stage name, {with_rollout['receipts']} "
                f"ran the added stage; wall {with_rollout['wall_s']:.1f} s",
                f"the same batch without a rollout, run before and after it: wall "
                f"{before['wall_s']:.1f} s and {after['wall_s']:.1f} s, lost {without['lost']}",
                f"{ratio:.2f}x the wall time",
                f"0 lost, 0 re-run, <= {RATIO_TARGET:g}x",
                met,
            )
        ],
    }
