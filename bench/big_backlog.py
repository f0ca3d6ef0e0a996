"""A large batch queued at once on 8x4 slots against 500 in the same run: jobs/s and Cloud
Storage calls per job.

10,000 jobs (SIZES) on four record shards (SHARDS: RECLAIM_SHARD_BUCKETS, the layout
docs/capacity.md describes). One bucket would do for the queue; the shards are for the
emulator: fake-gcs-server's memory backend scans a bucket on every insert (bench.fixtures),
so one bucket of 10,000 jobs (three objects each, written about five times) took over ten
minutes just to submit on a shared 2-core machine; a quarter of them a bucket, a
quarter of the scan. Both sizes run on the same shards, so per job each lists every
shard where it listed one bucket (the drain's listing of the pending index: 4 list
calls where one bucket takes 1); the verdicts compare the two sizes.

One local cloud (the claim service warm at 8 instances x concurrency 4, production's
stale time and sweep cadence: 120 s, every 60 s), the functions' Cloud Storage calls
counted on the wire (bench.common.bench_cloud). Each size is submitted (POST /jobs, 1,000
a request) while the claim subscription is held as a pull subscription, so the doorbells
wait in Pub/Sub (as bench.throughput); the clock starts when it is switched back to push
and stops when the pending index is empty. Calls per job count everything the functions
did from the first POST (submit, claim, drain, sweep) until every doorbell is acked (a
job a slot took from the index still has its doorbell coming, answered with a read);
the jobs/s is the claim side's.
The buckets are emptied between sizes (fake-gcs-server's inserts slow down as a bucket
fills: bench.fixtures). The same sizes run once more on a cloud whose claim is
bench/floor_claim.py (four calls a job, nothing else): the emulator slows it as much as
reclaim as its bucket fills, so the rate's verdict is on reclaim's ratio over the
floor's.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Bench, bench_cloud, row, wait_pending_empty
from bench.console import CONSOLE
from bench.fixtures import clear_bucket
from bench.throughput import _push, claim_functions
from reclaim.local import wiring
from reclaim.local.observe import submit_batch
from shared.jobs import JobStatus

SIZES = (500, 10_000)
SHARDS = 4
INSTANCES, CONCURRENCY = 8, 4
CHUNK = 1000  # RECLAIM_MAX_BATCH_JOBS
TARGET_RATE = 0.9
TARGET_CALLS = 1.1
TIMEOUT_S = 1800.0


def _size(b: Bench, client: Any, jobs: int, side: str) -> dict[str, Any]:
    cloud = b.cloud
    for bucket in cloud.config.topology.records_buckets:
        clear_bucket(client, cloud.gcs_url, bucket)
    _push(cloud, on=False)
    b.proxy.reset()
    posted = time.perf_counter()
    ids: list[str] = []
    for first in range(0, jobs, CHUNK):
        spec = [{"pipeline": "demo", "payload": {"stages": 1}}] * min(CHUNK, jobs - first)
        ids += submit_batch(cloud.endpoints["jobs"], spec)[1]
        CONSOLE.progress(f"{side}, {jobs:,} jobs: submitted {len(ids):,}")
    submitted = time.perf_counter() - posted
    submit_calls = b.proxy.counts()
    pushes_before = b.claim_subscription().get("push_attempts", 0)
    start = time.perf_counter()
    _push(cloud, on=True)
    wait_pending_empty(b.queue, timeout_s=TIMEOUT_S, poll_s=0.2)
    wall = time.perf_counter() - start
    # a job a slot took from the index still has its doorbell coming: its push and
    # what the claim reads to answer it are that job's calls too
    acked_after = b.wait_doorbells_acked(timeout_s=TIMEOUT_S)
    pushes = b.claim_subscription().get("push_attempts", 0) - pushes_before
    calls = b.proxy.counts()
    by_prefix = b.proxy.by_prefix(statuses=True)
    examples = b.proxy.examples()
    records = b.snapshot(ids) if jobs <= CHUNK else {}
    done = (
        sum(r.get("status") == JobStatus.DONE for r in records.values())
        if records
        else _done_count(b, ids)
    )
    return {
        "jobs": jobs,
        "done": done,
        "submit_s": round(submitted, 2),
        "wall_s": round(wall, 2),
        "doorbells_acked_after_s": round(acked_after, 2),
        "pushes": pushes,
        "jobs_per_s": round(done / wall, 2),
        "calls": calls,
        "by_prefix": by_prefix,
        "examples": examples,
        "submit_calls": submit_calls,
        "calls_per_job": round(sum(calls.values()) / jobs, 3),
    }


def _done_count(b: Bench, ids: list[str]) -> int:
    """Jobs done, read in chunks (the watching queue's reads are not counted)."""
    done = 0
    for start in range(0, len(ids), CHUNK):
        records = b.snapshot(ids[start : start + CHUNK])
        done += sum(r.get("status") == JobStatus.DONE for r in records.values())
    return done


def _measure(floor: bool) -> list[dict[str, Any]]:
    """Each size on one local cloud: reclaim's claim, or the floor's (bench.throughput)."""
    with bench_cloud(
        functions=claim_functions(floor),
        max_instances=INSTANCES,
        min_instances=INSTANCES,  # warm: the figure is the queue's, not start-ups'
        concurrency=CONCURRENCY,
        stale_seconds=120.0,
        sweep_interval_seconds=60.0,
        shard_buckets=tuple(f"reclaim-records-shard-{i}" for i in range(1, SHARDS)),
    ) as b:
        client = wiring.storage_client(b.cloud.gcs_url, b.cloud.config.topology.project)
        return [_size(b, client, n, "floor" if floor else "reclaim") for n in SIZES]


def run() -> dict[str, Any]:
    measured, floors = _measure(floor=False), _measure(floor=True)
    small, big = measured
    return {
        "raw": {"sizes": measured, "floor_sizes": floors},
        "rows": [_rate_row(small, big, *floors), _calls_row(small, big)],
    }


def _rate_row(
    small: dict[str, Any],
    big: dict[str, Any],
    floor_small: dict[str, Any],
    floor_big: dict[str, Any],
) -> dict[str, Any]:
    """Reclaim's rate at the big size against the small, beside the floor claim's on the
    same sizes: the floor slows down only because fake-gcs-server does as its bucket
    fills (Cloud Storage's listing and writes do not scan a bucket), so the verdict is on
    reclaim's ratio over the floor's."""
    ratio = big["jobs_per_s"] / small["jobs_per_s"]
    floor_ratio = floor_big["jobs_per_s"] / floor_small["jobs_per_s"]
    relative = ratio / floor_ratio
    all_done = big["done"] == big["jobs"] and floor_big["done"] == floor_big["jobs"]
    return row(
        f"{big['jobs']:,} jobs queued at once, {INSTANCES}x{CONCURRENCY} slots: jobs/s",
        f"{big['jobs_per_s']:.1f} jobs/s ({big['done']:,}/{big['jobs']:,} done in "
        f"{big['wall_s']:.0f} s; submit beforehand {big['submit_s']:.0f} s, not timed) "
        f"against {small['jobs_per_s']:.1f} for {small['jobs']} jobs: {ratio:.2f}x",
        f"the floor claim (bench/floor_claim.py) on the same sizes: "
        f"{floor_big['jobs_per_s']:.1f} against {floor_small['jobs_per_s']:.1f} jobs/s: "
        f"{floor_ratio:.2f}x (the emulator's slowdown as its bucket fills)",
        f"{relative:.2f}x the floor's ratio",
        f">= {TARGET_RATE}x (reclaim's ratio over the floor's)",
        relative >= TARGET_RATE and all_done,
    )


def _calls_row(small: dict[str, Any], big: dict[str, Any]) -> dict[str, Any]:
    ratio = big["calls_per_job"] / small["calls_per_job"]
    return row(
        f"{big['jobs']:,} jobs queued at once, {INSTANCES}x{CONCURRENCY} slots: "
        "Cloud Storage calls per job",
        f"{big['calls_per_job']:.2f} ({_per_job(big)})",
        f"{small['jobs']} jobs: {small['calls_per_job']:.2f} ({_per_job(small)})",
        f"{ratio:.2f}x",
        f"<= {TARGET_CALLS}x",
        ratio <= TARGET_CALLS,
        note=_extra_calls(small, big),
    )


def _extra_calls(small: dict[str, Any], big: dict[str, Any]) -> str:
    """Where the big size's extra calls per job went, by kind, prefix and answer."""

    def per_job(m: dict[str, Any]) -> dict[str, float]:
        return {k: v / m["jobs"] for k, v in m.get("by_prefix", {}).items()}

    a, b = per_job(small), per_job(big)
    moved = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}
    shown = sorted((k for k, d in moved.items() if abs(d) >= 0.01), key=lambda k: -abs(moved[k]))
    if not shown:
        return ""
    parts = [f"{k} {a.get(k, 0.0):.2f} -> {b.get(k, 0.0):.2f}" for k in shown[:8]]
    return "calls per job by kind, prefix and answer, small -> big: " + "; ".join(parts)


def _per_job(measured: dict[str, Any]) -> str:
    jobs = measured["jobs"]
    calls = ", ".join(f"{k} {v / jobs:.2f}" for k, v in sorted(measured["calls"].items()) if v)
    return f"{calls}; pushes {measured['pushes'] / jobs:.2f}"
