"""Warm submit to first stage: how long a job POSTed to a warm deployment waits before its
first stage starts, reclaim's claim against the floor claim, interleaved.

Two local clouds of the same shape (2 warm claim instances x 4, no sweep), one serving
reclaim's claim, the other bench/floor_claim.py (the least a claim can do: read, claim,
done, unmark). JOBS single-job POSTs, one at a time (each waited to its end, so no job
waits for a slot), taking turns between the two clouds. A reclaim job is `bench-first`
(bench/row_pipelines.py), whose one stage notes time.time() as it begins; the floor notes
it once its claim write landed, where a stage would begin. The latency is that note less
the time the POST was sent (one clock: the whole local cloud runs on this machine). The
same submit function, Pub/Sub emulator and platform front serve both: the ratio of the
medians is what reclaim's claim adds before a stage can start (its gates, the pause flag,
its claim write), and what this issue's changes to the claim path (the drain's hint, the
quieter log, the stage clock) may not slow down.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from typing import Any

from bench.common import bench_cloud, row, wait_terminal
from bench.console import CONSOLE
from bench.row_pipelines import STARTED
from bench.throughput import claim_functions

JOBS = 20
INSTANCES, CONCURRENCY = 2, 4
TARGET = 1.15
"""Reclaim's median submit-to-first-stage at most 1.15x the floor's."""
MODULES = {"RECLAIM_PIPELINE_MODULES": "bench.row_pipelines"}


def _post(url: str, body: dict[str, Any]) -> tuple[str, float]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    sent = time.time()
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.loads(resp.read())["id"]), sent


def _one(b: Any, pipeline: str) -> float:
    """One job POSTed and waited to its end: seconds from the POST to its first stage."""
    job_id, sent = _post(b.cloud.endpoints["jobs"], {"pipeline": pipeline})
    record = wait_terminal(b.queue, [job_id], timeout_s=120, poll_s=0.05)[job_id]
    return float(record["result"][STARTED]) - sent


def _cloud(floor: bool) -> Any:
    return bench_cloud(
        max_instances=INSTANCES,
        min_instances=INSTANCES,
        concurrency=CONCURRENCY,
        sweep_interval_seconds=0,
        stale_seconds=30.0,
        functions=claim_functions(floor),
        function_env=MODULES,
    )


def run() -> dict[str, Any]:
    mine: list[float] = []
    floor: list[float] = []
    with _cloud(floor=True) as fb, _cloud(floor=False) as rb:
        for b in (fb, rb):  # the first job of each warms its path: dropped
            _one(b, "bench-first")
        for i in range(JOBS):
            CONSOLE.progress(f"first stage: job {i + 1}/{JOBS}")
            order = ((fb, floor), (rb, mine)) if i % 2 == 0 else ((rb, mine), (fb, floor))
            for b, out in order:
                out.append(_one(b, "bench-first"))
    return {
        "raw": {"jobs": JOBS, "reclaim_s": _r(mine), "floor_s": _r(floor)},
        "rows": [first_stage_row(mine, floor)],
    }


def _r(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


def first_stage_row(mine: list[float], floor: list[float]) -> dict[str, Any]:
    """The row: medians (and the slowest) of both, judged on the ratio of the medians."""
    m, f = statistics.median(mine), statistics.median(floor)
    ratio = m / f
    return row(
        f"warm submit -> first stage, {JOBS} jobs one at a time, "
        f"{INSTANCES}x{CONCURRENCY} warm slots",
        f"median {m * 1000:.0f} ms (slowest {max(mine) * 1000:.0f} ms)",
        f"the floor claim (bench/floor_claim.py), the same POSTs interleaved: median "
        f"{f * 1000:.0f} ms (slowest {max(floor) * 1000:.0f} ms)",
        f"{ratio:.2f}x the floor",
        f"<= {TARGET:g}x",
        ratio <= TARGET,
        "from the POST sent to the stage's first line (the floor: to its claim write "
        "landed); the submit, the Pub/Sub push and the platform front are the same for both",
    )
