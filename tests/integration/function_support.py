"""Functions as real functions-framework processes, on a fresh bucket and topic.

Imported by the integration modules (pytest puts this folder on sys.path).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reclaim.local.procs import free_port, function_args, spawn, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def start_function(folder: str, target: str, env: dict[str, str], log_dir: Path) -> tuple[Any, str]:
    """Serve functions/<folder>/main.py:<target> on a free port; (process, base URL)."""
    port = free_port()
    args = function_args(ROOT / "functions" / folder / "main.py", target, "127.0.0.1", port)
    proc = spawn(
        args,
        env={**os.environ, **env},
        cwd=ROOT,
        log_path=log_dir / f"{target}-{port}.log",
        die_with_parent=True,
    )
    wait_for_port("127.0.0.1", port, proc=proc, timeout=30)
    return proc, f"http://127.0.0.1:{port}"


@dataclass
class Queue:
    """A fresh records bucket, jobs topic and doorbell subscription, and the env naming them."""

    bucket: Any
    topic: str
    sub: str
    env: dict[str, str]


def make_queue(
    prefix: str,
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    subscriber: Any,
    settings: dict[str, str],
) -> Queue:
    """A bucket, topic and pull subscription on the emulators; env = emulators + RECLAIM_*."""
    project = emulator_env["GOOGLE_CLOUD_PROJECT"]
    suffix = uuid.uuid4().hex[:10]
    bucket = gcs_client.create_bucket(f"{prefix}-{suffix}")
    topic = publisher.topic_path(project, f"jobs-{suffix}")
    sub = subscriber.subscription_path(project, f"bells-{suffix}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=10)
    env = {
        **emulator_env,
        "PYTHONPATH": str(ROOT),
        "RECLAIM_PROJECT": project,
        "RECLAIM_RECORDS_BUCKET": bucket.name,
        "RECLAIM_JOBS_TOPIC": f"jobs-{suffix}",
        "WORKERS": "1",
        **settings,
    }
    return Queue(bucket, topic, sub, env)
