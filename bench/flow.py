"""Flow control: what a key costs, and how soon a freed place starts the next job.

1. Cloud Storage calls per job (store.calls, on the wire to fake-gcs-server through
   GcsStore), one-stage `demo` jobs run one after another in this process (no doorbell,
   no drain), unkeyed against keyed (max_running 2, a place free) and rated ("1000/s").
2. The delay from a holder's finish to its waiting job's start, on the local cloud: pairs of
   jobs sharing a key with max_running 1, the holder running 2 s when its waiter arrives;
   the delay is the waiter's `claimed` minus the holder's `done`, both from the records.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bench.common import SilentDoorbell, bench_cloud, row, wait_terminal
from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.queue import Queue, parse_submission

JOBS = 20
PAIRS = 10


def _calls_per_job(queue: Queue, fields: dict[str, Any]) -> dict[str, float]:
    store = queue.store
    ids = [f"fb-{uuid.uuid4().hex[:10]}" for _ in range(JOBS)]
    for job_id in ids:
        body = {"pipeline": "demo", "payload": {"stages": 1}, "id": job_id, **fields}
        queue.submit(parse_submission(body, queue.settings))
    before = Counter(store.calls)
    for job_id in ids:
        outcome = queue.handle_delivery(job_id, owner="bench", slots=Slots(1), gate=DrainGate())
        assert outcome.kind == "done", outcome
    after = Counter(store.calls)
    return {k: round((after[k] - before[k]) / JOBS, 2) for k in sorted(set(after) | set(before))}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _event(record: Mapping[str, Any], event: str) -> datetime:
    return _at(next(e["at"] for e in record["history"] if e["event"] == event))


def _handoff_delays(b: Any) -> list[float]:
    """One pair at a time: the holder, then (once it runs) its waiter."""
    import requests

    url = b.cloud.endpoints["jobs"]
    pairs = []
    for _ in range(PAIRS):
        key = f"h-{uuid.uuid4().hex[:6]}"
        flow: dict[str, Any] = {"concurrency_key": key, "max_running": 1}
        slow: dict[str, Any] = {
            "pipeline": "demo",
            "payload": {"stages": 1, "sleep_s": 2.0},
            **flow,
        }
        holder = requests.post(url, json=slow, timeout=30).json()["id"]
        deadline = time.monotonic() + 30
        while b.queue.read(holder).get("status") != "running":
            if time.monotonic() > deadline:
                raise TimeoutError("the holder never ran")
            time.sleep(0.05)
        quick: dict[str, Any] = {"pipeline": "demo", "payload": {"stages": 1}, **flow}
        pairs.append((holder, requests.post(url, json=quick, timeout=30).json()["id"]))
    records = wait_terminal(b.queue, [j for pair in pairs for j in pair], timeout_s=120)
    delays = []
    for holder, waiter in pairs:
        done = _event(records[holder], "done")
        if _event(records[waiter], "submitted") < done:  # it did wait for the place
            delays.append((_event(records[waiter], "claimed") - done).total_seconds())
    return delays


def run() -> dict[str, Any]:
    raw: dict[str, Any] = {}
    with bench_cloud(max_instances=3, concurrency=8, sweep_interval_seconds=0) as b:
        settings = Settings.from_env({}, drain_max_jobs=0)
        queue = Queue(b.queue.store, SilentDoorbell(), settings)
        raw["unkeyed"] = _calls_per_job(queue, {})
        raw["keyed"] = _calls_per_job(
            queue, {"concurrency_key": f"k-{uuid.uuid4().hex[:6]}", "max_running": 2}
        )
        raw["rated"] = _calls_per_job(
            queue, {"concurrency_key": f"r-{uuid.uuid4().hex[:6]}", "rate": "1000/s"}
        )
        delays = _handoff_delays(b)
    raw["handoff_s"] = [round(d, 3) for d in delays]
    total = {k: sum(v.values()) for k, v in raw.items() if isinstance(v, dict)}

    def show(calls: Mapping[str, float]) -> str:
        return ", ".join(f"{k} {v:g}" for k, v in calls.items() if v)

    extra_keyed = round(total["keyed"] - total["unkeyed"], 2)
    extra_rated = round(total["rated"] - total["unkeyed"], 2)
    median = statistics.median(delays)
    rows = [
        row(
            "flow: GCS calls/job, keyed (max_running 2, a place free)",
            f"{total['keyed']:g} calls ({show(raw['keyed'])}): +{extra_keyed:g} per job",
            f"unkeyed {total['unkeyed']:g} ({show(raw['unkeyed'])})",
            f"{total['keyed'] / total['unkeyed']:.2f}x",
            "a few calls per keyed job, none per unkeyed job",
            None,
            "before the claim a keyed job lists its key's places, reads them until an empty one "
            "and takes it by a compare-and-swap (the first job of a key creates it); after its "
            "terminal write it empties the place (a compare-and-swap on the generation it took, "
            "no read) and lists its key's waiters (the finish hook). The pause flag read is "
            "cached 2 s per process, so it shows as a fraction of a read on every job",
        ),
        row(
            "flow: GCS calls/job, rated (1000/s, within the rate)",
            f"{total['rated']:g} calls ({show(raw['rated'])}): +{extra_rated:g} per job",
            f"unkeyed {total['unkeyed']:g}",
            f"{total['rated'] / total['unkeyed']:.2f}x",
            "a few calls per rated job",
            None,
        ),
        row(
            f"flow: a holder's finish to its waiter's start, {len(delays)} keys (max_running 1)",
            f"median {median * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms",
            "without the ring: the next sweep (Cloud Scheduler, at least every 60 s)",
            f"{median / 60:.4f} of a sweep interval",
            "< 1 s, no poll",
            median < 1.0,
        ),
    ]
    return {"raw": raw, "rows": rows}
