"""End-to-end throughput of 500 no-op jobs against the raw floor.

Framework: one POST /jobs of 500 one-stage `demo` jobs (no sleep) to the local
cloud (sweep every 3 s; submit rings the batch every 50 records, so jobs run while
it is still being written), timed until the pending index is empty (every job
terminal and unmarked). Two shapes, on the local Cloud Run with the instances
kept warm (min_instances = max_instances, so the figure is the queue's, not
start-ups'): max_instances x concurrency = 2 x 4 (the incident's) and 8 x 4.

Raw floor: the same calls per job issued by a script with the official
clients and no framework, on as many threads as the framework has slots:
create pending marker, create batch marker, create record (ifGenerationMatch=0),
publish the doorbell; read the record, claim write and done write (each
generation-matched), delete the marker. No HTTP functions, no push delivery.
Both talk to the same fake-gcs-server and Pub/Sub emulator, directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import row, snapshot, wait_pending_empty, watching_queue
from local import wiring
from local.cloud import LocalCloud
from local.observe import emulator_stats
from shared.jobs import JobStatus
from shared.queue import Queue

JOBS = 500
SHAPES = ((2, 4), (8, 4))
"""(claim max instances, concurrency): the incident's shape, then four times the instances."""
TARGET = 0.6


def _raw_job(bucket: Any, publisher: Any, topic: str, batch: str) -> None:
    job_id = uuid.uuid4().hex
    record = {
        "id": job_id,
        "pipeline": "demo",
        "payload": {"stages": 1},
        "status": JobStatus.QUEUED,
    }
    bucket.blob(f"pending/{job_id}").upload_from_string(b"", if_generation_match=0)
    bucket.blob(f"batches/{batch}/{job_id}").upload_from_string(b"", if_generation_match=0)
    blob = bucket.blob(f"jobs/{job_id}.json")
    blob.upload_from_string(json.dumps(record), if_generation_match=0)
    publisher.publish(topic, json.dumps({"job_id": job_id}).encode(), job_id=job_id).result()
    read = bucket.blob(f"jobs/{job_id}.json")
    current = json.loads(read.download_as_bytes())
    generation = read.generation
    for status in (JobStatus.RUNNING, JobStatus.DONE):
        current["status"] = status
        blob = bucket.blob(f"jobs/{job_id}.json")
        blob.upload_from_string(json.dumps(current), if_generation_match=generation)
        generation = blob.generation
    bucket.blob(f"pending/{job_id}").delete()


def _raw_floor(cloud: LocalCloud, threads: int) -> dict[str, Any]:
    from google.cloud import pubsub_v1

    client = wiring.storage_client(cloud.gcs_url, cloud.config.topology.project)
    bucket = client.create_bucket(f"bench-raw-{uuid.uuid4().hex[:8]}")
    publisher, _sub = wiring.pubsub_admin_clients(cloud.pubsub_host)
    topic = publisher.topic_path(cloud.config.topology.project, "bench-raw")
    publisher.create_topic(name=topic)
    with contextlib.ExitStack() as stack:
        stack.callback(publisher.transport.close)
        stack.callback(_sub.transport.close)
        with _env(cloud):
            pub = pubsub_v1.PublisherClient(
                batch_settings=pubsub_v1.types.BatchSettings(max_latency=0.01)
            )
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda _: _raw_job(bucket, pub, topic, "b"), range(JOBS)))
        wall = time.perf_counter() - start
    return {"jobs": JOBS, "threads": threads, "wall_s": round(wall, 3)}


@contextlib.contextmanager
def _env(cloud: LocalCloud) -> Any:
    saved = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = cloud.pubsub_host
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = saved


def _framework(cloud: LocalCloud, queue: Queue, slots: int) -> dict[str, Any]:
    jobs = [{"pipeline": "demo", "payload": {"stages": 1}} for _ in range(JOBS)]
    req = urllib.request.Request(
        cloud.endpoints["jobs"],
        data=json.dumps({"jobs": jobs}).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as resp:
        ids = [j["id"] for j in json.loads(resp.read())["jobs"]]
    submitted = time.perf_counter() - start
    wait_pending_empty(queue, timeout_s=600, poll_s=0.1)
    wall = time.perf_counter() - start
    records = snapshot(queue, ids)
    done = sum(r.get("status") == JobStatus.DONE for r in records.values())
    return {
        "jobs": JOBS,
        "done": done,
        "submit_s": round(submitted, 3),
        "wall_s": round(wall, 3),
        "slots": slots,
    }


def _cpu() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine (Linux /proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of all CPUs that was busy between two _cpu() readings."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 2) if total > 0 else None


def _variant(instances: int, max_concurrent: int) -> dict[str, Any]:
    cloud = LocalCloud.for_tests(
        max_instances=instances,
        min_instances=instances,  # warm, so the figure is the queue's, not start-ups'
        concurrency=max_concurrent,
        sweep_interval_seconds=3.0,
        stale_seconds=30.0,
    )
    slots = instances * max_concurrent
    with cloud:
        c0 = _cpu()
        raw = _raw_floor(cloud, slots)
        c1 = _cpu()
        framework = _framework(cloud, watching_queue(cloud), slots)
        c2 = _cpu()
        raw["cpu_busy"], framework["cpu_busy"] = _busy(c0, c1), _busy(c1, c2)
        stats = emulator_stats(cloud.endpoints["emulator_admin"])
        platform = cloud.service("claim").stats()
    subs = stats.get("subscriptions") or {}
    claim: dict[str, int] = next(
        (v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION)), {}
    )
    framework["pushes"] = claim.get("push_attempts", 0)
    framework["refused_429"] = platform["requests"]["refused"]
    framework["push_failures"] = claim.get("push_failures", 0)
    ratio = (framework["done"] / framework["wall_s"]) / (JOBS / raw["wall_s"])
    return {
        "instances": instances,
        "max_concurrent": max_concurrent,
        "framework": framework,
        "raw_floor": raw,
        "ratio": round(ratio, 3),
    }


def run() -> dict[str, Any]:
    variants = [_variant(*shape) for shape in SHAPES]
    return {"raw": {"variants": variants}, "rows": [_row(v) for v in variants]}


def _row(v: dict[str, Any]) -> dict[str, Any]:
    f, raw, ratio = v["framework"], v["raw_floor"], v["ratio"]
    return row(
        f"throughput, {JOBS} no-op jobs, {v['instances']}x{v['max_concurrent']} slots",
        f"{f['done'] / f['wall_s']:.1f} jobs/s ({f['wall_s']:.1f} s, submit "
        f"{f['submit_s']:.1f} s; {f['pushes']} pushes, {f['refused_429']} refused by the "
        f"platform (429); "
        f"CPUs {_pct(f['cpu_busy'])} busy)",
        f"raw floor {JOBS / raw['wall_s']:.1f} jobs/s ({raw['wall_s']:.1f} s; same calls on "
        f"{raw['threads']} threads; CPUs {_pct(raw['cpu_busy'])} busy)",
        f"{ratio:.3f} of the floor",
        f">= {TARGET}",
        ratio >= TARGET,
        "" if ratio >= TARGET else _note(f, raw),
    )


def _pct(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f}%"


def _note(f: dict[str, Any], raw: dict[str, Any]) -> str:
    tail = max(f["wall_s"] - f["submit_s"], 0.0)
    return (
        f"the batch is bounded by submit: one POST wrote the {f['jobs']} records (3 objects "
        f"each, in parallel, ringing every 50) in {f['submit_s']:.1f} s while the claim side "
        f"ran the jobs behind it, the last ending {tail:.1f} s after the POST returned; the "
        f"floor makes the same calls on {raw['threads']} threads and no HTTP hops (push, front, "
        f"functions-framework), on the same {os.cpu_count()} CPUs (busy "
        f"{_pct(f['cpu_busy'])}): the floor waits on I/O and gains from threads, the framework "
        "is CPU-bound here and does not gain from more instances on 2 CPUs. Splitting a batch "
        "over several POSTs spreads it over submit instances"
    )
