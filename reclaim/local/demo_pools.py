"""`make demo-pools`: two worker pools side by side on the local cloud (docs/pools.md).

A `render` pool (one slot per instance, at most two instances: 4 GiB renders) gets a
batch of renders, each holding its slot for seconds, more than its two slots take at
once: the renders queue up in their own pool. Meanwhile waves of `notify` jobs (a quick
pool, four slots, one warm instance) arrive. Every notify job finishes in well under a
second while renders are still queued: quick jobs never wait behind heavy ones. The
summary prints, per pool, the jobs, their latency (submit to done) and, for each quick
wave, how many renders were still waiting when it ended (the proof is by state: a quick
job that waited behind the renders would end after the last render started).

After the pools, the act on a Cloud Run job runs (ACTS, reclaim/local/demo_long_stage.py): a
stage longer than its pool's claim timeout finishes on the local jobs runner, surviving a
task's SIGTERM by hand-back.

Exit status 0 only if every job is done and every quick job ended before the last render
started; 1 otherwise, 2 if the local cloud could not start.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from reclaim.local import demo_long_stage as long_stage
from reclaim.local.cloud import ROOT, LocalCloud
from reclaim.local.observe import all_terminal, parse_at, snapshot, submit_batch, watching_queue

PIPELINES = "reclaim.local.pool_demo_pipelines"


@dataclass(frozen=True)
class PoolsDemoConfig:
    """The demo's knobs: renders of render_s seconds in a 2 x 1-slot pool, waves of quick
    jobs while they run."""

    renders: int = 6
    render_s: float = 6.0
    waves: int = 4
    per_wave: int = 5
    wave_gap_s: float = 2.0
    timeout_s: float = 180.0
    log_dir: Path = ROOT / ".local-cloud" / "demo-pools"


def pools_doc() -> dict[str, Any]:
    """The demo's pools file."""
    return {
        "pools": {
            "quick": {
                "pipelines": ["notify"],
                "memory": "512Mi",
                "concurrency": 4,
                "min_instances": 1,
                "max_instances": 2,
                "timeout_seconds": 300,
                "ack_deadline_seconds": 60,
            },
            "render": {
                "pipelines": ["render"],
                "memory": "4Gi",
                "cpu": "2",
                "concurrency": 1,
                "max_instances": 2,
                "timeout_seconds": 600,
            },
            "film": long_stage.POOL,
        }
    }


@dataclass
class Wave:
    """One wave of quick jobs: their ids, and how many renders were still queued when
    the last of them had ended."""

    ids: list[str]
    renders_queued_after: int = 0


@dataclass
class Run:
    renders: list[str] = field(default_factory=list)
    waves: list[Wave] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


Act = Callable[[LocalCloud, TextIO], bool]
"""A further act of the demo, run on the same cloud after the pools: True if it held."""

ACTS: list[tuple[str, Act]] = [("a stage longer than a push, on a Cloud Run job", long_stage.play)]
"""The acts on the same cloud after the pools, in order."""


def _post(url: str, body: dict[str, Any]) -> str:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.loads(resp.read())["id"])


def _statuses(queue: Any, ids: list[str]) -> dict[str, str]:
    return {i: str(r.get("status")) for i, r in snapshot(queue, ids).items()}


def _wait(queue: Any, ids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    records = snapshot(queue, ids)
    while not all_terminal(records) and time.monotonic() < deadline:
        time.sleep(0.1)
        records = snapshot(queue, ids)
    return records


def _latency(record: dict[str, Any]) -> float | None:
    start, end = parse_at(record.get("created_at")), parse_at(record.get("updated_at"))
    return None if start is None or end is None else (end - start).total_seconds()


def _claimed_at(record: dict[str, Any]) -> datetime | None:
    claims = [e for e in record.get("history") or [] if e.get("event") == "claimed"]
    return parse_at(claims[-1].get("at")) if claims else None


def play(cloud: LocalCloud, config: PoolsDemoConfig, out: TextIO) -> Run:
    """Renders first, then waves of quick jobs while they queue; every record at the end."""
    queue = watching_queue(cloud)
    jobs_url = cloud.endpoints["jobs"]
    tag = uuid.uuid4().hex[:6]
    run = Run()
    renders = [
        {"pipeline": "render", "id": f"render-{tag}-{i}", "payload": {"seconds": config.render_s}}
        for i in range(config.renders)
    ]
    _batch, run.renders = submit_batch(jobs_url, renders)
    out.write(
        f"submitted {config.renders} renders of {config.render_s:g} s to the render "
        "pool (2 instances x 1 slot)\n"
    )
    for n in range(config.waves):
        time.sleep(config.wave_gap_s)
        wave = Wave(
            [
                _post(jobs_url, {"pipeline": "notify", "payload": {"wave": n}})
                for _ in range(config.per_wave)
            ]
        )
        _wait(queue, wave.ids, 60)
        states = _statuses(queue, run.renders)
        wave.renders_queued_after = sum(s == "queued" for s in states.values())
        run.waves.append(wave)
        running = sum(s == "running" for s in states.values())
        done = sum(s == "done" for s in states.values())
        out.write(
            f"  wave {n + 1}: {config.per_wave} quick jobs done; renders: {running} "
            f"running, {wave.renders_queued_after} queued, {done} done\n"
        )
        out.flush()
    ids = run.renders + [i for w in run.waves for i in w.ids]
    run.records = _wait(queue, ids, config.timeout_s)
    return run


def summary(run: Run) -> tuple[list[str], bool]:
    """The summary lines, and whether the demo held (pure)."""
    renders = [run.records[i] for i in run.renders]
    quick = [run.records[i] for w in run.waves for i in w.ids]
    every_done = all(r.get("status") == "done" for r in (*renders, *quick))
    starts = [t for t in (_claimed_at(r) for r in renders) if t is not None]
    last_start = max(starts) if starts else None
    ends = [parse_at(r.get("updated_at")) for r in quick]
    before = sum(1 for e in ends if e is not None and last_start is not None and e < last_start)
    lat = [x for x in (_latency(r) for r in quick) if x is not None]
    heavy = [x for x in (_latency(r) for r in renders) if x is not None]
    lines = [
        f"render pool: {sum(r.get('status') == 'done' for r in renders)}/{len(renders)} done; "
        f"submit to done {min(heavy, default=0):.1f}..{max(heavy, default=0):.1f} s "
        "(they queued for their own two slots)",
        f"quick pool:  {sum(r.get('status') == 'done' for r in quick)}/{len(quick)} done; "
        f"submit to done median {statistics.median(lat) if lat else 0:.2f} s, "
        f"max {max(lat, default=0):.2f} s",
        f"quick jobs that ended before the last render even started: {before}/{len(quick)}",
        "renders still queued as each quick wave ended: "
        + ", ".join(str(w.renders_queued_after) for w in run.waves),
    ]
    return lines, every_done and before == len(quick)


def run_demo(config: PoolsDemoConfig, out: TextIO = sys.stdout) -> int:
    pools_file = config.log_dir / "pools.json"
    config.log_dir.mkdir(parents=True, exist_ok=True)
    pools_file.write_text(json.dumps(pools_doc(), indent=2))
    cloud = LocalCloud.for_tests(
        log_dir=config.log_dir / "logs",
        pools_file=pools_file,
        stale_seconds=30.0,
        sweep_interval_seconds=3.0,
        function_env={"RECLAIM_PIPELINE_MODULES": PIPELINES},
    )
    try:
        cloud.start()
    except Exception as exc:  # a busy port, a missing binary: say it and stop
        out.write(f"the local cloud could not start: {exc}\n")
        return 2
    try:
        out.write(f"pools ({pools_file}): quick (notify, 4 slots) and render (render, 2 x 1)\n")
        run = play(cloud, config, out)
        lines, held = summary(run)
        for name, act in ACTS:
            out.write(f"\n{name}\n")
            held = act(cloud, out) and held
    finally:
        cloud.stop()
    out.write("\nsummary\n" + "\n".join("  " + line for line in lines) + "\n")
    out.write("  quick jobs never waited behind heavy ones\n" if held else "  FAILED\n")
    return 0 if held else 1


def main(argv: list[str] | None = None) -> int:
    d = PoolsDemoConfig()
    p = argparse.ArgumentParser(
        prog="python -m reclaim.local.demo_pools", description=__doc__.split("\n")[0]
    )
    p.add_argument("--renders", type=int, default=d.renders)
    p.add_argument("--render-seconds", type=float, default=d.render_s)
    p.add_argument("--waves", type=int, default=d.waves)
    p.add_argument("--per-wave", type=int, default=d.per_wave)
    a = p.parse_args(argv)
    if a.renders < 3 or a.render_seconds <= 0 or a.waves < 1 or a.per_wave < 1:
        p.error("--renders >= 3 (more than the render pool's 2 slots); the rest > 0")
    config = PoolsDemoConfig(a.renders, a.render_seconds, a.waves, a.per_wave)
    return run_demo(config)


if __name__ == "__main__":
    sys.exit(main())
