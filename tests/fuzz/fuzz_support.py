"""What the generated attacks share: the seed, the example budget, and the real
functions (functions-framework processes) on a bucket and topic of their own.

Generated attacks share one seed (tests/conftest.py sets it and prints it in the
header and the summary). RECLAIM_FUZZ_SEED=<n> replays a run;
RECLAIM_FUZZ_EXAMPLES=<factor> multiplies every test's example budget (default 1,
sized so that all fuzzing stays within about a minute and a half of `make test`
on 2 cores). A failing example is also kept in hypothesis's local database
(.hypothesis/) and replayed first next time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, seed, settings

from reclaim.local.procs import free_port, function_args, spawn, stop_all, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_VAR = "RECLAIM_FUZZ_EXAMPLES"
FUZZ_SEED = int(os.environ["RECLAIM_FUZZ_SEED"])


def budget(examples: int) -> int:
    """A test's example count, scaled by RECLAIM_FUZZ_EXAMPLES."""
    factor = float(os.environ.get(EXAMPLES_VAR, "1") or 1)
    return max(1, round(examples * factor))


def fuzz(examples: int) -> Any:
    """The decorators of one fuzz test: the run's seed, its budget, no deadline
    (timing belongs to benchmarks), and no health check on slow services."""

    def wrap(fn: Any) -> Any:
        fn = settings(
            max_examples=budget(examples),
            deadline=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
            ],
        )(fn)
        return seed(FUZZ_SEED)(fn)

    return wrap


# ----------------------------------------------------------------- functions over HTTP


@dataclass
class Functions:
    """The functions under test and the bucket, topic and env they share."""

    bucket: Any
    topic: str
    env: dict[str, str]
    urls: dict[str, str] = field(default_factory=dict)
    procs: list[Any] = field(default_factory=list)

    def names(self, prefix: str = "") -> set[str]:
        return {b.name for b in self.bucket.client.list_blobs(self.bucket.name, prefix=prefix)}

    def snapshot(self) -> dict[str, int]:
        """Every object and its generation: a refused request must leave this equal."""
        blobs = self.bucket.client.list_blobs(self.bucket.name)
        return {b.name: int(b.generation) for b in blobs}


def start_function(folder: str, target: str, env: dict[str, str], log_dir: Path) -> tuple[Any, str]:
    """Serve functions/<folder>/main.py:<target> on a free port; (process, base URL)."""
    port = free_port()
    args = function_args(ROOT / "functions" / folder / "main.py", target, "127.0.0.1", port)
    proc = spawn(
        args,
        env={**os.environ, **env},
        cwd=ROOT,
        log_path=log_dir / f"fuzz-{target}-{port}.log",
        die_with_parent=True,
    )
    wait_for_port("127.0.0.1", port, proc=proc, timeout=30)
    return proc, f"http://127.0.0.1:{port}"


@contextmanager
def functions(
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    log_dir: Path,
    targets: tuple[tuple[str, str], ...],
    settings_env: dict[str, str] | None = None,
) -> Iterator[Functions]:
    """A fresh bucket and jobs topic, and each (folder, target) served on it."""
    project = emulator_env["GOOGLE_CLOUD_PROJECT"]
    suffix = uuid.uuid4().hex[:10]
    bucket = gcs_client.create_bucket(f"fuzz-{suffix}")
    topic = f"fuzz-jobs-{suffix}"
    publisher.create_topic(name=publisher.topic_path(project, topic))
    env = {
        **emulator_env,
        "PYTHONPATH": str(ROOT),
        "RECLAIM_PROJECT": project,
        "RECLAIM_RECORDS_BUCKET": bucket.name,
        "RECLAIM_JOBS_TOPIC": topic,
        "WORKERS": "1",
        "THREADS": "4",
        **(settings_env or {}),
    }
    fns = Functions(bucket, topic, env)
    try:
        for folder, target in targets:
            proc, url = start_function(folder, target, env, log_dir)
            fns.procs.append(proc)
            fns.urls[target] = url
        yield fns
    finally:
        stop_all(fns.procs)
