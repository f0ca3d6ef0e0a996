"""What following costs in Cloud Storage calls, on the local cloud.

One job to done: a demo job of 4 stages of 5 s runs on the local Cloud Run (stale time
30 s, so a heartbeat every 10 s), followed at once by two readers in this process, each
on its own counting store: 1 s polling of the status read (what GET /jobs/<id> runs),
and the waiting read (GET /jobs/<id>?wait=50&until=ended, what the client's wait()
sends, run through the same code). Their logical calls are compared.

Batch progress: a 1,000-member batch, submitted in this process to fake-gcs-server;
GET /batches/<id>/progress (markers) against GET /batches/<id> (every member read).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import requests

from bench.common import SilentDoorbell, row
from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.gcs import start_fake_gcs
from reclaim.local.observe import watching_queue
from reclaim.local.procs import free_port, stop
from shared import records, status
from shared.config import Settings
from shared.http import progress as batch_progress
from shared.http import waiting
from shared.queue import Queue, parse_submission
from shared.stores.gcs import GcsStore

STAGES, STAGE_S = 4, 5.0
MEMBERS = 1_000
WAIT_TARGET, PROGRESS_TARGET = 0.2, 0.05
_ENDED = ("done", "failed", "cancelled")


def _poll(queue: Queue, job_id: str, out: dict[str, Any]) -> None:
    while queue.get(job_id).record.get("status") not in _ENDED:
        time.sleep(1.0)
    out["calls"] = dict(queue.store.calls)


def _wait(queue: Queue, job_id: str, out: dict[str, Any]) -> None:
    answers, ended = 0, False
    while not ended:  # what the client's wait() sends: GET /jobs/<id>?wait=50&until=ended
        view = waiting.read_after_change(queue, job_id, 50.0, None, "ended")
        ended, answers = view.record.get("status") in _ENDED, answers + 1
    out["calls"], out["answers"] = dict(queue.store.calls), answers


def follow_one_job() -> dict[str, Any]:
    with LocalCloud.for_tests(max_instances=1, concurrency=2, stale_seconds=30.0) as cloud:
        job_id = f"follow-{records.new_job_id()[:12]}"
        body: dict[str, Any] = {
            "pipeline": "demo",
            "id": job_id,
            "payload": {"stages": STAGES, "sleep_s": STAGE_S},
        }
        answer = requests.post(cloud.endpoints["submit"] + "/jobs", json=body, timeout=60)
        answer.raise_for_status()
        polled: dict[str, Any] = {}
        waited: dict[str, Any] = {}
        threads = [
            threading.Thread(target=_poll, args=(watching_queue(cloud), job_id, polled)),
            threading.Thread(target=_wait, args=(watching_queue(cloud), job_id, waited)),
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        seconds = time.monotonic() - started
    return {"polled": polled, "waited": waited, "seconds": round(seconds, 1)}


def batch_progress_calls() -> dict[str, Any]:
    port = free_port()
    fake = start_fake_gcs("127.0.0.1", port)
    try:
        client = wiring.storage_client(f"http://127.0.0.1:{port}", "bench")
        client.create_bucket("bench-progress")
        store = GcsStore("bench-progress", client)
        settings = Settings.from_env({}, records_bucket="bench-progress", max_batch_jobs=MEMBERS)
        queue = Queue(store, SilentDoorbell(), settings)
        jobs = [{"pipeline": "demo", "id": f"m{i:04d}"} for i in range(MEMBERS)]
        queue.submit(parse_submission({"batch_id": "b1k", "jobs": jobs}, settings))
        now = datetime.now(UTC)
        store.calls.clear()
        counted = batch_progress.progress(queue.ctx, "b1k", now)
        markers = dict(store.calls)
        store.calls.clear()
        members = status.read_batch(queue.ctx, "b1k", now)
        every = dict(store.calls)
    finally:
        stop(fake)
    if counted.total != MEMBERS or len(members.members) != MEMBERS:
        raise RuntimeError(f"the batch has {counted.total} / {len(members.members)} members")
    return {"markers": markers, "every_member": every}


_WAIT_NOTE = (
    "the waiting read polls the status from the record's metadata (1 s, doubling, at "
    "most every 8 s) and reads the record once, at the end; a short job pays the early "
    "fast polls, a long one about one call per 8 s against two per second of polling."
)


def run() -> dict[str, Any]:
    follow = follow_one_job()
    polled = sum(follow["polled"]["calls"].values())
    waited = sum(follow["waited"]["calls"].values())
    batch = batch_progress_calls()
    marked, every = sum(batch["markers"].values()), sum(batch["every_member"].values())
    wait_ratio, progress_ratio = waited / polled, marked / every
    return {
        "raw": {"follow": follow, "batch": batch},
        "rows": [
            row(
                f"follow one {STAGES}x{STAGE_S:g} s job to done by wait",
                f"{waited} calls ({follow['waited']['answers']} answers)",
                f"1 s polling: {polled} calls",
                f"{wait_ratio:.2f}x calls",
                f"<= {WAIT_TARGET}x",
                wait_ratio <= WAIT_TARGET,
                _WAIT_NOTE,
            ),
            row(
                f"batch progress, {MEMBERS:,} members",
                f"{marked} calls (markers)",
                f"every member read: {every} calls",
                f"{progress_ratio:.3f}x calls",
                f"<= {PROGRESS_TARGET}x",
                progress_ratio <= PROGRESS_TARGET,
            ),
        ],
    }
