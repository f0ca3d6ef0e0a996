"""GCS calls per job by kind, and publishes per job, on the happy path.

A 3-stage `demo` pipeline, jobs submitted one POST each (no batch marker),
2 claim instances x 4 slots, no scheduler tick (the sweep is measured on its
own). Calls are counted on the wire by reclaim.local.faultproxy (client retries and
412s included). Workloads: stages of 1.2 s (every stage boundary is
checkpointed: the worst case) with as many jobs as slots, then with twice as
many (doorbells wait for a slot, the drain at work), and no-op stages
(boundaries within 1 s are coalesced).

Reads are judged by what causes them: per job, the record (the claim) and the workflows
parent mark (a job ending reads workflows/parents/<id>, a class B read that spares a
job without children the class A listing of its children); per claim process, the
pipeline's pause flag, read at most once per shared.features.flow.PAUSE_CACHE_S, and the
pool's due hint, read by a freed slot at most once per shared.hints.due_hint.HINT_READ_S,
whatever the number of jobs, so both are bounded by the run's wall time, not counted per
job.

Class A operations per job (writes and listings, https://cloud.google.com/storage/pricing)
are set against the floor claim's (bench/floor_claim.py: read, claim, done, unmark) on the
same batch, measured on one bucket and on two record shards (where a listing of the
pending index is one per shard), with default checkpoints (every stage boundary its own
write) and with a pipeline that coalesces them (bench/row_pipelines.py).
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from typing import Any

from bench.common import bench_cloud, row, wait_terminal
from bench.console import CONSOLE
from bench.row_pipelines import CHECKPOINT_EVERY_S
from bench.throughput import claim_functions
from reclaim.local import wiring
from shared.config import Settings
from shared.features.flow import PAUSE_CACHE_S
from shared.hints.due_hint import HINT_PREFIX, HINT_READ_S
from shared.jobs import JobStatus

STAGES = 3
INSTANCES = 2
MAX_CONCURRENT = 4
SLOTS = INSTANCES * MAX_CONCURRENT
WORKLOADS = (
    ("within_slots", f"{STAGES} stages of 1.2 s, {SLOTS} jobs on {SLOTS} slots", 1.2, SLOTS),
    ("backlog", f"{STAGES} stages of 1.2 s, {2 * SLOTS} jobs on {SLOTS} slots", 1.2, 2 * SLOTS),
    ("no_op", f"{STAGES} no-op stages, {2 * SLOTS} jobs on {SLOTS} slots", 0.0, 2 * SLOTS),
)
"""(key, label, seconds per stage, jobs): fewer jobs than slots is the plain claim path;
more jobs than slots makes doorbells wait for a slot and brings in the drain; no-op stages
coalesce their checkpoints."""
STALE_S = 30.0
DRAIN_GATE_S = Settings.from_env({}, stale_seconds=STALE_S).drain_interval_seconds
TARGET_MUTATIONS = STAGES + 4
TARGET_READS = 2.0
"""Reads per job: the record and the workflows parent mark (the pause flag apart)."""
PAUSE_FLAG = "read paused/"
DUE_HINT = f"read {HINT_PREFIX.split('/', 1)[0]}/"
TARGET_PUBLISHES = 1.0
FLOOR_FACTOR = 1.5
"""Class A per job at most 1.5x the floor claim's with default checkpoints: 6 against 4
for three stages (the S-1 = 2 checkpoints are the difference), on one bucket and on two."""
COALESCED_FACTOR = 1.25
"""And at most 1.25x with the boundaries coalesced (bench/row_pipelines.py)."""
MODULES = {"RECLAIM_PIPELINE_MODULES": "bench.row_pipelines"}
SHARDS = (f"{wiring.Topology().records_bucket}-shard-1",)
"""The second record shard of the two-shard runs (RECLAIM_SHARD_BUCKETS)."""


def _post(url: str, job: dict[str, Any]) -> str:
    req = urllib.request.Request(
        url, data=json.dumps(job).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.loads(resp.read())["id"])


def _measure(b: Any, sleep_s: float, jobs: int, pipeline: str = "demo") -> dict[str, Any]:
    b.proxy.reset()
    pub0 = b.publishes()
    job = {"pipeline": pipeline, "payload": {"stages": STAGES, "sleep_s": sleep_s}}
    start = time.monotonic()
    ids = [_post(b.cloud.endpoints["jobs"], job) for _ in range(jobs)]
    records = wait_terminal(b.queue, ids, timeout_s=120)
    time.sleep(0.5)  # the final marker delete follows the terminal write
    counts = b.proxy.counts()
    answers = b.proxy.answers()
    touched = b.proxy.by_prefix()
    done = sum(r.get("status") == JobStatus.DONE for r in records.values())
    per = {k: round(v / jobs, 2) for k, v in counts.items()}
    return {
        "jobs": jobs,
        "done": done,
        "sleep_s_per_stage": sleep_s,
        "wall_s": round(time.monotonic() - start, 2),
        "calls": counts,
        "answers": answers,
        "lost_cas_per_job": round(answers.get("write:412", 0) / jobs, 2),
        "per_job": per,
        "mutations_per_job": round((counts["write"] + counts["delete"]) / jobs, 2),
        "reads_per_job": per["read"],
        **_reads(touched, jobs, time.monotonic() - start),
        "lists_per_job": per["list"],
        "publishes_per_job": round((b.publishes() - pub0) / jobs, 2),
        "by_prefix": touched,
        "by_prefix_status": b.proxy.by_prefix(statuses=True),
        "class_a_per_job": round((counts["write"] + counts["list"]) / jobs, 2),
        "class_a_by_source": class_a_sources(touched, jobs),
    }


def _reads(by_prefix: dict[str, int], jobs: int, wall_s: float) -> dict[str, Any]:
    """Reads per job without the pause flag's and the due hint's, and those two against
    their bounds: one per claim process per PAUSE_CACHE_S (HINT_READ_S) of the run, and
    one at its start."""
    reads = {k.split(" ", 1)[1]: n for k, n in by_prefix.items() if k.startswith("read ")}
    pause = by_prefix.get(PAUSE_FLAG, 0)
    hint = by_prefix.get(DUE_HINT, 0)
    return {
        "job_reads_per_job": round((sum(reads.values()) - pause - hint) / jobs, 2),
        "reads_by_prefix_per_job": {k: round(n / jobs, 2) for k, n in reads.items()},
        "pause_flag_reads": pause,
        "pause_flag_bound": INSTANCES * (math.floor(wall_s / PAUSE_CACHE_S) + 1),
        "due_hint_reads": hint,
        "due_hint_bound": INSTANCES * (math.floor(wall_s / HINT_READ_S) + 1),
    }


def _cloud(*, floor: bool = False, shards: bool = False) -> Any:
    """The calls' local cloud: reclaim's claim or the floor's, one bucket or two."""
    return bench_cloud(
        max_instances=INSTANCES,
        min_instances=INSTANCES,
        concurrency=MAX_CONCURRENT,
        sweep_interval_seconds=0,
        stale_seconds=STALE_S,
        functions=claim_functions(floor),
        function_env=MODULES,
        **({"shard_buckets": SHARDS} if shards else {}),
    )


def run() -> dict[str, Any]:
    raw: dict[str, Any] = {}
    rows = []
    with _cloud() as b:
        for key, label, sleep_s, jobs in WORKLOADS:
            CONSOLE.progress(f"calls: {label}")
            raw[key] = _measure(b, sleep_s, jobs)
            rows.append(_row(f"GCS calls/job, {label}", raw[key]))
            time.sleep(DRAIN_GATE_S)  # the next workload starts with the drain gates open
        CONSOLE.progress("calls: coalesced checkpoints")
        raw["coalesced"] = _measure(b, 1.2, SLOTS, pipeline="bench-coalesced")
    for shards in (False, True):
        where = "two_shards" if shards else "one_bucket"
        CONSOLE.progress(f"calls: the floor claim, {where.replace('_', ' ')}")
        with _cloud(floor=True, shards=shards) as b:
            raw[f"floor_{where}"] = _measure(b, 1.2, SLOTS)
        if shards:
            CONSOLE.progress("calls: two shards")
            with _cloud(shards=True) as b:
                for key, _label, sleep_s, jobs in WORKLOADS[:2]:
                    raw[f"{key}_two_shards"] = _measure(b, sleep_s, jobs)
    rows.append(_class_a_row(raw))
    rows += _floor_rows(raw)
    return {"raw": raw, "rows": rows}


def _floor_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Class A per job against the floor claim's, on one bucket and on two shards with
    default checkpoints (the worse of the two 1.2 s workloads), and coalesced."""
    label = {key: label for key, label, _s, _j in WORKLOADS}
    out = []
    for where, suffix in (("one bucket", ""), ("two shards", "_two_shards")):
        worst = max(WORKLOADS[:2], key=lambda w: raw[w[0] + suffix]["class_a_per_job"])[0]
        floor = raw["floor_" + where.replace(" ", "_")]
        out.append(
            floor_row(
                f"class A ops/job against the floor claim, {where}, default checkpoints",
                raw[worst + suffix],
                floor,
                FLOOR_FACTOR,
                f"{label[worst]}; the other 1.2 s workload: "
                + ", ".join(
                    f"{raw[w[0] + suffix]['class_a_per_job']:g}"
                    for w in WORKLOADS[:2]
                    if w[0] != worst
                ),
            )
        )
    out.append(
        floor_row(
            "class A ops/job against the floor claim, one bucket, coalesced checkpoints",
            raw["coalesced"],
            raw["floor_one_bucket"],
            COALESCED_FACTOR,
            f"{label['within_slots']}, Pipeline(checkpoint_every_s={CHECKPOINT_EVERY_S:g}) "
            "(bench/row_pipelines.py): a hard crash re-runs up to one interval of "
            "completed stages, a hand-back loses none",
        )
    )
    return out


def floor_row(
    name: str, m: dict[str, Any], floor: dict[str, Any], factor: float, note: str
) -> dict[str, Any]:
    """One class A row: reclaim's per job by source against the floor claim's (pure)."""
    ratio = m["class_a_per_job"] / floor["class_a_per_job"]
    sources = ", ".join(f"{k} {v:g}" for k, v in m["class_a_by_source"].items())
    floor_sources = ", ".join(f"{k} {v:g}" for k, v in floor["class_a_by_source"].items())
    return row(
        name,
        f"{m['class_a_per_job']:g} per job: {sources}",
        f"the floor claim (bench/floor_claim.py), same batch and layout: "
        f"{floor['class_a_per_job']:g} ({floor_sources})",
        f"{ratio:.2f}x the floor",
        f"<= {factor:g}x",
        ratio <= factor,
        note,
    )


def class_a_sources(by_prefix: dict[str, int], jobs: int) -> dict[str, float]:
    """Class A operations (writes and lists: https://cloud.google.com/storage/pricing) per
    job by where they land, e.g. {"write jobs/": 5.0, "list pending/": 1.12}, largest first."""
    per = {
        key: round(n / jobs, 2)
        for key, n in by_prefix.items()
        if key.split(" ", 1)[0] in ("write", "list")
    }
    return dict(sorted(per.items(), key=lambda kv: (-kv[1], kv[0])))


def _class_a_row(raw: dict[str, Any]) -> dict[str, Any]:
    """Class A per job, lists included, for the worst workload on one bucket, by source."""
    label = {key: label for key, label, _s, _j in WORKLOADS}
    worst_key = max(label, key=lambda k: raw[k]["class_a_per_job"])
    worst = raw[worst_key]
    sources = ", ".join(f"{k} {v:g}" for k, v in worst["class_a_by_source"].items())
    others = "; ".join(
        f"{label[k]}: {raw[k]['class_a_per_job']:g}" for k in label if k != worst_key
    )
    return row(
        f"class A ops/job, lists included, {STAGES} stages without outputs",
        f"{worst['class_a_per_job']:g} ({label[worst_key]}): {sources}",
        f"target S+4 = {TARGET_MUTATIONS}",
        f"{worst['class_a_per_job'] / TARGET_MUTATIONS:.2f} of the budget",
        f"<= {TARGET_MUTATIONS}",
        worst["class_a_per_job"] <= TARGET_MUTATIONS,
        f"the worst of the workloads above; the others: {others}. Sources are the object "
        "prefixes the proxy saw each write and list touch (deletes are free)",
    )


def _row(name: str, m: dict[str, Any]) -> dict[str, Any]:
    per = m["per_job"]
    reads_ok = m["job_reads_per_job"] <= TARGET_READS
    pause_ok = m["pause_flag_reads"] <= m["pause_flag_bound"]
    hint_ok = m.get("due_hint_reads", 0) <= m.get("due_hint_bound", 0)
    met = (
        m["mutations_per_job"] <= TARGET_MUTATIONS
        and reads_ok
        and pause_ok
        and hint_ok
        and m["publishes_per_job"] <= TARGET_PUBLISHES
    )
    by = m["reads_by_prefix_per_job"]
    apart = (PAUSE_FLAG.split(" ")[1], DUE_HINT.split(" ")[1])
    shown = ", ".join(f"{k} {v:g}" for k, v in by.items() if k not in apart)
    figure = (
        f"{m['mutations_per_job']:g} mutations (write {per['write']:g} incl. "
        f"{m['lost_cas_per_job']:g} lost CAS, delete {per['delete']:g}), "
        f"{m['job_reads_per_job']:g} reads ({shown}) + pause flag {m['pause_flag_reads']} "
        f"+ due hint {m.get('due_hint_reads', 0)} in {m['wall_s']:g} s, {per['list']:g} "
        f"lists, {m['publishes_per_job']:g} publish(es)"
    )
    note = (
        "reads per job: the record (the claim) and the workflows parent mark (a job that "
        "ends reads workflows/parents/<id>: a class B read, where a listing of its children "
        "would be class A); with more jobs than slots a drained job whose doorbell comes "
        "later costs one more record read. The pipeline's pause flag is read at most once "
        f"per {PAUSE_CACHE_S:g} s per claim process (shared.features.flow), whatever the number of "
        f"jobs: its bound is {INSTANCES} instances x (wall time / {PAUSE_CACHE_S:g} s + 1), "
        "not a count per job; so is the pool's due hint, which a freed slot reads at most "
        f"once per {HINT_READ_S:g} s per process (shared.hints.due_hint) instead of listing "
        "the pending index. Lists: the drain's, only on a hint (a job marked due, a backlog "
        "sign, the safety net while freed slots wait for pushes)"
    )
    return row(
        name,
        figure,
        f"target S+4 = {TARGET_MUTATIONS} mutations, {TARGET_READS:g} reads per job, "
        f"the pause flag within its bound ({m['pause_flag_bound']}), the due hint within "
        f"its ({m.get('due_hint_bound', 0)}), {TARGET_PUBLISHES:g} publish",
        f"{m['mutations_per_job'] / TARGET_MUTATIONS:.2f} of the mutation budget, "
        f"{m['job_reads_per_job'] / TARGET_READS:.2f} of the read budget",
        f"<= {TARGET_MUTATIONS} mut, <= {TARGET_READS:g} reads/job, pause flag and due hint "
        "<= bound, 1 pub",
        met,
        note,
    )
