"""GCS calls per job by kind, and publishes per job, on the happy path.

A 3-stage `demo` pipeline, jobs submitted one POST each (no batch marker),
2 claim instances, no scheduler tick (the sweep is measured on its own).
Calls are counted on the wire by local.faultproxy (client retries included).
Two workloads: stages of 1.2 s (every stage boundary is checkpointed: the
worst case) and no-op stages (boundaries within 1 s are coalesced).
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from bench.common import bench_cloud, row, wait_terminal

STAGES = 3
JOBS = 16
TARGET_MUTATIONS = STAGES + 4
TARGET_READS = 2.0
TARGET_PUBLISHES = 1.0


def _post(url: str, job: dict[str, Any]) -> str:
    req = urllib.request.Request(
        url, data=json.dumps(job).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.loads(resp.read())["id"])


def _measure(b: Any, sleep_s: float) -> dict[str, Any]:
    b.proxy.reset()
    pub0 = b.publishes()
    job = {"pipeline": "demo", "payload": {"stages": STAGES, "sleep_s": sleep_s}}
    start = time.monotonic()
    ids = [_post(b.cloud.endpoints["jobs"], job) for _ in range(JOBS)]
    records = wait_terminal(b.watch, ids, timeout_s=120)
    time.sleep(0.5)  # the final marker delete follows the terminal write
    counts = b.proxy.counts()
    done = sum(r.get("status") == "done" for r in records.values())
    per = {k: round(v / JOBS, 2) for k, v in counts.items()}
    return {
        "jobs": JOBS,
        "done": done,
        "sleep_s_per_stage": sleep_s,
        "wall_s": round(time.monotonic() - start, 2),
        "calls": counts,
        "per_job": per,
        "mutations_per_job": round((counts["write"] + counts["delete"]) / JOBS, 2),
        "reads_per_job": per["read"],
        "lists_per_job": per["list"],
        "publishes_per_job": round((b.publishes() - pub0) / JOBS, 2),
    }


def run() -> dict[str, Any]:
    with bench_cloud(claim_instances=2, sweep_interval_seconds=0, stale_seconds=30) as b:
        slow = _measure(b, 1.2)
        fast = _measure(b, 0.0)
    rows = [_row(f"GCS calls/job, {STAGES} stages of 1.2 s", slow)]
    rows.append(_row(f"GCS calls/job, {STAGES} no-op stages", fast))
    return {"raw": {"checkpointed": slow, "coalesced": fast}, "rows": rows}


def _row(name: str, m: dict[str, Any]) -> dict[str, Any]:
    per = m["per_job"]
    met = (
        m["mutations_per_job"] <= TARGET_MUTATIONS
        and m["reads_per_job"] <= TARGET_READS
        and m["publishes_per_job"] <= TARGET_PUBLISHES
    )
    figure = (
        f"{m['mutations_per_job']:g} mutations (write {per['write']:g}, delete "
        f"{per['delete']:g}), {per['read']:g} reads, {per['list']:g} lists, "
        f"{m['publishes_per_job']:g} publish(es)"
    )
    note = ""
    if m["reads_per_job"] > TARGET_READS or per["list"] > 0.5:
        note = (
            "the reads above 1 per job come from the drain that runs when a slot frees: it "
            "lists pending/ and reads every listed record to find an overdue one. A marker "
            "younger than stale_s/2 cannot be overdue (the record is written after it), and "
            "the listing already carries timeCreated: skipping those entries before the read "
            "brings the happy path to 1 read per job"
        )
    return row(
        name,
        figure,
        f"target S+4 = {TARGET_MUTATIONS} mutations, {TARGET_READS:g} reads, "
        f"{TARGET_PUBLISHES:g} publish",
        f"{m['mutations_per_job'] / TARGET_MUTATIONS:.2f} of the mutation budget",
        f"<= {TARGET_MUTATIONS} mut, <= 2 reads, 1 pub",
        met,
        note,
    )
