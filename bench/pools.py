"""Pools (docs/pools.md): a light pool's job latency while a heavy pool is saturated,
against the light pool alone, and what 1,000 jobs of each pool cost.

One local cloud with two pools: `light` (bench-light, a job that ends at once; 1 vCPU,
0.5 GiB, concurrency 4, one warm instance) and `heavy` (bench-heavy, one stage that holds
its slot HOLD_S seconds; 2 vCPU, 4 GiB, concurrency 2, at most one instance). A light job's
latency is its record's created_at to its done write, for LIGHT_JOBS jobs submitted one
after the other (each waits for the previous one to end):
- alone: the heavy pool idle;
- saturated: every heavy slot held and HEAVY_BACKLOG more heavy jobs queued behind them,
  checked by state before and after the light jobs run (the heavy pool never had a free
  slot meanwhile).
The contrast row runs the same saturation on one claim for both pipelines (no pools file,
claim sized like the heavy pool): a light job then waits for a heavy slot.

The heavy jobs hold their slots without using the CPU (a sleep with check()): locally
every pool shares this machine's 2 cores, which on GCP each pool's own instances do not,
so CPU contention here would measure the laptop, not the design.

Cost per 1,000 jobs per pool: COST_JOBS jobs of the pool, one batch each, priced with
bench/cost.py's cited list prices (Cloud Run request-based billing, Cloud Storage
operations, Pub/Sub throughput) at each pool's own sizing; the submit function's share
is counted in both.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import cost
from bench.common import bench_cloud, median, row, wait_terminal
from bench.console import CONSOLE
from reclaim.local.observe import emulator_stats, submit_batch, topic_count
from shared import job_queue
from shared.errors import ReclaimError

LIGHT_JOBS = 20
SHARED_LIGHT_JOBS = 3
SHARED_HOLD_S = 5.0  # one claim for both: a light job waits up to this for a heavy slot
HEAVY_CONCURRENCY = 2
HEAVY_BACKLOG = 4
HOLD_S = 600.0  # longer than the run: the heavy slots stay held until cancelled
COST_JOBS = {"light": 100, "heavy": 10}
"""Jobs priced per pool: a heavy job holds one of its 2 slots COST_HEAVY_HOLD_S, so 10 of
them take 10 s of the run where the light ones end at once."""
COST_HEAVY_HOLD_S = 2.0
TARGET = 1.2
SIZING = {"light": (1.0, 0.5), "heavy": (2.0, 4.0), "submit": cost.SIZING["submit"]}
"""vCPU and GiB per instance of each pool's claim (as POOLS sizes them) and of submit."""
POOLS = {
    "pools": {
        "light": {
            "pipelines": ["bench-light"],
            "memory": "512Mi",
            "cpu": "1",
            "concurrency": 4,
            "min_instances": 1,
            "max_instances": 2,
            "timeout_seconds": 300,
            "ack_deadline_seconds": 60,
        },
        "heavy": {
            "pipelines": ["bench-heavy"],
            "memory": "4Gi",
            "cpu": "2",
            "concurrency": HEAVY_CONCURRENCY,
            "max_instances": 1,
            "timeout_seconds": 600,
            "ack_deadline_seconds": 600,
        },
    }
}
MODULES = {"RECLAIM_PIPELINE_MODULES": "bench.pool_pipelines"}


def _post(jobs_url: str, job: dict[str, Any]) -> str:
    req = urllib.request.Request(
        jobs_url,
        data=json.dumps(job).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.loads(resp.read())["id"])


def _latency(record: dict[str, Any]) -> float:
    created = datetime.fromisoformat(str(record["created_at"]))
    return (datetime.fromisoformat(str(record["updated_at"])) - created).total_seconds()


def _ended(b: Any, job_id: str, timeout_s: float = 300) -> dict[str, Any]:
    """The job's record once it is terminal (this job's own: other pools' stay pending)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = b.queue.read(job_id)
        if job_queue.is_terminal(record):
            return dict(record)
        time.sleep(0.05)
    raise TimeoutError(f"{job_id} did not end within {timeout_s:.0f} s")


def _light_latencies(b: Any, n: int) -> list[float]:
    """n light jobs, one after the other: each one's submit-to-done seconds."""
    out = []
    for _ in range(n):
        record = _ended(b, _post(b.cloud.endpoints["jobs"], {"pipeline": "bench-light"}))
        assert record.get("status") == "done", record
        out.append(_latency(record))
    return out


def _cancel(b: Any, ids: list[str]) -> None:
    """Free the heavy slots (at each job's next check()); one that ended already stays."""
    for job_id in ids:
        with contextlib.suppress(ReclaimError):
            b.queue.cancel(job_id, by="bench")
    for job_id in ids:
        _ended(b, job_id)


def _heavy_running(b: Any, ids: list[str]) -> int:
    return sum(r.get("status") == "running" for r in b.snapshot(ids).values())


def _saturate(b: Any, tag: str, hold_s: float = HOLD_S) -> list[str]:
    """Every heavy slot held, HEAVY_BACKLOG jobs queued behind: their ids, once so."""
    jobs = [
        {"pipeline": "bench-heavy", "id": f"{tag}-{i}", "payload": {"hold_s": hold_s}}
        for i in range(HEAVY_CONCURRENCY + HEAVY_BACKLOG)
    ]
    _batch, ids = submit_batch(b.cloud.endpoints["jobs"], jobs)
    deadline = time.monotonic() + 120
    while _heavy_running(b, ids) < HEAVY_CONCURRENCY:
        if time.monotonic() > deadline:
            raise TimeoutError("the heavy slots never filled")
        time.sleep(0.2)
    return ids


def _still_saturated(b: Any, ids: list[str]) -> bool:
    records = b.snapshot(ids).values()
    running = sum(r.get("status") == "running" for r in records)
    queued = sum(r.get("status") == "queued" for r in records)
    return running == HEAVY_CONCURRENCY and queued == HEAVY_BACKLOG


def _isolation(pools_file: Path) -> dict[str, Any]:
    env = {**MODULES, "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2"}
    with bench_cloud(
        pools_file=pools_file, stale_seconds=30.0, sweep_interval_seconds=0, function_env=env
    ) as b:
        _light_latencies(b, 2)  # warm both submit and the light pool's instance
        CONSOLE.say(f"pools: {LIGHT_JOBS} light jobs, the heavy pool idle")
        alone = _light_latencies(b, LIGHT_JOBS)
        heavy = _saturate(b, f"sat-{uuid.uuid4().hex[:6]}")
        CONSOLE.say(f"pools: {LIGHT_JOBS} light jobs, every heavy slot held, a backlog behind")
        saturated_before = _still_saturated(b, heavy)
        saturated = _light_latencies(b, LIGHT_JOBS)
        saturated_after = _still_saturated(b, heavy)
        _cancel(b, heavy)  # free the cloud for the cost run
        costs = _costs(b)
    return {
        "alone_s": alone,
        "saturated_s": saturated,
        "saturated_before": saturated_before,
        "saturated_after": saturated_after,
        "cost": costs,
    }


def _shared() -> dict[str, Any]:
    """The same saturation on one claim for both pipelines (no pools), sized like heavy."""
    with bench_cloud(
        stale_seconds=30.0,
        sweep_interval_seconds=0,
        max_instances=1,
        concurrency=HEAVY_CONCURRENCY,
        function_env=MODULES,
    ) as b:
        _light_latencies(b, 1)
        heavy = _saturate(b, f"one-{uuid.uuid4().hex[:6]}", SHARED_HOLD_S)
        CONSOLE.say(f"one claim: {SHARED_LIGHT_JOBS} light jobs behind the heavy ones")
        # submitted together while every slot is held: each waits for the heavy backlog
        _batch, light = submit_batch(
            b.cloud.endpoints["jobs"], [{"pipeline": "bench-light"}] * SHARED_LIGHT_JOBS
        )
        waited = [_latency(_ended(b, job_id)) for job_id in light]
        _cancel(b, heavy)
    return {"light_s": waited}


def _snapshot(b: Any) -> dict[str, Any]:
    platform = b.cloud.platform
    services = {"light": "claim-light", "heavy": "claim-heavy", "submit": "submit"}
    stats = emulator_stats(b.cloud.endpoints["emulator_admin"])
    subs = stats.get("subscriptions") or {}
    return {
        "instance_seconds": {
            k: platform.service(s).stats()["billing"]["instance_seconds"]
            for k, s in services.items()
        },
        "requests": {
            k: platform.service(s).stats()["requests"]["received"] for k, s in services.items()
        },
        "publishes": sum(
            topic_count(stats, t, "published")
            for t in ("reclaim-jobs", "reclaim-jobs-light", "reclaim-jobs-heavy")
        ),
        "pushes": sum(int(v.get("push_attempts") or 0) for v in subs.values()),
        "gcs": dict(b.proxy.counts()),
    }


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            out[key] = {k: v - before[key].get(k, 0) for k, v in value.items()}
        else:
            out[key] = value - before[key]
    return out


def _idle(b: Any, service: str) -> None:
    """Every request of a pool's service answered (billing counts them when they end)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b.cloud.platform.service(service).stats()["in_flight"] == 0:
            return
        time.sleep(0.2)


def _costs(b: Any) -> dict[str, Any]:
    """COST_JOBS jobs of each pool, measured apart: what each pool's 1,000 jobs cost."""
    out = {}
    for pool, payload in (("light", {}), ("heavy", {"hold_s": COST_HEAVY_HOLD_S})):
        before = _snapshot(b)
        jobs = [{"pipeline": f"bench-{pool}", "payload": payload}] * COST_JOBS[pool]
        _batch, ids = submit_batch(b.cloud.endpoints["jobs"], jobs)
        records = wait_terminal(b.queue, ids, timeout_s=600)
        _idle(b, f"claim-{pool}")
        measured = _delta(_snapshot(b), before)
        measured["done"] = sum(r.get("status") == "done" for r in records.values())
        out[pool] = {"measured": measured, "usd": price(pool, measured)}
    return out


def price(pool: str, m: dict[str, Any]) -> dict[str, float]:
    """Per 1,000 jobs of one pool: its claim's and submit's compute at their sizing, the
    requests, GCS operations and Pub/Sub messages (bench/cost.py's prices; pure)."""
    p = {k: v["usd"] for k, v in cost.PRICES.items()}
    scale = cost.PER / COST_JOBS[pool]
    compute = sum(
        m["instance_seconds"][k] * scale * (SIZING[k][0] * p["cpu_s"] + SIZING[k][1] * p["gib_s"])
        for k in (pool, "submit")
    )
    gcs = m["gcs"]
    class_a = (gcs.get("write", 0) + gcs.get("list", 0)) * scale
    class_b = (gcs.get("read", 0) + gcs.get("other", 0)) * scale
    requests = (m["requests"][pool] + m["requests"]["submit"]) * scale
    messages = (m["publishes"] + m["pushes"]) * scale
    usd = {
        "compute": compute,
        "requests": requests * p["request"],
        "gcs": class_a * p["class_a"] + class_b * p["class_b"],
        "pubsub": messages * 1000 * p["pubsub_byte"],
    }
    usd["total"] = sum(usd.values())
    return {k: round(v, 5) for k, v in usd.items()}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        pools_file = Path(folder) / "pools.json"
        pools_file.write_text(json.dumps(POOLS))
        isolated = _isolation(pools_file)
    shared = _shared()
    alone, saturated = median(isolated["alone_s"]), median(isolated["saturated_s"])
    ratio = saturated / alone
    held = isolated["saturated_before"] and isolated["saturated_after"]
    one = median(shared["light_s"])
    costs = isolated["cost"]
    used = ("cpu_s", "gib_s", "request", "class_a", "class_b", "pubsub_byte")
    sources = cost.cited({k: cost.PRICES[k] for k in used})

    def cost_figure(pool: str) -> str:
        u, m = costs[pool]["usd"], costs[pool]["measured"]
        return (
            f"${u['total']:.4f}: compute ${u['compute']:.4f} ({m['instance_seconds'][pool]:.0f} "
            f"instance-s of claim-{pool} per {COST_JOBS[pool]}), requests ${u['requests']:.4f}, "
            f"GCS ${u['gcs']:.4f}, Pub/Sub ${u['pubsub']:.5f}"
        )

    sized = {k: f"{v[0]:g} vCPU / {v[1]:g} GiB" for k, v in SIZING.items()}
    return {
        "raw": {**isolated, "shared": shared, "pools": POOLS, "checked": cost.CHECKED},
        "rows": [
            row(
                "light pool job latency, heavy pool saturated (pools)",
                f"median {saturated * 1000:.0f} ms over {LIGHT_JOBS} jobs (every heavy slot "
                f"held and {HEAVY_BACKLOG} queued throughout: {held})",
                f"the light pool alone: median {alone * 1000:.0f} ms",
                f"{ratio:.2f}x",
                f"<= {TARGET}x",
                ratio <= TARGET and held,
                f"one claim for both (no pools, heavy's sizing, heavy jobs of "
                f"{SHARED_HOLD_S:g} s, {HEAVY_BACKLOG} queued): light jobs submitted together "
                f"then wait {one:.1f} s (median of {SHARED_LIGHT_JOBS}) for a slot",
            ),
            row(
                f"cost per 1,000 jobs, light pool ({sized['light']})",
                cost_figure("light"),
                f"bench-light: ends at once; list prices read {cost.CHECKED}",
                "-",
                "cited prices",
                None,
                f"prices: {sources}",
            ),
            row(
                f"cost per 1,000 jobs, heavy pool ({sized['heavy']})",
                cost_figure("heavy"),
                f"bench-heavy: holds its slot {COST_HEAVY_HOLD_S:g} s, {HEAVY_CONCURRENCY} "
                "per instance",
                "-",
                "cited prices",
                None,
                "the same prices; a job's compute is its pool's size x its time",
            ),
        ],
    }
