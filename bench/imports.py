"""Import time of each function module against importing the Google clients alone.

Each measurement is a fresh interpreter (a cold start), repeated; the median
is kept. "module" loads main.py the way functions-framework does; "clients"
imports google.cloud.storage and google.cloud.pubsub_v1 and nothing else; the
function modules load those clients lazily, so "module + first use" adds what
the first request pays (the queue's store and doorbell built, clients imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench.common import median, row
from local.cloud import DEFAULT_FUNCTIONS, ROOT

REPEATS = 7
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


def _median_of(code: str) -> tuple[float, float]:
    samples = [_time(code) for _ in range(REPEATS)]
    return median(a for a, _ in samples), median(b for _, b in samples)


def run() -> dict[str, Any]:
    clients, _ = _median_of(_CLIENTS)
    raw: dict[str, Any] = {"clients_s": round(clients, 4), "modules": {}}
    rows = []
    sources = sorted({spec.source for spec in DEFAULT_FUNCTIONS.values()})
    for source in sources:
        path = str(ROOT / source)
        module, _ = _median_of(_MODULE.format(path=path, warm=False))
        _, warm = _median_of(_MODULE.format(path=path, warm=True))
        ratio = module / clients
        raw["modules"][source] = {"import_s": round(module, 4), "first_use_s": round(warm, 4)}
        rows.append(
            row(
                f"import {source}",
                f"{module * 1000:.0f} ms (with first use: {warm * 1000:.0f} ms)",
                f"google-cloud-storage + pubsub alone: {clients * 1000:.0f} ms",
                f"{ratio:.2f}x (first use {warm / clients:.2f}x)",
                f"<= {TARGET}x",
                ratio <= TARGET,
                "" if warm / clients <= TARGET else _note(),
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
