"""End-to-end throughput of the claim side: 500 no-op jobs against the raw floor,
repeated, the target on the median.

Framework: one POST /jobs of 500 one-stage `demo` jobs (no sleep) to the local cloud
(sweep every 3 s) while the claim subscription is held as a pull subscription, so the
doorbells wait in Pub/Sub; once the POST has returned the clock starts and the
subscription is switched back to push (ModifyPushConfig,
https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/modifyPushConfig),
and runs until the pending index is empty (every job terminal and unmarked). So the
figure is the claim side's alone, a batch that is all there when delivery starts;
submit's time is shown beside it, not in it. Two shapes, on the local Cloud Run with the
instances kept warm (min_instances = max_instances, so the figure is the queue's, not
start-ups'): max_instances x concurrency = 2 x 4 (the incident's) and 8 x 4.

Raw floor: the claim side's calls per job issued by a script with the official clients
and no framework, on as many threads as the framework has slots, the records and
pending markers written before its clock starts: read the record, claim write and done
write (each generation-matched), delete the marker. No HTTP functions, no push delivery.
Both talk to the same fake-gcs-server, directly.

Each repeat runs the floor and then the framework, each on an emptied bucket (the
emulator's writes slow down as a bucket fills); the row shows the median ratio with its
min and max.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import local_cloud, row, snapshot, wait_pending_empty, watching_queue
from bench.console import CONSOLE
from bench.fixtures import clear_bucket, copy_to_gcs
from bench.spread import Spread
from local import wiring
from local.cloud import LocalCloud
from local.observe import emulator_stats
from shared.jobs import JobStatus
from shared.storage import job_object, pending_object
from shared.storage_memory import MemoryStore

JOBS = 500
SHAPES = ((2, 4), (8, 4))
"""(claim max instances, concurrency): the incident's shape, then four times the instances."""
TARGET = 0.6
REPEATS = 3


def _raw_claim(bucket: Any, job_id: str) -> None:
    """What a minimal claim side does with one doorbell: read, claim, done, unmark."""
    read = bucket.blob(job_object(job_id))
    current = json.loads(read.download_as_bytes())
    generation = read.generation
    for status in (JobStatus.RUNNING, JobStatus.DONE):
        current["status"] = status
        blob = bucket.blob(job_object(job_id))
        blob.upload_from_string(json.dumps(current), if_generation_match=generation)
        generation = blob.generation
    bucket.blob(pending_object(job_id)).delete()


def _raw_floor(cloud: LocalCloud, client: Any, threads: int) -> dict[str, Any]:
    name = f"bench-raw-{uuid.uuid4().hex[:8]}"
    bucket = client.create_bucket(name)
    built = MemoryStore(name)
    ids = [uuid.uuid4().hex for _ in range(JOBS)]
    for job_id in ids:
        record = {"id": job_id, "pipeline": "demo", "payload": {"stages": 1}}
        data = json.dumps({**record, "status": JobStatus.QUEUED}).encode()
        built.put_object(name, job_object(job_id), data, "application/json")
        built.put_object(name, pending_object(job_id), b"")
    copy_to_gcs(built, cloud.gcs_url, name)
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda job_id: _raw_claim(bucket, job_id), ids))
    wall = time.perf_counter() - start
    clear_bucket(client, cloud.gcs_url, name)
    bucket.delete()
    return {"jobs": JOBS, "threads": threads, "wall_s": round(wall, 3)}


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


def _framework(cloud: LocalCloud, client: Any, slots: int) -> dict[str, Any]:
    """Submit with the doorbells held, then time the claim side from their release."""
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
    start = time.perf_counter()
    _push(cloud, on=True)
    wait_pending_empty(queue, timeout_s=600, poll_s=0.1)
    wall = time.perf_counter() - start
    busy = _busy(c0, _cpu())
    records = snapshot(queue, ids)
    done = sum(r.get("status") == JobStatus.DONE for r in records.values())
    return {
        "jobs": JOBS,
        "done": done,
        "submit_s": round(submitted, 3),
        "wall_s": round(wall, 3),
        "slots": slots,
        "cpu_busy": busy,
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
    cloud = local_cloud(
        max_instances=instances,
        min_instances=instances,  # warm, so the figure is the queue's, not start-ups'
        concurrency=max_concurrent,
        sweep_interval_seconds=3.0,
        stale_seconds=30.0,
    )
    slots = instances * max_concurrent
    repeats: list[dict[str, Any]] = []
    with cloud:
        client = wiring.storage_client(cloud.gcs_url, cloud.config.topology.project)
        for i in range(REPEATS):
            CONSOLE.progress(f"{instances}x{max_concurrent} slots: repeat {i + 1}/{REPEATS}")
            c0 = _cpu()
            raw = _raw_floor(cloud, client, slots)
            raw["cpu_busy"] = _busy(c0, _cpu())
            framework = _framework(cloud, client, slots)
            ratio = (framework["done"] / framework["wall_s"]) / (JOBS / raw["wall_s"])
            repeats.append({"framework": framework, "raw_floor": raw, "ratio": round(ratio, 3)})
        stats = emulator_stats(cloud.endpoints["emulator_admin"])
        platform = cloud.service("claim").stats()
    subs = stats.get("subscriptions") or {}
    claim: dict[str, int] = next(
        (v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION)), {}
    )
    return {
        "instances": instances,
        "max_concurrent": max_concurrent,
        "repeats": repeats,
        "ratio": Spread.of(r["ratio"] for r in repeats).to_json(),
        "pushes": claim.get("push_attempts", 0),
        "push_failures": claim.get("push_failures", 0),
        "refused_429": platform["requests"]["refused"],
    }


def run() -> dict[str, Any]:
    variants = [_variant(*shape) for shape in SHAPES]
    return {"raw": {"variants": variants}, "rows": [_row(v) for v in variants]}


def _row(v: dict[str, Any]) -> dict[str, Any]:
    reps = v["repeats"]
    ratio = Spread(**v["ratio"])
    rate = Spread.of(r["framework"]["done"] / r["framework"]["wall_s"] for r in reps)
    floor = Spread.of(JOBS / r["raw_floor"]["wall_s"] for r in reps)
    submit = Spread.of(r["framework"]["submit_s"] for r in reps)
    busy = [r["framework"]["cpu_busy"] for r in reps if r["framework"]["cpu_busy"] is not None]
    met = ratio.meets(TARGET, at_least=True)
    done = sum(r["framework"]["done"] for r in reps)
    return row(
        f"throughput, claim side, {JOBS} no-op jobs submitted before the clock, "
        f"{v['instances']}x{v['max_concurrent']} slots",
        f"{rate.shown(1)} jobs/s ({done}/{JOBS * len(reps)} done; submit beforehand "
        f"{submit.median:.1f} s, not timed; {v['pushes']} pushes, {v['refused_429']} refused "
        f"by the platform (429); CPUs {_pct(Spread.of(busy).median if busy else None)} busy)",
        f"raw floor {floor.shown(1)} jobs/s (read, claim, done, unmark on "
        f"{reps[0]['raw_floor']['threads']} threads)",
        f"{ratio.shown()} of the floor",
        f">= {TARGET} (median)",
        met and done == JOBS * len(reps),
        "" if met else _note(),
    )


def _pct(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f}%"


def _note() -> str:
    return (
        "the floor makes four calls per job on as many threads as there are slots, with no "
        "HTTP hop (push, the platform's front, functions-framework) and no stage to run; on "
        "a machine with few CPUs the framework is CPU-bound and does not gain from more "
        "instances, while the floor waits on I/O and gains from threads"
    )
