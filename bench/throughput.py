"""Throughput of the claim side: 600 no-op jobs, reclaim's claim against a floor claim on
the same platform, interleaved in the same repeats, five of them, the median and the lowest
judged, and the claim's CPU-seconds per job against the floor's.

Each batch: one POST /jobs of 600 one-stage `demo` jobs (no sleep) to a local cloud (sweep
every 3 s) while the claim subscription is held as a pull subscription, so the doorbells
wait in Pub/Sub; once the POST has returned the clock starts and the subscription is
switched back to push (ModifyPushConfig,
https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/modifyPushConfig),
and runs until the pending index is empty. So the figure is the claim side's alone, a
batch that is all there when delivery starts; submit's time is shown beside it, not in it.
The rate is the steady one, between the 10th and the 90th percentile of the jobs' done
times (their records' updated_at), so the push window's slow start and the tail do not
weigh on a batch of a few seconds.
Two shapes, with the instances kept warm (min_instances = max_instances, so the figure is
the queue's, not start-ups'): max_instances x concurrency = 2 x 4 (the incident's) and
8 x 4.

The floor is the same batch through a second local cloud of the same shape whose claim is
bench/floor_claim.py: the same pushes, platform front, functions-framework and storage
client, and per doorbell only the four calls any claim needs (read, claim and done
writes, each generation-matched, marker delete). So the ratio is what reclaim's claim
(policy, stage runner, heartbeats, drain, flow gate, logs) costs on top of the least a
claim can do here. Each repeat runs both, each on an emptied bucket (the emulator's writes
slow down as a bucket fills), the floor first in odd repeats and reclaim first in even
ones, so a neighbour's load that comes and goes falls on both alike.

A rate on 2 shared cores moves with the neighbours' load (the same code measured 0.40 to
0.70 of the floor across four runs of 3 repeats); CPU time does not, as much: the claim
instances' user and system CPU-seconds (/proc/<pid>/stat of their process groups) per
job, reclaim's against the floor's, is the row's third figure. (Until 2026-12-02 the floor
was those four calls from a script on as many threads, without the HTTP hops: 0.35 of it.)
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from datetime import datetime
from typing import Any

from bench.common import (
    claim_subscription,
    local_cloud,
    row,
    snapshot,
    wait_pending_empty,
    watching_queue,
)
from bench.console import CONSOLE
from bench.fixtures import clear_bucket
from bench.spread import Spread
from reclaim.local import wiring
from reclaim.local.cloud import DEFAULT_FUNCTIONS, FunctionSpec, LocalCloud
from reclaim.local.observe import instance_pids
from shared.jobs import JobStatus

JOBS = 600
SHAPES = ((2, 4), (8, 4))
"""(claim max instances, concurrency): the incident's shape, then four times the instances."""
TARGET = 0.65
"""Reclaim's claim at least 0.65 of the floor's rate (the median of the repeats). The
floor makes 4 calls per job and reclaim's claim of a no-op job 5 to 6 (claim and done
writes, the marker's delete, the record and workflows parent reads, a due hint or pause
flag read now and then: the calls rows), so calls alone allow about 0.7 to 0.8; the rest
is its CPU. With a listing of the pending index on every freed slot and a JSON log line
per step the medians were 0.40 to 0.70; with the drain listing only on a hint and the
per-step lines at DEBUG a diagnostic run gave 0.85 to 0.95."""
TARGET_LOW = 0.5
"""And no repeat below 0.5 of the floor."""
CPU_FACTOR = 1.5
"""The claim instances' CPU-seconds per job at most 1.5x the floor claim's."""
FLOOR = FunctionSpec("bench/floor_claim.py", "claim")


def claim_functions(floor: bool) -> dict[str, FunctionSpec]:
    """A local cloud's functions: the project's, or with the floor serving as claim."""
    return {**DEFAULT_FUNCTIONS, "claim": FLOOR} if floor else dict(DEFAULT_FUNCTIONS)


REPEATS = 5


def _push(cloud: LocalCloud, on: bool) -> None:
    """Switch the claim subscription to pull (the doorbells wait) or back to push."""
    t = cloud.config.topology
    spec = next(x for x in t.subscriptions if x.name == wiring.CLAIM_SUBSCRIPTION)
    req = wiring.subscription_request(t, spec, cloud.function_urls())
    publisher, subscriber = wiring.pubsub_admin_clients(cloud.pubsub_host)
    try:
        config = req["push_config"] if on else {}
        subscriber.modify_push_config(request={"subscription": req["name"], "push_config": config})
    finally:
        publisher.transport.close()
        subscriber.transport.close()


def _batch(cloud: LocalCloud, client: Any, slots: int) -> dict[str, Any]:
    """Submit with the doorbells held, then time the claim side (reclaim's or the
    floor's) from their release."""
    queue = watching_queue(cloud)
    clear_bucket(client, cloud.gcs_url, cloud.endpoints["records_bucket"])
    jobs = [{"pipeline": "demo", "payload": {"stages": 1}} for _ in range(JOBS)]
    req = urllib.request.Request(
        cloud.endpoints["jobs"],
        data=json.dumps({"jobs": jobs}).encode(),
        headers={"Content-Type": "application/json"},
    )
    _push(cloud, on=False)
    posted = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as resp:
        ids = [j["id"] for j in json.loads(resp.read())["jobs"]]
    submitted = time.perf_counter() - posted
    c0 = _cpu()
    claim0 = claim_cpu_s(cloud)
    start = time.perf_counter()
    _push(cloud, on=True)
    wait_pending_empty(queue, timeout_s=600, poll_s=0.1)
    wall = time.perf_counter() - start
    claim_cpu = claim_cpu_s(cloud) - claim0
    busy = _busy(c0, _cpu())
    records = snapshot(queue, ids)
    ended = [r for r in records.values() if r.get("status") == JobStatus.DONE]
    done = len(ended)
    steady = steady_rate([datetime.fromisoformat(str(r["updated_at"])) for r in ended])
    return {
        "jobs": JOBS,
        "done": done,
        "submit_s": round(submitted, 3),
        "wall_s": round(wall, 3),
        "steady_jobs_per_s": steady,
        "slots": slots,
        "cpu_busy": busy,
        "claim_cpu_s": round(claim_cpu, 3),
    }


STEADY = (0.1, 0.9)
"""The completions a steady rate is measured between: the push window's slow start (a few
pushes at first, more as they succeed) and the last slots' tail left out. A batch the
floor ends in under 3 s measured end to end spread 82-136 jobs/s within one run."""
STEADY_MIN = 10
"""Fewer completions than this tell no steady rate (the batch's end-to-end one stands)."""


def steady_rate(ended: list[datetime]) -> float | None:
    """Jobs per second between the STEADY share of completions, from their own clocks
    (the records' updated_at of their done write); None with fewer than STEADY_MIN, or
    all at one instant (pure)."""
    if len(ended) < STEADY_MIN:
        return None
    times = sorted(ended)
    first, last = (round(q * (len(times) - 1)) for q in STEADY)
    span = (times[last] - times[first]).total_seconds() if last > first else 0.0
    return round((last - first) / span, 2) if span > 0 else None


def _cpu() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine (Linux /proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def claim_cpu_s(cloud: LocalCloud) -> float:
    """User and system CPU-seconds so far of every process of the claim instances
    (gunicorn's master and worker, all threads: /proc/<pid>/stat, utime and stime). The
    instances are warm for the whole variant (min = max), so a difference of two readings
    is what they spent between them."""
    total = 0
    for pids in instance_pids(cloud).values():
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone, or not Linux
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / _TICK


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of all CPUs that was busy between two _cpu() readings."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 2) if total > 0 else None


def _cloud(instances: int, max_concurrent: int, *, floor: bool) -> LocalCloud:
    """Warm instances (min = max), so the figure is the queue's, not start-ups'; the
    floor's cloud serves bench/floor_claim.py as its claim."""
    return local_cloud(
        functions=claim_functions(floor),
        max_instances=instances,
        min_instances=instances,
        concurrency=max_concurrent,
        sweep_interval_seconds=3.0,
        stale_seconds=30.0,
    )


def _rate(batch: dict[str, Any]) -> float:
    """A batch's steady rate, or its end-to-end one when it had too few jobs to tell."""
    return float(batch["steady_jobs_per_s"] or batch["done"] / batch["wall_s"])


def _variant(instances: int, max_concurrent: int) -> dict[str, Any]:
    slots = instances * max_concurrent
    repeats: list[dict[str, Any]] = []
    floor_cloud = _cloud(instances, max_concurrent, floor=True)
    cloud = _cloud(instances, max_concurrent, floor=False)
    with floor_cloud, cloud:
        clients = {
            c: wiring.storage_client(c.gcs_url, c.config.topology.project)
            for c in (floor_cloud, cloud)
        }
        for i in range(REPEATS):
            CONSOLE.progress(f"{instances}x{max_concurrent} slots: repeat {i + 1}/{REPEATS}")
            first, second = (floor_cloud, cloud) if i % 2 == 0 else (cloud, floor_cloud)
            ran = {c: _batch(c, clients[c], slots) for c in (first, second)}  # interleaved
            floor, framework = ran[floor_cloud], ran[cloud]
            ratio = _rate(framework) / _rate(floor)
            repeats.append(
                {
                    "framework": framework,
                    "floor": floor,
                    "ratio": round(ratio, 3),
                    "floor_first": first is floor_cloud,
                }
            )
        claim = claim_subscription(cloud)
        platform = cloud.service("claim").stats()
    return {
        "instances": instances,
        "max_concurrent": max_concurrent,
        "repeats": repeats,
        "ratio": Spread.of(r["ratio"] for r in repeats).to_json(),
        "cpu_per_job": cpu_per_job(repeats),
        "pushes": claim.get("push_attempts", 0),
        "push_failures": claim.get("push_failures", 0),
        "refused_429": platform["requests"]["refused"],
    }


def run() -> dict[str, Any]:
    variants = [_variant(*shape) for shape in SHAPES]
    return {"raw": {"variants": variants}, "rows": [_row(v) for v in variants]}


def cpu_per_job(repeats: list[dict[str, Any]]) -> dict[str, float | None]:
    """Claim CPU-seconds per job over all repeats, reclaim's and the floor's, and their
    ratio (pure)."""

    def per_job(side: str) -> float | None:
        jobs = sum(r[side]["done"] for r in repeats)
        cpu = sum(r[side].get("claim_cpu_s") or 0.0 for r in repeats)
        return cpu / jobs if jobs and cpu > 0 else None

    mine, floor = per_job("framework"), per_job("floor")
    ratio = mine / floor if mine is not None and floor else None
    return {
        "framework": None if mine is None else round(mine, 5),
        "floor": None if floor is None else round(floor, 5),
        "ratio": None if ratio is None else round(ratio, 3),
    }


def verdict(ratio: Spread, cpu_ratio: float | None) -> bool:
    """The median at least TARGET, the lowest repeat at least TARGET_LOW, the claim's CPU
    per job at most CPU_FACTOR times the floor's (pure)."""
    return (
        ratio.median >= TARGET
        and ratio.low >= TARGET_LOW
        and cpu_ratio is not None
        and cpu_ratio <= CPU_FACTOR
    )


def _row(v: dict[str, Any]) -> dict[str, Any]:
    reps = v["repeats"]
    ratio = Spread(**v["ratio"])
    rate = Spread.of(_rate(r["framework"]) for r in reps)
    floor = Spread.of(_rate(r["floor"]) for r in reps)
    submit = Spread.of(r["framework"]["submit_s"] for r in reps)
    busy = [r["framework"]["cpu_busy"] for r in reps if r["framework"]["cpu_busy"] is not None]
    cpu = v["cpu_per_job"]
    met = verdict(ratio, cpu["ratio"])
    done = sum(r["framework"]["done"] for r in reps)
    floor_done = sum(r["floor"]["done"] for r in reps)
    return row(
        f"throughput, claim side, {JOBS} no-op jobs submitted before the clock, "
        f"{v['instances']}x{v['max_concurrent']} slots",
        f"{rate.shown(1)} jobs/s, steady (between the 10th and 90th percentile of "
        f"completions; {done}/{JOBS * len(reps)} done; submit beforehand "
        f"{submit.median:.1f} s, not timed; {v['pushes']} pushes, {v['refused_429']} refused "
        f"by the platform (429); CPUs {_pct(Spread.of(busy).median if busy else None)} busy); "
        f"claim CPU {_ms(cpu['framework'])} per job",
        f"floor {floor.shown(1)} jobs/s, claim CPU {_ms(cpu['floor'])} per job: the same "
        "pushes to a claim that only reads, claims, ends and unmarks (bench/floor_claim.py), "
        "in the same repeats (interleaved)",
        f"{ratio.shown()} of the floor; CPU per job {_x(cpu['ratio'])} the floor's",
        f">= {TARGET:g} (median), >= {TARGET_LOW:g} (lowest), CPU <= {CPU_FACTOR:g}x",
        met and done == floor_done == JOBS * len(reps),
        "" if met else _note(ratio, cpu["ratio"]),
    )


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1000:.2f} ms"


def _x(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio:.2f}x"


def _pct(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f}%"


def _note(ratio: Spread, cpu_ratio: float | None) -> str:
    """Why a row missed: which part, and what the claim does beyond the floor."""
    parts = []
    if ratio.median < TARGET:
        parts.append(f"the median {ratio.median:.3f} < {TARGET:g}")
    if ratio.low < TARGET_LOW:
        parts.append(f"a repeat at {ratio.low:.3f} < {TARGET_LOW:g}")
    if cpu_ratio is None or cpu_ratio > CPU_FACTOR:
        parts.append(f"CPU per job {_x(cpu_ratio)} > {CPU_FACTOR:g}x")
    return (
        "missed: "
        + ", ".join(parts)
        + ". The floor's claim makes the four calls a job needs and nothing else, behind the "
        "same pushes; reclaim's also runs the job's stage, keeps its heartbeat and "
        "checkpoint, checks the pipeline's pause flag and flow gates, reads the due hint "
        "when a slot frees and logs its metric lines, all on the same 2 CPUs; a rate that "
        "misses while the CPU per job meets is the neighbours' load on those CPUs"
    )
