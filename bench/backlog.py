"""A 500-job batch through a claim service too small for it: does a refused doorbell
leave slots idle?

At max instances Cloud Run holds pushes in its pending queue and refuses them with 429
after max(10 s, 3.5 x the average start-up) (about instance autoscaling); Pub/Sub then
backs each refused message off, 10 to 600 s with terraform's retry policy. Both runs
use production's backoffs on the local Cloud Run (2 instances x concurrency 4, warm),
with the emulator's push window allowed to grow to 256, as the service's does under a
steady stream of acks:

- platform: Cloud Run's pending rule, so pushes are refused;
- never refused: pushes wait in the pending queue as long as it takes (pending timeout
  3600 s), so no doorbell is ever held back by a backoff: the baseline.

bench/drain_off.py (make bench-scale) runs the platform's once more with the drain off.

The figure is the time from the first doorbell (the batch's first claim) to the last
job done, from the records' history; target: the platform run within 1.3x of the
baseline. The claim logs say how many jobs the drain took from the pending index, and
how often an arriving push showed a backlog (shared.claim.drain.backlog_sign).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from bench.common import claim_subscription, local_cloud, row, wait_pending_empty
from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import parse_at, snapshot, submit_batch, watching_queue

JOBS = 500
INSTANCES, CONCURRENCY = 2, 4
SLEEP_S = 0.5
PUSH_WINDOW = 256
TARGET = 1.3


def _claim_log_counts(cloud: LocalCloud) -> dict[str, Any]:
    """From every claim instance's log: drained jobs, backlog signs, and when each kind
    of sign first showed (a doorbell that waited, or a redelivery): the two candidate
    signals, measured on the same run."""
    counts: dict[str, Any] = {"drained": 0, "backlog_signs": 0}
    first: dict[str, datetime] = {}
    for log in cloud.config.log_dir.glob("claim-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = str(entry.get("message"))
            if message == "draining a due job":
                counts["drained"] += 1
            elif message.startswith("doorbells are being held back"):
                counts["backlog_signs"] += 1
                kind = "redelivery" if "attempt" in str(entry.get("sign")) else "waited"
                at = parse_at(entry.get("time"))
                if at is not None and (kind not in first or at < first[kind]):
                    first[kind] = at
    counts["first_sign_at"] = first
    return counts


def _variant(refuse: bool, drain: bool = True) -> dict[str, Any]:
    env = {"RECLAIM_LOG_LEVEL": "DEBUG"}  # every push's backlog sign (INFO only the first)
    cloud = local_cloud(
        function_env=env if drain else {**env, "RECLAIM_DRAIN_MAX_JOBS": "0"},
        max_instances=INSTANCES,
        min_instances=INSTANCES,
        concurrency=CONCURRENCY,
        stale_seconds=60.0,
        sweep_interval_seconds=60.0,
        push_max_window=PUSH_WINDOW,
        pending_timeout_seconds=None if refuse else 3600.0,
        min_backoff_seconds=wiring.PROD_MIN_BACKOFF_SECONDS,
        max_backoff_seconds=wiring.PROD_MAX_BACKOFF_SECONDS,
    )
    with cloud:
        queue = watching_queue(cloud)
        jobs = [{"pipeline": "demo", "payload": {"stages": 1, "sleep_s": SLEEP_S}}] * JOBS
        started = time.monotonic()
        _batch, ids = submit_batch(cloud.endpoints["jobs"], jobs)
        wait_pending_empty(queue, timeout_s=900, poll_s=0.5)
        wall = time.monotonic() - started
        records = snapshot(queue, ids)
        claim = cloud.service("claim").stats()
        pushes = claim_subscription(cloud)
        logs = _claim_log_counts(cloud)
    claims = [_first(r, "claimed") for r in records.values()]
    dones = [_first(r, "done") for r in records.values()]
    first = min(c for c in claims if c is not None)
    last = max(d for d in dones if d is not None)
    signs = logs.pop("first_sign_at")
    logs["first_sign_s"] = {k: round((at - first).total_seconds(), 2) for k, at in signs.items()}
    return {
        "refuse": refuse,
        "drain": drain,
        "jobs": JOBS,
        "done": sum(r.get("status") == "done" for r in records.values()),
        "first_doorbell_to_last_done_s": round((last - first).total_seconds(), 2),
        "wall_s": round(wall, 2),
        "ideal_s": round(JOBS * SLEEP_S / (INSTANCES * CONCURRENCY), 1),
        "refused_429": claim["requests"]["refused"],
        "pending_max_s": claim["pending_waits"]["max_s"],
        "pushes": pushes.get("push_attempts", 0),
        "push_failures": pushes.get("push_failures", 0),
        **logs,
    }


def _s(seconds: float | None) -> str:
    return "not at all" if seconds is None else f"{seconds:.1f} s after the first claim"


def _first(record: dict[str, Any], event: str) -> Any:
    for entry in record.get("history") or []:
        if entry.get("event") == event:
            return parse_at(entry.get("at"))
    return None


def run() -> dict[str, Any]:
    platform, baseline = _variant(refuse=True), _variant(refuse=False)
    base_s = baseline["first_doorbell_to_last_done_s"]
    ratio = platform["first_doorbell_to_last_done_s"] / base_s
    met = ratio <= TARGET and platform["done"] == JOBS
    waited = platform["first_sign_s"].get("waited")
    again = platform["first_sign_s"].get("redelivery")
    note = (
        "the signals, on the platform run: a doorbell that waited over 5 s first showed "
        f"{_s(waited)}, a redelivery (deliveryAttempt 2, after a 429 and a 10 s backoff) "
        f"{_s(again)}. The drain_off row (make bench-scale) runs the same batch with the "
        "drain off"
    )
    if not met:
        note = (
            f"{platform['refused_429']} pushes were refused and {platform['drained']} jobs "
            "were taken by the drain; the rest waited for Pub/Sub's redelivery. " + note
        )
    if platform["refused_429"] == 0:
        note = (
            "no push was refused in the platform run, so it does not exercise the backlog "
            "path; " + note
        ).rstrip("; ")
    p, b = platform, baseline
    return {
        "raw": {
            "platform": platform,
            "never_refused": baseline,
            "ratio": round(ratio, 3),
        },
        "rows": [
            row(
                f"{JOBS}-job batch, first doorbell to last done, {INSTANCES}x{CONCURRENCY} "
                f"slots, {SLEEP_S:g} s jobs, production backoffs",
                f"{p['first_doorbell_to_last_done_s']:.1f} s ({p['refused_429']} pushes "
                f"refused by the platform, {p['drained']} jobs drained, {p['backlog_signs']} "
                f"backlog signs; ideal {p['ideal_s']:g} s)",
                f"never refused: {b['first_doorbell_to_last_done_s']:.1f} s (pending up to "
                f"{b['pending_max_s']:.0f} s, {b['drained']} drained)",
                f"{ratio:.2f}x",
                f"<= {TARGET}x",
                met,
                note,
            )
        ],
    }
