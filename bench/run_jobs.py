"""Start latency of a stage on the Cloud Run jobs runner: from the claim's ack (its
"dispatched to a Cloud Run job" log line, written just before the push is answered) to
the task's "stage started" of the job's first stage, against the same job on a push
claim (its "claimed" line to its "stage started").

One local cloud per runner, a warm claim instance (min_instances 1), JOBS one-stage `demo`
jobs submitted one after the other (each waits for the previous to end, so no job waits
behind another). Times come from the log lines' own timestamps (one clock: one machine).
Locally a task is a new Python process (start, imports, settings, adoption); on Cloud Run
the execution's provisioning and image pull come on top, which this row does not measure.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import bench_cloud, median, row, wait_terminal
from reclaim.local.observe import submit_batch

JOBS = 8
PAYLOAD = {"stages": 1}


def _lines(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in folder.rglob("*.log"):
        for text in path.read_text(errors="replace").splitlines():
            if text.startswith("{") and '"job_id"' in text:
                try:
                    out.append(json.loads(text))
                except ValueError:
                    continue
    return out


def _at(lines: list[dict[str, Any]], job_id: str, message: str) -> datetime:
    times = [
        datetime.fromisoformat(line["time"])
        for line in lines
        if line.get("job_id") == job_id and line.get("message") == message
    ]
    if not times:
        raise LookupError(f"no {message!r} line for {job_id}")
    return min(times)


def _latencies(runner: str) -> list[float]:
    overrides: dict[str, Any] = {"claim_runner": runner} if runner == "job" else {}
    overrides["function_env"] = {"RECLAIM_LOG_LEVEL": "DEBUG"}  # "stage started" is DEBUG
    start = "dispatched to a Cloud Run job" if runner == "job" else "claimed"
    with bench_cloud(max_instances=1, min_instances=1, concurrency=4, **overrides) as b:
        ids = []
        for _ in range(JOBS):
            _batch, (job_id,) = submit_batch(
                b.cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": PAYLOAD}]
            )
            wait_terminal(b.queue, [job_id], timeout_s=120)
            ids.append(job_id)
        lines = _lines(b.cloud.config.log_dir)
    return [(_at(lines, i, "stage started") - _at(lines, i, start)).total_seconds() for i in ids]


def run() -> dict[str, Any]:
    job = _latencies("job")
    push = _latencies("push")
    return {
        "raw": {
            "jobs": JOBS,
            "job_s": [round(s, 3) for s in job],
            "push_s": [round(s, 3) for s in push],
        },
        "rows": [
            row(
                f"stage start on the Cloud Run jobs runner ({JOBS} jobs, one at a time)",
                f"claim's ack to the task's first stage: median {median(job):.2f} s, "
                f"max {max(job):.2f} s (a local process; Cloud Run adds provisioning)",
                f"a push claim, claimed to first stage: median {median(push) * 1000:.0f} ms",
                f"+{median(job) - median(push):.2f} s",
                "reported (a job pool is for stages of minutes to hours)",
                None,
            )
        ],
    }
