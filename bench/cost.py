"""What 1,000 jobs cost on GCP: a measured run on the local cloud, priced with the public
list prices, against one always-on e2-small worker VM.

The run: 100 `demo` jobs of 3 stages of 1 s with an output each (a small job that mostly
waits, as I/O-bound work does), one POST, claim scaled from zero on the local Cloud Run
(2 instances x concurrency 4, scaled in after 2 s idle), no scheduler tick (the sweep's
cost is per month, not per job: see FIXED below). Measured: billable instance-seconds
(request-based billing as the platform accounts it: start-up, requests, shutdown, in
100 ms steps), GCS calls by kind on the wire (the counting proxy), Pub/Sub publishes and
pushes (the emulator's /stats). Priced per 1,000 jobs:

- Cloud Run, request-based billing, Tier 1: claim 1 vCPU / 1 GiB, submit 1 vCPU / 0.5 GiB
  (terraform's defaults), plus the per-request fee on every push and POST;
- Cloud Storage, Standard in a region: class A = writes and listings, class B = reads
  (and bucket reads), deletes free;
- Pub/Sub: throughput, at least 1,000 bytes billed per publish or push request (a
  doorbell is far smaller), each doorbell published in its own request (the worst case).

Free tiers are ignored (they are per billing account and would make small volumes free).

An idle deployment costs what its sweep costs (Cloud Scheduler POSTs it every minute,
terraform's sweep_schedule): the deployment's first sweep runs before the batch (it
lists every feature's index once for the index board, shared.hints.index_board: counted apart,
as the daily whole check), and after the batch, with the queue empty, the run sweeps
IDLE_RUNS times as the scheduler would and prices a month of them: the sweep instance's
billed time per run (its own 100 ms steps; kept warm by the minute's tick, as Cloud Run
keeps an idle instance up to 15 minutes), the request, the Cloud Storage calls on the
wire, the whole index check once a day, and the scheduler job itself.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from bench.common import bench_cloud, row, wait_terminal
from bench.console import CONSOLE
from reclaim.local.observe import emulator_stats, submit_batch, topic_count

JOBS = 100
STAGES, SLEEP_S = 3, 1.0
PER = 1000
CHECKED = "2026-12-01"

PRICES: dict[str, dict[str, Any]] = {
    "cpu_s": {
        "shown": "$0.000024 per vCPU-second",
        "usd": 0.000024,
        "what": "Cloud Run vCPU-second, request-based billing, Tier 1",
        "source": "https://cloud.google.com/run/pricing",
        "confirmed": True,
    },
    "gib_s": {
        "shown": "$0.0000025 per GiB-second",
        "usd": 0.0000025,
        "what": "Cloud Run GiB-second, request-based billing, Tier 1",
        "source": "https://cloud.google.com/run/pricing",
        "confirmed": False,  # the stored copy of the page cut its table after the CPU column
    },
    "request": {
        "shown": "$0.40 per million requests",
        "usd": 0.40 / 1_000_000,
        "what": "Cloud Run request, request-based billing",
        "source": "https://cloud.google.com/run/pricing",
        "confirmed": False,  # as above; third-party summaries quote $0.40 per million
    },
    "class_a": {
        "shown": "$0.005 per 1,000",
        "usd": 0.005 / 1000,
        "what": "Cloud Storage class A operation, Standard",
        "source": "https://cloud.google.com/storage/pricing-examples",
        "confirmed": True,
    },
    "class_b": {
        "shown": "$0.0004 per 1,000",
        "usd": 0.0004 / 1000,
        "what": "Cloud Storage class B operation, Standard",
        "source": "https://cloud.google.com/storage/pricing-examples",
        "confirmed": True,
    },
    "pubsub_byte": {
        "shown": "$40 per TiB",
        "usd": 40 / 2**40,
        "what": "Pub/Sub throughput ($40 per TiB; at least 1,000 bytes per request)",
        "source": "https://cloud.google.com/pubsub/pricing",
        "confirmed": True,
    },
    "scheduler_job": {
        "shown": "$0.10 per job per 31 days",
        "usd": 0.10 / 31,
        "what": "Cloud Scheduler job (billed per day it exists, not per run)",
        "source": "https://cloud.google.com/scheduler/pricing",
        "confirmed": True,
    },
    "e2_small_hour": {
        "shown": "$0.016751 per hour",
        "usd": 0.016751,
        "what": "Compute Engine e2-small on demand, us-central1",
        "source": "https://cloud.google.com/compute/vm-instance-pricing",
        "confirmed": False,  # the stored copy renders no price table; a widely quoted figure
    },
}
SIZING = {"claim": (1.0, 1.0), "submit": (1.0, 0.5)}
"""vCPU and GiB per instance (terraform's claim_function and submit_function defaults)."""
HOURS_PER_MONTH = 730
VM_CONCURRENT = 8
"""Jobs an e2-small runs at once: these jobs mostly wait, and 8 fit its 2 GB easily."""
VM_UTILISATION = 0.10
"""A realistic share of the month such a worker is busy: batches arrive in bursts (the
incident's was 22 jobs), and a single always-on VM is sized for the burst, not the mean."""
SWEEP_TICKS_PER_MONTH = 60 * HOURS_PER_MONTH
SWEEP_TICK_S = 0.3
"""What a sweep run was assumed to bill before it was measured (price() without an idle
measurement)."""
SWEEP_SIZE = (1.0, 0.5)
"""The sweep's vCPU and GiB (terraform's sweep_function default)."""
IDLE_RUNS = 10
CHECKS_PER_MONTH = HOURS_PER_MONTH / 24
"""The index board's whole check: daily once the board is a day old (shared.hints.index_board)."""
IDLE_TARGET_A = 2
"""Class A operations per idle sweep run at most (10 before the index board)."""
IDLE_TARGET_USD = 0.50
"""An idle deployment's month at most $0.50."""


def _measure() -> dict[str, Any]:
    with bench_cloud(
        max_instances=2,
        concurrency=4,
        idle_timeout_seconds=2.0,
        stale_seconds=30.0,
        sweep_interval_seconds=0,
    ) as b:
        first = _sweep_calls(b)  # the deployment's first sweep, before its first job
        b.proxy.reset()
        payload = {"stages": STAGES, "sleep_s": SLEEP_S, "output": True}
        _batch, ids = submit_batch(
            b.cloud.endpoints["jobs"], [{"pipeline": "demo", "payload": payload}] * JOBS
        )
        records = wait_terminal(b.queue, ids, timeout_s=600)
        platform = b.cloud.platform
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # scaled to zero: every shutdown is billed
            if all(platform.service(n).stats()["instances"]["current"] == 0 for n in SIZING):
                break
            time.sleep(0.5)
        billing = {n: platform.service(n).stats()["billing"] for n in SIZING}
        requests = {n: platform.service(n).stats()["requests"]["received"] for n in SIZING}
        stats = emulator_stats(b.cloud.endpoints["emulator_admin"])
        publishes = topic_count(stats, b.cloud.endpoints["jobs_topic"], "published")
        calls = b.proxy.counts()
        by_prefix = b.proxy.by_prefix()
        idle = {**_idle(b), "first_run_calls": first}
    subs = stats.get("subscriptions") or {}
    pushes = sum(int(v.get("push_attempts") or 0) for v in subs.values())
    return {
        "jobs": JOBS,
        "done": sum(r.get("status") == "done" for r in records.values()),
        "instance_seconds": {n: b_["instance_seconds"] for n, b_ in billing.items()},
        "requests": requests,
        "gcs": calls,
        "gcs_by_prefix": by_prefix,
        "publishes": publishes,
        "pushes": pushes,
        "idle": idle,
    }


def _tick(b: Any) -> None:
    """One sweep run, POSTed as Cloud Scheduler does."""
    req = urllib.request.Request(b.cloud.endpoints["sweep"], data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def _sweep_calls(b: Any) -> dict[str, int]:
    """A deployment's first sweep (the index board's first whole check): its calls."""
    b.proxy.reset()
    _tick(b)
    return b.proxy.counts()


def _idle(b: Any) -> dict[str, Any]:
    """Sweeps of the empty queue, IDLE_RUNS back to back as Cloud Scheduler POSTs them
    (one first, so that the instance is warm as a minute's tick keeps it): each one's
    calls on the wire and the sweep's billed time."""
    service = b.cloud.platform.service("sweep")
    CONSOLE.progress("cost: idle sweeps")
    _tick(b)
    billed0 = service.stats()["billing"]["instance_seconds"]
    b.proxy.reset()
    for _ in range(IDLE_RUNS):
        _tick(b)
    calls = b.proxy.counts()
    billed = service.stats()["billing"]["instance_seconds"] - billed0
    return {
        "runs": IDLE_RUNS,
        "calls": calls,
        "by_prefix": b.proxy.by_prefix(),
        "billed_s": round(billed, 3),
    }


def class_a(calls: dict[str, int]) -> int:
    """Writes and listings (https://cloud.google.com/storage/pricing; deletes are free)."""
    return calls.get("write", 0) + calls.get("list", 0)


def idle_month(idle: dict[str, Any]) -> dict[str, Any]:
    """An idle deployment's month (pure): a sweep run a minute as measured, the index
    board's whole check daily (what the first run made beyond a plain one), the scheduler
    job."""
    p = {k: v["usd"] for k, v in PRICES.items()}
    runs = idle["runs"]
    a_run = class_a(idle["calls"]) / runs
    b_run = (idle["calls"].get("read", 0) + idle["calls"].get("other", 0)) / runs
    billed_run = idle["billed_s"] / runs
    check_a = max(0.0, class_a(idle["first_run_calls"]) - a_run)
    ticks = SWEEP_TICKS_PER_MONTH
    cpu, gib = SWEEP_SIZE
    usd = {
        "compute": ticks * billed_run * (cpu * p["cpu_s"] + gib * p["gib_s"]),
        "requests": ticks * p["request"],
        "gcs_class_a": (ticks * a_run + CHECKS_PER_MONTH * check_a) * p["class_a"],
        "gcs_class_b": ticks * b_run * p["class_b"],
        "scheduler": p["scheduler_job"] * HOURS_PER_MONTH / 24,
    }
    return {
        "class_a_per_run": round(a_run, 2),
        "class_b_per_run": round(b_run, 2),
        "billed_s_per_run": round(billed_run, 3),
        "check_class_a": round(check_a, 1),
        "usd": {k: round(v, 4) for k, v in usd.items()},
        "usd_per_month": round(sum(usd.values()), 2),
    }


def price(m: dict[str, Any]) -> dict[str, Any]:
    """Costs per 1,000 jobs, and the VM comparison (pure: the table's arithmetic)."""
    scale = PER / m["jobs"]
    p = {k: v["usd"] for k, v in PRICES.items()}
    inst_s = {n: s * scale for n, s in m["instance_seconds"].items()}
    compute = sum(
        s * (SIZING[n][0] * p["cpu_s"] + SIZING[n][1] * p["gib_s"]) for n, s in inst_s.items()
    )
    reqs = sum(m["requests"].values()) * scale
    gcs = m["gcs"]
    class_a = (gcs.get("write", 0) + gcs.get("list", 0)) * scale
    class_b = (gcs.get("read", 0) + gcs.get("other", 0)) * scale
    messages = (m["publishes"] + m["pushes"]) * scale
    costs = {
        "compute": compute,
        "requests": reqs * p["request"],
        "gcs_class_a": class_a * p["class_a"],
        "gcs_class_b": class_b * p["class_b"],
        "pubsub": messages * 1000 * p["pubsub_byte"],
    }
    per_1000 = sum(costs.values())
    vm_month = p["e2_small_hour"] * HOURS_PER_MONTH
    job_s = STAGES * SLEEP_S
    vm_jobs = VM_UTILISATION * HOURS_PER_MONTH * 3600 * VM_CONCURRENT / job_s
    if m.get("idle"):
        sweep_month = idle_month(m["idle"])["usd_per_month"]
    else:  # no idle measurement: the assumed tick, compute and request only
        sweep_month = SWEEP_TICKS_PER_MONTH * (
            SWEEP_TICK_S * (p["cpu_s"] + 0.5 * p["gib_s"]) + p["request"]
        )
    return {
        "instance_seconds": {n: round(s, 1) for n, s in inst_s.items()},
        "requests": round(reqs),
        "gcs_class_a": round(class_a),
        "gcs_class_b": round(class_b),
        "pubsub_messages": round(messages),
        "usd": {k: round(v, 5) for k, v in costs.items()},
        "usd_per_1000_jobs": round(per_1000, 4),
        "vm_usd_per_month": round(vm_month, 2),
        "sweep_usd_per_month": round(sweep_month, 2),
        "break_even_jobs_per_month": round((vm_month - sweep_month) / per_1000 * PER),
        "vm_jobs_per_month": round(vm_jobs),
        "break_even_utilisation": round(
            (vm_month - sweep_month) / per_1000 * PER / (vm_jobs / VM_UTILISATION), 4
        ),
        "serverless_usd_for_vm_jobs": round(vm_jobs / PER * per_1000 + sweep_month, 2),
    }


def cited(prices: dict[str, dict[str, Any]]) -> str:
    """The prices as a row's note: what, how much, the page, and whether the stored copy
    of the page showed it."""
    return "; ".join(
        f"{v['what']}: {v['shown']} ({v['source']}"
        + ("" if v["confirmed"] else ", not confirmed on the page as stored")
        + ")"
        for v in prices.values()
    )


def run() -> dict[str, Any]:
    m = _measure()
    c = price(m)
    sources = cited(PRICES)
    usd = c["usd"]
    return {
        "raw": {"measured": m, "per_1000_jobs": c, "prices": PRICES, "checked": CHECKED},
        "rows": [
            row(
                f"cost per 1,000 jobs ({STAGES} stages of {SLEEP_S:g} s, an output each)",
                f"${c['usd_per_1000_jobs']:.4f}: {sum(c['instance_seconds'].values()):.0f} "
                f"instance-s ${usd['compute']:.4f} (claim {c['instance_seconds']['claim']:.0f}, "
                f"submit {c['instance_seconds']['submit']:.0f}), {c['requests']} requests "
                f"${usd['requests']:.4f}, GCS class A {c['gcs_class_a']} ${usd['gcs_class_a']:.4f}"
                f" and class B {c['gcs_class_b']} ${usd['gcs_class_b']:.4f}, Pub/Sub "
                f"{c['pubsub_messages']} messages ${usd['pubsub']:.5f}",
                f"list prices read {CHECKED} (free tiers ignored)",
                "-",
                "cited prices",
                None,
                f"prices: {sources}",
            ),
            *_idle_rows(m["idle"]),
            row(
                "cost for a month vs one always-on e2-small",
                f"{c['vm_jobs_per_month']:,} jobs/month (the VM {VM_UTILISATION:.0%} busy, "
                f"{VM_CONCURRENT} at a time): ${c['serverless_usd_for_vm_jobs']:.2f} serverless "
                f"(incl. the idle deployment's ${c['sweep_usd_per_month']:.2f}); break-even at "
                f"{c['break_even_jobs_per_month']:,} jobs/month (the VM "
                f"{c['break_even_utilisation']:.1%} busy)",
                f"e2-small ${c['vm_usd_per_month']:.2f}/month (730 h), whatever the load",
                f"{c['serverless_usd_for_vm_jobs'] / c['vm_usd_per_month']:.2f}x the VM",
                "-",
                None,
                "the VM needs its own queue, disk and restarts, and runs one burst at a time; "
                "the serverless figure scales to zero between bursts",
            ),
        ],
    }


def _idle_rows(idle: dict[str, Any]) -> list[dict[str, Any]]:
    """The idle sweep's calls per run, and an idle deployment's month."""
    month = idle_month(idle)
    usd = month["usd"]
    by = idle["by_prefix"]
    shown = ", ".join(f"{k} {n / idle['runs']:g}" for k, n in sorted(by.items()) if n)
    return [
        row(
            "idle sweep, empty queue: Cloud Storage calls per run",
            f"class A {month['class_a_per_run']:g}, class B {month['class_b_per_run']:g} "
            f"({shown}; {idle['runs']} runs); the index board's whole check (a new "
            f"deployment's first run, then daily): {month['check_class_a']:g} class A more",
            "before the index board: 10 class A a run (pending/, every scheduled/ fan-out "
            "slot and the names before them, unique/, parked/, waiting-for/, workflows/)",
            f"{month['class_a_per_run'] / 10:.2f}x the calls before",
            f"<= {IDLE_TARGET_A} class A per run",
            month["class_a_per_run"] <= IDLE_TARGET_A,
            "class A: writes and listings; class B: reads (https://cloud.google.com/storage/"
            "pricing). The one listing is the pending index's, which an idle run needs",
        ),
        row(
            "an idle deployment for a month (the sweep every minute, empty queue)",
            f"${month['usd_per_month']:.2f}: sweep compute ${usd['compute']:.3f} "
            f"({month['billed_s_per_run']:g} s billed a run, 1 vCPU / 0.5 GiB), requests "
            f"${usd['requests']:.3f}, GCS class A ${usd['gcs_class_a']:.3f} and class B "
            f"${usd['gcs_class_b']:.3f}, Cloud Scheduler's job ${usd['scheduler']:.3f}",
            "before the index board: $2.19 of class A alone (10 listings a run)",
            "-",
            f"<= ${IDLE_TARGET_USD:.2f}",
            month["usd_per_month"] <= IDLE_TARGET_USD,
            f"{SWEEP_TICKS_PER_MONTH:,} runs a month (730 h); free tiers ignored, as above; "
            "logs are outside the model (the sweep's metric lines, a few KB a run)",
        ),
    ]
