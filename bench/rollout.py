"""A claim rollout in the middle of a 200-job batch, against the same batch without one.

3 claim instances x concurrency 4 on the local Cloud Run. The same batch (200 `demo` jobs,
3 stages of 0.3 s, each stage writing its output) runs twice: first as it is, then with
claim's next release (reclaim/local/demo_release.py: `demo` plus a `receipt` stage) deployed once
half the jobs have ended, its old revision drained at once (busy instances get SIGTERM mid-
job and hand their jobs back; the new release resumes them by stage name).

Figures: jobs lost (not done at the end; target 0), completed stages run again (a stage
output written by more than one attempt; target 0: a stage's output is written only when
it completes), jobs resumed by name, and the wall-time ratio of the two batches (target
<= 1.3x, on the median of REPEATS rollouts, shown with min and max). Batches with and
without a rollout alternate, starting and ending with one; each rollout's baseline is the
mean wall time of the batches next to it (the machine's load drifts).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any

from bench.common import Bench, bench_cloud, row, wait_terminal
from bench.console import CONSOLE
from bench.fixtures import clear_bucket
from bench.spread import Spread
from reclaim.local import wiring
from reclaim.local.demo import RELEASE_MODULE
from reclaim.local.observe import counts_by_status, submit_batch

JOBS = 200
PAYLOAD = {"stages": 3, "sleep_s": 0.3, "output": True}
RATIO_TARGET = 1.3
REPEATS = 3


def _batch(b: Bench, roll_out: bool) -> dict[str, Any]:
    # every batch starts on an emptied bucket: fake-gcs-server's memory backend scans a
    # bucket's objects on every read and write (bench/fixtures.py), so the previous
    # batches' records and outputs would slow each batch down more than the last
    clear_bucket(_storage(b), b.cloud.gcs_url, b.cloud.endpoints["records_bucket"])
    started = time.monotonic()
    _id, ids = submit_batch(
        b.cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": PAYLOAD}] * JOBS
    )
    revision, serving_s, before = None, None, b.claim_subscription()
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
    pushes = b.claim_subscription()
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


def _storage(b: Bench) -> Any:
    return wiring.storage_client(b.cloud.gcs_url, b.cloud.endpoints["project"])


def _rerun_stages(b: Bench, ids: list[str]) -> int:
    """Stage outputs written by more than one attempt (outputs/<id>/<attempt>/<name>)."""
    storage = _storage(b)
    bucket = b.cloud.endpoints["records_bucket"]
    wanted = set(ids)
    per_stage: Counter[tuple[str, str]] = Counter()
    for blob in storage.list_blobs(bucket, prefix="outputs/"):
        _outputs, job_id, _attempt, name = blob.name.split("/", 3)
        if job_id in wanted:
            per_stage[(job_id, name)] += 1
    return sum(n - 1 for n in per_stage.values() if n > 1)


def run() -> dict[str, Any]:
    batches: list[dict[str, Any]] = []
    with bench_cloud(max_instances=3, min_instances=3, concurrency=4, stale_seconds=30.0) as b:
        for i in range(2 * REPEATS - 1):  # with, without, with, ...: starting and ending with
            if i % 2 == 0:
                CONSOLE.progress(f"rollout {i // 2 + 1}/{REPEATS}")
            batches.append(_batch(b, roll_out=i % 2 == 0))
    rollouts = batches[0::2]
    baselines = batches[1::2]
    # each rollout's baseline is the mean of the batches next to it (one for the first and
    # the last), so a drift of the shared machine's load between batches weighs on both
    ratios = [
        r["wall_s"] / statistics.mean(x["wall_s"] for x in baselines[max(k - 1, 0) : k + 1])
        for k, r in enumerate(rollouts)
    ]
    ratio = Spread.of(ratios)
    lost = sum(r["lost"] for r in rollouts)
    rerun = sum(r["rerun_stages"] for r in rollouts)
    met = lost == 0 and rerun == 0 and ratio.meets(RATIO_TARGET, at_least=False)
    first = rollouts[0]
    walls = Spread.of(r["wall_s"] for r in rollouts)
    base = Spread.of(x["wall_s"] for x in baselines)
    return {
        "raw": {
            "rollouts": rollouts,
            "baselines": baselines,
            "ratios": [round(x, 3) for x in ratios],
            "ratio": ratio.to_json(),
            "jobs": JOBS,
        },
        "rows": [
            row(
                f"claim rollout mid-batch ({JOBS} jobs, {REPEATS} rollouts)",
                f"jobs lost {lost}, completed stages re-run {rerun}; "
                f"{sum(r['handbacks'] for r in rollouts)} hand-back(s), "
                f"{sum(r['by_name'] for r in rollouts)} resumed by stage name, "
                f"{first['receipts']} ran the added stage (first rollout); wall "
                f"{walls.shown(1)} s",
                f"the same batch without a rollout, run between the rollouts: wall "
                f"{base.shown(1)} s, lost {sum(x['lost'] for x in baselines)}",
                f"{ratio.shown(2)}x the wall time",
                f"0 lost, 0 re-run, <= {RATIO_TARGET:g}x (median)",
                met,
                "the first rollout deploys the next release (an added stage); the later ones "
                "deploy it again (a new revision of the same code), each mid-batch with the "
                "old revision drained at once",
            )
        ],
    }
