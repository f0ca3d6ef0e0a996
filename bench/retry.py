"""Retries on time (issue 40): the first retry's delay against the configured backoff.

Each job's first attempt raises in its first stage (the demo's fail_at 0, fail_attempts
1); its owner requeues it with a delay drawn between 0 and the backoff (full jitter: its
not_before) and the second attempt runs to done. From the record's history: the delay
from the requeue to the second attempt's claim, and how late that claim was after the
not_before. Target: every first retry claimed within backoff + 2 s (RETRY_MARGIN_S).

Two local clouds, side by side (their waits overlap):
- a 5 s backoff with the defaults: every retry waits inside the push of its doorbell,
  rung when it was requeued (shared.claim.due_wait);
- a 60 s backoff with a 30 s wait window and a sweep every 20 s: a delay drawn within
  30 s is waited for in the push as above, a longer one is rung ahead by the sweep once
  it is due within the window. It is GCP's shape (a sweep every minute, a 90 s window)
  scaled to fit the row in about a minute; the default window would wait for every 60 s
  delay in its push, the 5 s row's path.
Neither cloud's staleness rule (30 s stale time) nor drain safety net can claim a retry in
time: a late claim would show.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from bench.common import Bench, bench_cloud, row
from reclaim.local.observe import parse_at, submit_batch
from shared.claim.due_wait import RETRY_MARGIN_S

JOBS = 6
SHORT_S = 5.0
LONG_S = 60.0
LONG_WINDOW_S = 30.0
LONG_SWEEP_S = 20.0


def _first_retry(record: dict[str, Any]) -> dict[str, float] | None:
    """(delay, lateness, backoff drawn) of the first retry, from the history."""
    requeued: dict[str, Any] | None = None
    for entry in record.get("history") or []:
        if entry.get("event") == "requeued" and entry.get("attempt") == 1 and entry.get("error"):
            requeued = entry
        if entry.get("event") == "claimed" and entry.get("attempt") == 2 and requeued:
            at, claimed = parse_at(requeued.get("at")), parse_at(entry.get("at"))
            due = parse_at(requeued.get("not_before")) or at
            if at is None or claimed is None or due is None:
                return None
            return {
                "delay_s": _s(claimed, at),
                "late_s": _s(claimed, due),
                "drawn_s": _s(due, at),
            }
    return None


def _s(later: datetime, earlier: datetime) -> float:
    return round((later - earlier).total_seconds(), 3)


def _scenario(backoff_s: float, **cloud: Any) -> dict[str, Any]:
    env = {
        "RECLAIM_BACKOFF_BASE_SECONDS": str(backoff_s),
        "RECLAIM_BACKOFF_MAX_SECONDS": str(backoff_s),
        **cloud.pop("env", {}),
    }
    with bench_cloud(function_env=env, stale_seconds=30.0, **cloud) as b:
        return _measure(b, backoff_s)


def _measure(b: Bench, backoff_s: float) -> dict[str, Any]:
    job = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "fail_attempts": 1}}
    _batch, ids = submit_batch(b.cloud.endpoints["jobs"], [job] * JOBS)
    deadline = time.monotonic() + backoff_s + 60
    found: dict[str, dict[str, float]] = {}
    while time.monotonic() < deadline and len(found) < len(ids):
        for job_id, record in b.snapshot(ids).items():
            retry = _first_retry(record)
            if retry is not None and record.get("status") == "done":
                found[job_id] = retry
        time.sleep(0.25)
    if len(found) < len(ids):
        raise RuntimeError(f"{len(ids) - len(found)} first retries never ran")
    retries = list(found.values())
    return {
        "backoff_s": backoff_s,
        "retries": retries,
        "max_delay_s": max(r["delay_s"] for r in retries),
        "max_late_s": max(r["late_s"] for r in retries),
        "max_drawn_s": max(r["drawn_s"] for r in retries),
    }


def run() -> dict[str, Any]:
    long_env = {"RECLAIM_RETRY_WAIT_SECONDS": str(LONG_WINDOW_S)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        short = pool.submit(_scenario, SHORT_S)
        time.sleep(5)  # the clouds' starts apart: two cold starts at once only slow both
        long = pool.submit(_scenario, LONG_S, env=long_env, sweep_interval_seconds=LONG_SWEEP_S)
        measured = {"short": short.result(), "long": long.result()}
    rows = [_row(measured["short"], "rung at once, waited for in the push")]
    ahead = sum(r["drawn_s"] > LONG_WINDOW_S for r in measured["long"]["retries"])
    rows.append(
        _row(
            measured["long"],
            f"{LONG_WINDOW_S:g} s window, sweep every {LONG_SWEEP_S:g} s: {ahead} of {JOBS} "
            "drawn longer than the window, rung ahead by the sweep; the others waited for "
            "in the push",
        )
    )
    return {"raw": measured, "rows": rows}


def _row(m: dict[str, Any], how: str) -> dict[str, Any]:
    backoff = m["backoff_s"]
    target = backoff + RETRY_MARGIN_S
    return row(
        f"first retry after a stage error, {backoff:g} s backoff ({JOBS} jobs)",
        f"{m['max_delay_s']:.2f} s at most",
        f"backoff drawn up to {m['max_drawn_s']:.2f} s",
        f"+{m['max_late_s']:.2f} s after its not_before",
        f"<= {target:g} s (backoff + {RETRY_MARGIN_S:g} s)",
        m["max_delay_s"] <= target,
        f"{how}; delay from the requeue to the next attempt's claim, in the record's history",
    )
