"""Import time of each function module against importing the Google clients alone.

Each measurement is a fresh interpreter (a cold start). "module" loads main.py the way
functions-framework does; "clients" imports google.cloud.storage and google.cloud.pubsub_v1
and nothing else; the function modules load those clients lazily, so "module + first use"
adds what the first request pays (the queue's store and doorbell built, clients imported).
A round times the clients and then every module once; each row's verdict is on the median
of its REPEATS per-round ratios (shown with min and max), so a load that drifts during the
run moves both sides of a ratio alike instead of flipping a row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench.common import median, row
from bench.console import CONSOLE
from bench.spread import Spread
from reclaim.local.cloud import DEFAULT_FUNCTIONS, ROOT

REPEATS = 5
TARGET = 1.3

_MODULE = """
import importlib.util, sys, time
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("main", {path!r})
mod = importlib.util.module_from_spec(spec)
sys.modules["main"] = mod
spec.loader.exec_module(mod)
first = time.perf_counter() - t
if {warm}:
    from shared.config import Settings
    from shared.doorbell import shared_publisher
    from shared.queue import Queue
    Queue.from_settings(Settings.from_env()); shared_publisher()
print(first, time.perf_counter() - t)
"""

_CLIENTS = """
import time
t = time.perf_counter()
import google.cloud.storage, google.cloud.pubsub_v1
print(time.perf_counter() - t, time.perf_counter() - t)
"""


def _time(code: str) -> tuple[float, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[-2]), float(out[-1])


def _samples(sources: list[str]) -> list[dict[str, Any]]:
    """REPEATS rounds, each timing the clients and then every module once: a machine
    whose load drifts during the run shifts both sides of a round's ratio alike."""
    rounds = []
    for i in range(REPEATS + 1):  # the first round warms the page cache, and is dropped
        CONSOLE.progress(f"imports: round {i}/{REPEATS}" if i else "imports: warming up")
        clients, _ = _time(_CLIENTS)
        modules = {}
        for source in sources:
            path = str(ROOT / source)
            module, _ = _time(_MODULE.format(path=path, warm=False))
            _, warm = _time(_MODULE.format(path=path, warm=True))
            modules[source] = {"import_s": round(module, 4), "first_use_s": round(warm, 4)}
        rounds.append({"clients_s": round(clients, 4), "modules": modules})
    return rounds[1:]


def run() -> dict[str, Any]:
    sources = sorted({spec.source for spec in DEFAULT_FUNCTIONS.values()})
    rounds = _samples(sources)
    clients = median(r["clients_s"] for r in rounds)
    raw: dict[str, Any] = {"clients_s": round(clients, 4), "rounds": rounds, "modules": {}}
    rows = []
    for source in sources:
        mine = [r["modules"][source] for r in rounds]
        ratio = Spread.of(m["import_s"] / r["clients_s"] for m, r in zip(mine, rounds, strict=True))
        first = Spread.of(
            m["first_use_s"] / r["clients_s"] for m, r in zip(mine, rounds, strict=True)
        )
        module = median(m["import_s"] for m in mine)
        warm = median(m["first_use_s"] for m in mine)
        raw["modules"][source] = {
            "import_s": round(module, 4),
            "first_use_s": round(warm, 4),
            "ratio": ratio.to_json(),
            "first_use_ratio": first.to_json(),
        }
        rows.append(
            row(
                f"import {source}",
                f"{module * 1000:.0f} ms (with first use: {warm * 1000:.0f} ms; medians of "
                f"{REPEATS})",
                f"google-cloud-storage + pubsub alone, in the same rounds: {clients * 1000:.0f} ms",
                f"{ratio.shown(2)}x (first use {first.median:.2f}x)",
                f"<= {TARGET}x (median)",
                ratio.meets(TARGET, at_least=False),
                "" if first.median <= TARGET else _note(),
            )
        )
    return {"raw": raw, "rows": rows}


def _note() -> str:
    return (
        "the module itself imports only flask and shared/; the clients load on first use, "
        "so the first request pays them (plus functions-framework's own import, which both "
        "sides of a real cold start share)"
    )


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
