"""The capacity simulation: bursts of 1,000 and 10,000 jobs/s of 3 stages replayed
against bench.capacity_model, in 1 s steps, from cold buckets.

No cloud, no services: each step offers the burst's jobs plus the backlog; the shards
serve what their capacity allows (the lowest of the buckets' current write and read
capacity, Cloud Run's slots, Pub/Sub); a bucket that was asked for more than it had
doubles its capacity after each 20 minutes of it (the documented ramp), and the
backlog drains once capacity passes demand. Shards share the load evenly (hashed
names), so one shard with 1/N of the demand stands for all N.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from bench.capacity_model import (
    CHECKED,
    LIMITS,
    STORAGE_LIMITS,
    Deployment,
    assess,
    bucket_factor,
    ceilings,
    job_ops,
    shards_needed,
    slots_needed,
    storage_jobs_per_s,
)
from bench.common import row

BURSTS = (1000, 10_000)
"""Jobs/s offered during a burst."""
BURST_S = 600
"""How long each burst lasts (10 minutes)."""
HORIZON_S = 6 * 3600
STEP_S = 1.0
STAGES = 3
SHOWN_SHARDS = (1, 2, 4)
STAGE_COUNTS = (1, 3, 10)
EPSILON_JOBS = 1e-6
"""A backlog below this is float rounding, not a job."""


def simulate(rate: float, d: Deployment, burst_s: float = BURST_S) -> dict[str, Any]:
    """Step one shard (of d.shards alike) through a burst: backlog, ramp, catch-up."""
    units = d.buckets  # N buckets alike, or one bucket holding every prefix
    share = rate / units
    one = replace(d, shards=1, layout="buckets")
    other = min(v for k, v in ceilings(one).items() if k not in STORAGE_LIMITS) / units
    backlog = peak = saturated = 0.0
    caught_up_s: float | None = 0.0
    t = 0.0
    while t < HORIZON_S:
        arriving = share if t < burst_s else 0.0
        storage = storage_jobs_per_s(one, bucket_factor(saturated))
        offered = arriving + backlog / STEP_S
        served = min(offered, storage, other)
        if offered > storage and storage < other:
            saturated += STEP_S  # storage is what falls short: it is pressed to scale
        backlog = backlog + (arriving - served) * STEP_S
        backlog = 0.0 if backlog < EPSILON_JOBS else backlog
        peak = max(peak, backlog)
        t += STEP_S
        if backlog > 0:
            caught_up_s = None
        elif caught_up_s is None:
            caught_up_s = t
        if t >= burst_s and backlog == 0:
            break
    return {
        "rate": rate,
        "shards": d.shards,
        "layout": d.layout,
        "peak_backlog_jobs": round(peak * units),
        "kept_up": peak == 0,
        "caught_up_s": caught_up_s,
        "sustained_ramp_s": assess(rate, d).ramp_s,
    }


def smallest_keeping_up(rate: float, d: Deployment) -> int | None:
    """The fewest bucket shards whose simulation never builds a backlog (the model's
    figure, checked by simulating it and one fewer)."""
    n = shards_needed(rate, d)
    if n is None:
        return None
    if not simulate(rate, d.with_shards(n))["kept_up"]:
        raise AssertionError(f"the model's {n} shards do not keep up with {rate} jobs/s")
    if n > 1 and simulate(rate, d.with_shards(n - 1))["kept_up"]:
        raise AssertionError(f"{n - 1} shards keep up with {rate} jobs/s: the model overshoots")
    return n


def _minutes(s: float | None) -> str:
    return "not within 6 h" if s is None else f"{s / 60:.0f} min"


def _burst(rate: int) -> dict[str, Any]:
    sized = Deployment(stages=STAGES)
    sized = replace(
        sized, slots_per_instance=max(sized.slots_per_instance, slots_needed(rate, sized))
    )
    runs = {n: simulate(rate, sized.with_shards(n)) for n in SHOWN_SHARDS}
    prefixes = simulate(rate, replace(sized, shards=16, layout="prefixes"))
    return {
        "rate": rate,
        "slots_per_instance": sized.slots_per_instance,
        "cloud_run_cap_at_default": round(ceilings(Deployment(stages=STAGES))["Cloud Run slots"]),
        "shards_keeping_up": smallest_keeping_up(rate, sized),
        "one_shard": assess(rate, sized).__dict__,
        "runs": runs,
        "prefixes_16": prefixes,
    }


def run() -> dict[str, Any]:
    per_stage = {
        s: {
            "jobs_per_s": round(storage_jobs_per_s(Deployment(stages=s)), 1),
            "binding": assess(1.0, Deployment(stages=s)).binding,
            "writes_per_job": job_ops(s).writes,
            "reads_per_job": job_ops(s).reads,
        }
        for s in STAGE_COUNTS
    }
    bursts = {r: _burst(r) for r in BURSTS}
    sources = "; ".join(
        f"{v['shown']} ({v['source']}" + ("" if v["confirmed"] else ", not confirmed") + ")"
        for v in LIMITS.values()
    )
    rows = [
        row(
            "capacity model: jobs/s one bucket carries from cold",
            ", ".join(
                f"S={s}: {m['jobs_per_s']:g} ({m['writes_per_job']:g} writes/job)"
                for s, m in per_stage.items()
            )
            + f"; binds first: {per_stage[STAGES]['binding']}",
            "1,000 writes/s / (S+4)",
            "-",
            "cited limits",
            None,
            f"limits read {CHECKED}: {sources}",
        )
    ]
    rows += [_burst_row(b) for b in bursts.values()]
    return {"raw": {"per_stage_count": per_stage, "bursts": bursts, "limits": LIMITS}, "rows": rows}


def _burst_row(b: dict[str, Any]) -> dict[str, Any]:
    one = b["one_shard"]
    shown = "; ".join(
        f"{n} bucket{'s' if n > 1 else ''}: carries the rate after "
        f"{_minutes(r['sustained_ramp_s'])} of ramp; this burst peaks at "
        f"{r['peak_backlog_jobs']:,} jobs behind, caught up after {_minutes(r['caught_up_s'])}"
        for n, r in b["runs"].items()
    )
    p = b["prefixes_16"]
    return row(
        f"capacity simulation: {b['rate']:,} jobs/s of {STAGES} stages for "
        f"{BURST_S // 60} min, cold buckets",
        f"{b['shards_keeping_up']} buckets keep up from cold; {shown}",
        f"one bucket: {one['writes_per_s']:,.0f} writes/s asked of ~1,000",
        f"{math.ceil(one['writes_per_s'] / 1000)}x a cold bucket",
        "shards that keep up",
        None,
        f"16 hashed prefixes in one bucket behave as 1 bucket (caught up after "
        f"{_minutes(p['caught_up_s'])}). Claim sized at {b['slots_per_instance']} slots per "
        f"instance x 1,000 instances so Cloud Run does not bind; at terraform's 4 slots "
        f"Cloud Run caps 3 s jobs at {b['cloud_run_cap_at_default']:,} jobs/s",
    )
