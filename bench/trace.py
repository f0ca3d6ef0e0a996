"""What exporting a job's trace costs claim's request (shared.traces.export).

One local cloud, one claim instance, its spans going to the local collector. Jobs of the
3-stage `demo` pipeline with no-op stages are written straight into storage (no doorbell
rung) and pushed to claim one at a time, as Pub/Sub pushes, each request timed on the
wire from here. Every other job's trace is unsampled (flags 00): the same code runs, but
the sampled flag stops the export, so the two arms differ only by the export, and
interleaving them spreads the machine's drift over both. The drain is off
(RECLAIM_DRAIN_MAX_JOBS=0), so a request runs exactly its job.

Judged: export calls per attempt, counted at the collector (<= 1), and the p95 of claim's
request with the export less the p95 without (<= 50 ms).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.common import local_cloud, row
from reclaim.local.observe import watching_queue
from shared import records, tracing

JOBS_PER_ARM = 60
WARMUP = 4
STAGES = 3
TARGET_CALLS = 1.0
TARGET_P95_MS = 50.0


def _envelope(job_id: str) -> bytes:
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    message = {
        "data": data,
        "attributes": {"job_id": job_id},
        "messageId": uuid.uuid4().hex[:12],
        "publishTime": datetime.now(UTC).isoformat(),
    }
    return json.dumps(
        {"message": message, "subscription": "projects/reclaim-test/subscriptions/bench"}
    ).encode()


def _stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as answer:
        stats: dict[str, int] = json.loads(answer.read())
    return stats


def _job(queue: Any, sampled: bool) -> str:
    job_id = records.new_job_id()
    trace = tracing.new_trace()
    context = tracing.TraceContext(trace.trace_id, trace.span_id, sampled)
    payload = {"stages": STAGES, "sleep_s": 0}
    record = records.new_record(
        job_id, "demo", payload, datetime.now(UTC), traceparent=context.traceparent
    )
    queue.store.add_pending(job_id)
    queue.store.create(record)
    return job_id


def _push(claim_url: str, job_id: str) -> float:
    """One push to claim, timed from sending it to its answer (ms)."""
    request = urllib.request.Request(
        claim_url, data=_envelope(job_id), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()
    return (time.perf_counter() - start) * 1000


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def run() -> dict[str, Any]:
    with local_cloud(
        max_instances=1,
        min_instances=1,
        concurrency=1,
        sweep_interval_seconds=0,
        function_env={"RECLAIM_DRAIN_MAX_JOBS": "0"},
    ) as cloud:
        queue = watching_queue(cloud)
        claim_url = cloud.function_urls()["claim"]
        collector = cloud.endpoints["trace_collector"]
        for i in range(WARMUP):  # the first export imports the exporter and connects
            _push(claim_url, _job(queue, sampled=i % 2 == 0))
        timed: dict[bool, list[float]] = {True: [], False: []}
        before = _stats(collector)
        for i in range(2 * JOBS_PER_ARM):
            sampled = i % 2 == 0
            timed[sampled].append(_push(claim_url, _job(queue, sampled)))
        after = _stats(collector)
    calls = (after["requests"] - before["requests"]) / JOBS_PER_ARM
    spans = (after["spans"] - before["spans"]) / JOBS_PER_ARM
    with_p95, without_p95 = _p95(timed[True]), _p95(timed[False])
    added = with_p95 - without_p95
    raw = {
        "jobs_per_arm": JOBS_PER_ARM,
        "export_calls_per_attempt": round(calls, 3),
        "spans_per_attempt": round(spans, 2),
        "p95_ms_with_export": round(with_p95, 1),
        "p95_ms_without": round(without_p95, 1),
        "p50_ms_with_export": round(sorted(timed[True])[JOBS_PER_ARM // 2], 1),
        "p50_ms_without": round(sorted(timed[False])[JOBS_PER_ARM // 2], 1),
        "p95_ms_added": round(added, 1),
    }
    met = calls <= TARGET_CALLS and added <= TARGET_P95_MS
    figure = (
        f"{calls:g} export call per attempt ({spans:g} spans); claim's request p95 "
        f"{with_p95:.0f} ms with the export, {without_p95:.0f} ms without: "
        f"{added:+.0f} ms"
    )
    return {
        "raw": raw,
        "rows": [
            row(
                f"trace export in claim's request, {STAGES} no-op stages, one job a push",
                figure,
                f"the same requests of unsampled traces (no export): p95 {without_p95:.0f} ms",
                f"{added / TARGET_P95_MS:.2f} of the added-latency budget",
                f"<= {TARGET_CALLS:g} call/attempt, <= +{TARGET_P95_MS:g} ms p95",
                met,
                f"{JOBS_PER_ARM} pushes per arm, interleaved, timed on the wire; calls "
                "counted at the local OTLP collector (reclaim.local.collector); the export "
                "is one OTLP/HTTP POST of the attempt's spans in the request (no thread)",
            )
        ],
    }
