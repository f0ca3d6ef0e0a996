"""`python -m bench` (make bench): run the benchmarks, write results.json and results.md.

A run of several entries measures those judged on counts in four more processes beside
the others (bench/lanes.py), so the whole run fits ten minutes on 2 cores.

`--only calls,sweep` runs a subset and keeps the other entries of an existing
results.json, so one figure can be refreshed without re-running everything. The
terminal shows each benchmark, progress and the table; the logs go to the file the run
names under bench/logs/ (`-v` shows them live).

A new benchmark is a module bench/<name>.py with a run() returning {"raw", "rows"}
(bench.common.row), and its name on a line of ORDER.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench import lanes
from bench.console import CONSOLE
from bench.report import markdown
from reclaim.local.procs import stop_children

HERE = Path(__file__).resolve().parent
ORDER = (  # the order of the table; one name per line
    "calls",
    "sweep",
    "delayed",
    "throughput",
    "first_stage",
    "backlog",
    "drain_off",
    "lost_doorbell",
    "big_backlog",
    "rescue",
    "retry",
    "cost",
    "pools",
    "imports",
    "flow",
    "workflows",
    "waits",
    "waits_scale",
    "handback",
    "rollout",
    "client",
    "waiters",
    "capacity",
    "run_jobs",
    "trace",
)


LONG = ("big_backlog", "drain_off", "waits_scale")
"""Rows left out of a plain run, so that make bench stays a ten-minute run: several
minutes each (big_backlog), or a contrast no target needs (drain_off). `make bench-scale`
runs them; a plain run keeps their last figures in the table, with when they were
measured."""


def _environment() -> dict[str, Any]:
    return {
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except ValueError:
        return {}
    return loaded


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(ORDER)}")
    p.add_argument("--out", type=Path, default=HERE, help="directory for results.json/.md")
    p.add_argument("-v", "--verbose", action="store_true", help="show every log line live")
    p.add_argument("--lane-of", type=Path, help=argparse.SUPPRESS)  # bench.lanes: its log
    a = p.parse_args(argv)
    chosen = [n.strip() for n in a.only.split(",") if n.strip()] or [
        n for n in ORDER if n not in LONG
    ]
    unknown = sorted(set(chosen) - set(ORDER))
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    log = CONSOLE.start(HERE / "logs", a.verbose, a.lane_of)
    if a.lane_of is None:
        CONSOLE.say(f"logs: {_shown(log)}")
    received = _stop_on_signals()
    try:
        results = _run(chosen, a.only, a.out, lane=a.lane_of is None, verbose=a.verbose)
    except KeyboardInterrupt:
        left = stop_children()  # what a teardown the signal cut short left running
        CONSOLE.say(
            "interrupted: the run's local clouds are stopped"
            + (f" ({len(left)} process(es) stopped at the end)" if left else "")
            + "; no results written"
        )
        return 128 + (received[0] if received else signal.SIGINT)
    finally:
        CONSOLE.close()
    if a.lane_of is not None:
        return 0  # the run that started this lane shows the table
    table = markdown(results)
    print("\n" + table)
    print(f"wrote {_shown(a.out / 'results.json')} and {_shown(a.out / 'results.md')}")
    print(f"logs: {_shown(log)}")
    return 0


def _run(
    chosen: list[str], only: str, out: Path, *, lane: bool = True, verbose: bool = False
) -> dict[str, Any]:
    path = out / "results.json"
    # the entries this run does not measure keep their last figures (a plain run: LONG's)
    kept = _load(path).get("benchmarks", {})
    benchmarks: dict[str, Any] = {n: v for n, v in kept.items() if n not in chosen}
    started_all = time.monotonic()
    run = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # names this run's entries
    first, beside, last = lanes.split(chosen) if lane else (chosen, [], [])
    log = CONSOLE.path or HERE / "logs" / "bench.log"
    others = lanes.start(beside, log, verbose) if beside else []
    total = len(first) + len(last)
    try:
        for i, name in enumerate(first, 1):
            benchmarks[name] = _measure(name, i, total)
            for other in others:
                other.check()
        if others and last:
            CONSOLE.say(f"waiting for {', '.join(o.label for o in others)} ...")
        for other in others:
            benchmarks.update(other.finish())
    except BaseException:
        for other in others:
            other.stop()
        raise
    for i, name in enumerate(last, len(first) + 1):
        benchmarks[name] = _measure(name, i, total)
    for name in chosen:
        benchmarks[name]["run"] = run
    results = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "make bench" if not only else f"python -m bench --only {only}",
        "environment": _environment(),
        "run": run,
        "seconds": round(time.monotonic() - started_all, 1),
        "benchmarks": {n: benchmarks[n] for n in ORDER if n in benchmarks},
    }
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    (out / "results.md").write_text(markdown(results))
    return results


def _measure(name: str, i: int, total: int) -> dict[str, Any]:
    """One entry's run(), with how long it took and when, its verdicts on the terminal."""
    started = time.monotonic()
    CONSOLE.say(f"[{i}/{total}] {name} ...")
    measured: dict[str, Any] = importlib.import_module(f"bench.{name}").run()
    measured["seconds"] = round(time.monotonic() - started, 1)
    measured["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    CONSOLE.say(f"[{i}/{total}] {name}: {_verdicts(measured['rows'])}, {measured['seconds']:.0f} s")
    return measured


def _stop_on_signals() -> list[int]:
    """SIGTERM and Ctrl-C stop the run the way an error does: the benchmark's `with`
    blocks tear its local clouds down (emulators, function instances), which run in
    their own process groups and so get no signal of their own. The first signal
    interrupts; later ones are ignored, so that they cannot cut the teardown short.
    Returns the list the first signal's number is added to."""
    received: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not received:
            received.append(signum)
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    return received


def _verdicts(rows: list[dict[str, Any]]) -> str:
    met = sum(r.get("met") is True for r in rows)
    missed = sum(r.get("met") is False for r in rows)
    shown = f"{len(rows)} row(s), {met} met"
    return shown + (f", {missed} MISSED" if missed else "")


def _shown(path: Path) -> str:
    """A path relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
