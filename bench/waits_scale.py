"""A fan-out of 10,000 children on four record shards: Cloud Storage calls per child,
against the 10,000-job backlog's calls per job (bench/big_backlog.py, the same cloud's
shape: 8x4 warm slots, production's stale time and sweep cadence, four shards).

One `bench-fan` parent is submitted (POST /jobs); its stage creates the 10,000 children
(ids from the parent, its stage and the index: they spread over the shards like any
job), parks, and the last child releases it; its join reads every child a page at a time.
The calls are the functions' own, counted on the wire by the proxy in front of
fake-gcs-server, from the POST until the parent is done, the pending index empty and every
doorbell acked. The baseline is the big_backlog entry of bench/results.json (its last
`make bench-scale`): the same cloud shape, 10,000 plain jobs of one stage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import bench.wait_pipelines  # noqa: F401 - the pipelines, for this process's checks
from bench.common import bench_cloud, row, wait_pending_empty
from bench.console import CONSOLE
from bench.waits import PIPELINES, _post

CHILDREN = 10_000
SHARDS = 4
INSTANCES, CONCURRENCY = 8, 4
TARGET = 1.1
TIMEOUT_S = 3600.0
RESULTS = Path(__file__).resolve().parent / "results.json"


def _baseline() -> dict[str, Any] | None:
    """The 10,000-job backlog's calls per job, as the last bench-scale measured them."""
    try:
        entry = json.loads(RESULTS.read_text())["benchmarks"]["big_backlog"]
    except (OSError, ValueError, KeyError):
        return None
    sizes = [s for s in entry.get("raw", {}).get("sizes", []) if s.get("jobs") == CHILDREN]
    if not sizes:
        return None
    return {"calls_per_job": sizes[0]["calls_per_job"], "measured_at": entry.get("measured_at")}


def run() -> dict[str, Any]:
    with bench_cloud(
        max_instances=INSTANCES,
        min_instances=INSTANCES,
        concurrency=CONCURRENCY,
        stale_seconds=120.0,
        sweep_interval_seconds=60.0,
        shard_buckets=tuple(f"reclaim-records-shard-{i}" for i in range(1, SHARDS)),
        function_env={"RECLAIM_PIPELINE_MODULES": PIPELINES},
    ) as b:
        b.proxy.reset()
        start = time.perf_counter()
        body = {"pipeline": "bench-fan", "payload": {"n": CHILDREN}}
        parent = str(_post(b.cloud.endpoints["jobs"], body).get("id"))
        deadline = time.monotonic() + TIMEOUT_S
        record: dict[str, Any] = {}
        while time.monotonic() < deadline:
            record = b.snapshot([parent]).get(parent, {})
            CONSOLE.progress(f"waits_scale: parent {record.get('status')}")
            if record.get("status") in ("done", "failed", "cancelled"):
                break
            time.sleep(5.0)
        wait_pending_empty(b.queue, timeout_s=TIMEOUT_S)
        b.wait_doorbells_acked(timeout_s=TIMEOUT_S)
        wall = time.perf_counter() - start
        calls = b.proxy.counts()
        by_prefix = b.proxy.by_prefix(statuses=True)
    per_child = sum(calls.values()) / CHILDREN
    base = _baseline()
    ratio = per_child / base["calls_per_job"] if base else None
    joined = (record.get("result") or {}).get("children")
    return {
        "raw": {
            "children": CHILDREN,
            "parent_status": record.get("status"),
            "joined": joined,
            "wall_s": round(wall, 1),
            "calls": calls,
            "by_prefix": by_prefix,
            "calls_per_child": round(per_child, 3),
            "baseline": base,
        },
        "rows": [
            row(
                f"waits: a fan-out of {CHILDREN:,} children on {SHARDS} shards, Cloud Storage "
                "calls per child",
                f"{per_child:.2f} ("
                + ", ".join(f"{k} {v / CHILDREN:.2f}" for k, v in sorted(calls.items()) if v)
                + f"; parent {record.get('status')}, {joined} joined, {wall:.0f} s)",
                f"the {CHILDREN:,}-job backlog: {base['calls_per_job']:.2f} calls a job "
                f"(big_backlog, {base['measured_at']})"
                if base
                else "no big_backlog figure in bench/results.json",
                f"{ratio:.2f}x" if ratio is not None else "n/a",
                f"<= {TARGET}x",
                None if ratio is None else ratio <= TARGET and joined == CHILDREN,
                "a child costs a plain job's calls plus its open marker (written, deleted, "
                "listed: 3) and the join's read of it (1): waits' rows in make bench",
            )
        ],
    }
