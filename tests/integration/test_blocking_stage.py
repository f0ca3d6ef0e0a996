"""A healthy stage blocked in one long call (it never calls check()) is not
rescued while its owner lives: only the heartbeat thread proves the owner alive
(issue 16, defect 6). Over HTTP: submit, two claim instances, the sweep ticking
as Cloud Scheduler would and status reads polling, on fake-gcs-server. One claim
instance reaches Cloud Storage through the fault proxy, which answers 429 to every
fourth write it makes, heartbeats included.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.faultproxy import FaultProxy
from reclaim.local.procs import stop_all
from shared.stores.gcs import GcsStore
from tests.integration.function_support import make_queue, start_function

# The stale time leaves room for a heartbeat's own retries. The storage seam keeps the
# client library's delays (google-api-core's exponential_sleep_generator: full jitter
# under 1 s, then under 2 s, ...), and the proxy answers 429 to every FAULT_EVERY-th
# write, never two in a row. So a heartbeat is at most about 1 s late: due every 8/3 s,
# it lands well inside the 8 s stale time, and a rescue would be the heartbeat's fault.
# (A seeded fraction of all requests put the faults on reads or writes by the order
# concurrent requests arrived in: once, only 2 writes met one.)
STALE_S = 8.0
STAGES = 2
BLOCK_S = 2 * STALE_S  # each stage blocks for two stale periods
FAULT_EVERY = 4


@dataclass
class Cloud:
    store: GcsStore
    submit: str
    claims: dict[str, str]
    sweep: str
    proxy: FaultProxy
    sweeps: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    subscriber: Any,
    log_dir: Path,
    gcs_server: str,
) -> Iterator[Cloud]:
    queue = make_queue(
        "blocking",
        emulator_env,
        gcs_client,
        publisher,
        subscriber,
        {
            "RECLAIM_STALE_SECONDS": str(STALE_S),
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_DRAIN_MAX_JOBS": "0",
            "THREADS": "4",
        },
    )
    procs = []
    with FaultProxy(gcs_server, statuses=(429,), every=FAULT_EVERY, kinds=("write",)) as proxy:
        try:
            urls = {}
            for name, env in (
                ("submit", queue.env),
                ("direct", queue.env),
                ("throttled", {**queue.env, "STORAGE_EMULATOR_HOST": proxy.url}),
                ("sweep", queue.env),
            ):
                folder = name if name in ("submit", "sweep") else "claim"
                proc, urls[name] = start_function(folder, folder, env, log_dir)
                procs.append(proc)
            yield Cloud(
                GcsStore(queue.bucket.name, client=gcs_client),
                urls["submit"],
                {"direct": urls["direct"], "throttled": urls["throttled"]},
                urls["sweep"],
                proxy,
            )
        finally:
            stop_all(procs)


def _envelope(job_id: str) -> dict[str, Any]:
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    return {"message": {"data": data, "attributes": {"job_id": job_id}, "messageId": job_id}}


def _watch(cloud: Cloud, job_ids: list[str], stop: threading.Event) -> None:
    """Cloud Scheduler's sweep and a client's status reads, every half second."""
    while not stop.wait(0.5):
        answer = requests.post(cloud.sweep, timeout=30)
        assert answer.status_code == 200, answer.text
        cloud.sweeps.append(answer.json())
        for job_id in job_ids:
            requests.get(f"{cloud.submit}/jobs/{job_id}", timeout=30)


def test_blocking_stages_end_with_one_claim_and_no_rescue(cloud: Cloud) -> None:
    jobs = {f"blocking-{name}-{time.time_ns()}": url for name, url in cloud.claims.items()}
    payload = {"stages": STAGES, "sleep_s": BLOCK_S, "block": True}
    for job_id in jobs:
        body = {"pipeline": "demo", "id": job_id, "payload": payload}
        created = requests.post(f"{cloud.submit}/jobs", json=body, timeout=30)
        assert created.status_code == 202, created.text
    cloud.proxy.reset()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(cloud, list(jobs), stop), daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(
                pool.map(
                    lambda item: requests.post(item[1], json=_envelope(item[0]), timeout=120),
                    jobs.items(),
                )
            )
    finally:
        stop.set()
        watcher.join(30)
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["outcome"] == "done", answer.json()
    assert len(cloud.sweeps) >= 2 * STAGES * BLOCK_S / STALE_S  # the watchdog really looked
    assert sum(s["rescued"] for s in cloud.sweeps) == 0
    for job_id in jobs:
        record = cloud.store.read(job_id).record
        events = [e["event"] for e in record["history"]]
        assert record["status"] == "done" and record["attempts"] == 1, events
        assert record["rescues"] == 0 and events.count("claimed") == 1, events
        assert "rescued" not in events and "requeued" not in events, events
        assert [c["blocked"] for c in record["result"]["completed"]] == [True] * STAGES
    writes = cloud.proxy.counts()["write"]  # the throttled instance's: claim, heartbeats, ...
    assert writes >= 3 * FAULT_EVERY, writes  # each stage blocks through 6 heartbeats
    faults = cloud.proxy.faults()
    assert faults.get("write:429", 0) >= 3, faults  # so heartbeats did meet 429s
