"""A lost doorbell deep in a backlog: sweep runs until it is rung, and what one run costs,
for a backlog ten times one run's read budget against a small batch that fits in one.

Scaled 1:5 from production (10,000 jobs against RECLAIM_SWEEP_MAX_JOBS = 1,000; a 500-job
batch): 2,000 jobs against a budget of 200, and 100 jobs. The runs until the lost job is
rung depend on the backlog's size over the budget, the same 10:1; a run's list calls
are one per 1,000 markers, so 10,000 list 10 where 2,000 list 2. Scaled because writing
a 10,000-job backlog into fake-gcs-server through its API takes minutes here (its memory
backend scans the bucket on every insert, bench.fixtures), and a fixture it loads from a
folder dates every marker alike, where this scenario needs the backlog younger.

One job is submitted through the library (its doorbell rung into nothing: lost), last
in name order; then the backlog, built by the library on a MemoryStore, is copied into
the same bucket on 8 connections (bench.fixtures.copy_to_gcs), so its markers are
younger. The sweep (the library's run_once on fake-gcs-server through the counting
proxy, production's stale time of 120 s) runs as at the moment the lost job has been
silent for its stale time plus a second, while the backlog's own doorbells are fresh,
then every 60 s, until the lost job is rung.

A ring walking the index in name order, a budget of markers a run (what the sweep did
before it listed the whole index), would reach it on run ceil((its place + 1) / budget).
"""

from __future__ import annotations

import itertools
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import SilentDoorbell, row
from bench.console import CONSOLE
from bench.fixtures import Progress, copy_to_gcs
from reclaim.local import wiring
from reclaim.local.faultproxy import FaultProxy
from reclaim.local.gcs import start_fake_gcs
from reclaim.local.procs import free_port, stop
from shared import records, sweep_plan
from shared.config import Settings
from shared.queue import Queue, parse_submission
from shared.shards import name_hash
from shared.stores.gcs import GcsStore
from shared.stores.memory import MemoryStore
from shared.sweeper import run_once

SIZES = (100, 2_000)  # 500 and 10,000 at 1:5
BUDGET = 200  # RECLAIM_SWEEP_MAX_JOBS: 1,000 at 1:5
TARGET_RUNS = 2
MAX_RUNS = 12


def _last_in_name_order() -> str:
    """An id whose marker sorts after any other's: its hash segment is "ff" (markers are
    pending/<h>~<id>: shared.storage.pending_object) and "l" sorts after every hex digit
    of the backlog's generated ids."""
    return next(
        f"lost-doorbell-{i}" for i in itertools.count() if name_hash(f"lost-doorbell-{i}") == "ff"
    )


LOST = _last_in_name_order()


class _Bell(SilentDoorbell):
    """Counts rings of the lost job (the sweep's re-ring)."""

    def __init__(self) -> None:
        self.rung: list[str] = []

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        self.rung.append(job_id)


def _backlog(bucket: str, jobs: int) -> MemoryStore:
    """`jobs` queued demo jobs (a marker and a record each, as submit writes them, without
    the batch's), built by the library on a MemoryStore."""
    built = MemoryStore(bucket)
    now = datetime.now(UTC)
    for _ in range(jobs):
        job_id = records.new_job_id()
        built.add_pending(job_id, pipeline="demo")
        built.create(records.new_record(job_id, "demo", {}, now))
    return built


def _one(gcs_url: str, proxy: FaultProxy, jobs: int) -> dict[str, Any]:
    bucket = f"bench-lost-{jobs}"
    client = wiring.storage_client(proxy.url, "bench")
    client.create_bucket(bucket)
    settings = Settings.from_env({}, records_bucket=bucket, sweep_max_jobs=BUDGET)
    bell = _Bell()
    store = GcsStore(bucket, client)
    queue = Queue(store, bell, settings)
    queue.submit(parse_submission({"jobs": [{"pipeline": "demo", "id": LOST}]}, settings))
    lost_at = next(e.created for e in store.list_pending() if e.job_id == LOST)
    if lost_at is None:
        raise RuntimeError("the lost job's marker has no creation time")
    time.sleep(sweep_plan.MARK_SLACK_MAX_S + 1)  # the backlog comes later than the slack
    built = _backlog(bucket, jobs)
    progress = Progress(f"{jobs:,}-job backlog copied", len(built.names()), CONSOLE.progress, 1000)
    copy_to_gcs(built, gcs_url, bucket, progress)
    now = lost_at + timedelta(seconds=settings.stale_seconds + 1)  # the lost job is stale
    bell.rung.clear()
    runs: list[dict[str, Any]] = []
    while LOST not in bell.rung and len(runs) < MAX_RUNS:
        proxy.reset()
        store.calls.clear()
        started = time.perf_counter()
        result = run_once(queue.ctx, now)
        runs.append(
            {
                "wall_s": round(time.perf_counter() - started, 3),
                "listed": result.listed,
                "examined": result.examined,
                "unread": result.unread,
                "requeued": result.requeued,
                "wire": {k: v for k, v in proxy.counts().items() if v},
                "store": dict(store.calls),
            }
        )
        now += timedelta(seconds=60)  # Cloud Scheduler's next run
    entries = store.list_pending()
    names = sorted(e.key for e in entries)
    place = names.index(next(e.key for e in entries if e.job_id == LOST))
    return {
        "jobs": jobs,
        "rung_after_runs": len(runs) if LOST in bell.rung else None,
        "place_in_name_order": place,
        "ring_would_take_runs": math.ceil((place + 1) / settings.sweep_max_jobs),
        "runs": runs,
    }


def run() -> dict[str, Any]:
    port = free_port()
    fake = start_fake_gcs("127.0.0.1", port)
    try:
        with FaultProxy(f"http://127.0.0.1:{port}") as proxy:
            measured = [_one(f"http://127.0.0.1:{port}", proxy, n) for n in SIZES]
    finally:
        stop(fake)
    small, big = measured
    return {"raw": {"sizes": measured}, "rows": [_row(small, big)]}


def _calls(run: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(run["wire"].items()))


def _row(small: dict[str, Any], big: dict[str, Any]) -> dict[str, Any]:
    runs = big["rung_after_runs"]
    first, base = big["runs"][0], small["runs"][0]
    return row(
        f"lost doorbell deep in a backlog 10x the sweep's read budget ({big['jobs']:,} jobs, "
        f"{BUDGET} reads a run: 10,000 and 1,000 at 1:5): sweep runs until rung",
        f"{runs if runs is not None else f'not in {MAX_RUNS}'} run(s) (place "
        f"{big['place_in_name_order'] + 1:,} of {big['jobs'] + 1:,} in name order); a run: "
        f"{_calls(first)} ({first['examined']:,} read of {first['listed']:,} listed, "
        f"{first['wall_s']:.1f} s)",
        f"{small['jobs']}-job batch (within the budget): {small['rung_after_runs']} run(s); "
        "a run: "
        f"{_calls(base)} ({base['examined']} read, {base['wall_s']:.1f} s)",
        f"{runs} vs {small['rung_after_runs']} run(s)",
        f"<= {TARGET_RUNS} runs",
        runs is not None and runs <= TARGET_RUNS,
        f"the ring of {BUDGET} markers a run it replaces would have taken "
        f"{big['ring_would_take_runs']} runs; the index is listed whole every run (a list "
        "call per 1,000 markers) and markers marked longer ago than the stale time are "
        "read first, the budget then filled with the oldest (shared.sweep_plan). The "
        "bound holds while the markers that may need action fit in the budget; a backlog "
        "that has all waited past the stale time is re-rung oldest mark first, a budget "
        "a run",
    )
