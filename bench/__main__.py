"""`python -m bench` (make bench): run the benchmarks, write results.json and results.md.

`--only calls,sweep` runs a subset and keeps the other entries of an existing
results.json, so one figure can be refreshed without re-running everything.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import markdown

HERE = Path(__file__).resolve().parent
ORDER = (
    "calls",
    "sweep",
    "delayed",
    "throughput",
    "backlog",
    "rescue",
    "cost",
    "imports",
    "flow",
    "workflows",
    "client",
)


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
    a = p.parse_args(argv)
    chosen = [n.strip() for n in a.only.split(",") if n.strip()] or list(ORDER)
    unknown = sorted(set(chosen) - set(ORDER))
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    path = a.out / "results.json"
    results = _load(path) if a.only else {}
    benchmarks: dict[str, Any] = dict(results.get("benchmarks", {}))
    for name in chosen:
        started = time.monotonic()
        print(f"bench {name} ...", flush=True)
        module = importlib.import_module(f"bench.{name}")
        benchmarks[name] = module.run()
        benchmarks[name]["seconds"] = round(time.monotonic() - started, 1)
        for r in benchmarks[name]["rows"]:
            print(f"  {r['name']}: {r['figure']} | vs {r['baseline']} | {r['ratio']}", flush=True)
    results = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "make bench" if not a.only else f"python -m bench --only {a.only}",
        "environment": _environment(),
        "benchmarks": {n: benchmarks[n] for n in ORDER if n in benchmarks},
    }
    a.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    table = markdown(results)
    (a.out / "results.md").write_text(table)
    print("\n" + table)
    print(f"wrote {path} and {a.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
