"""An emulator instance of our own, with the admin port, for stats and fault tests.

The shared session emulator (tests/conftest.py::pubsub_emulator) has no admin
port and must stay fault-free; this one is ours to reconfigure.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.cloud import pubsub_v1

from local.procs import free_port, spawn, stop, wait_for_port
from tests.emulator.emulator_support import Recorder

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def _emulator_host(host: str) -> Iterator[None]:
    """Clients read PUBSUB_EMULATOR_HOST when they are built; point them at `host`."""
    saved = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = saved


@dataclass
class AdminEmulator:
    host: str
    admin_url: str
    publisher: pubsub_v1.PublisherClient
    subscriber: pubsub_v1.SubscriberClient

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.admin_url}/stats", timeout=5) as r:
            return json.loads(r.read())

    def set_faults(self, **knobs: float) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.admin_url}/faults",
            data=json.dumps(knobs).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())


@pytest.fixture(scope="session")
def admin_emulator(log_dir: Path) -> Iterator[AdminEmulator]:
    port, admin_port = free_port(), free_port()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "local.pubsub_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
            "--seed",
            "7",
        ],
        log_path=log_dir / "pubsub-emulator-admin.log",
        cwd=ROOT,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        wait_for_port("127.0.0.1", admin_port, proc=proc)
        with _emulator_host(f"127.0.0.1:{port}"):
            publisher = pubsub_v1.PublisherClient()
            subscriber = pubsub_v1.SubscriberClient()
        yield AdminEmulator(
            f"127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}", publisher, subscriber
        )
        subscriber.close()
        publisher.transport.close()
    finally:
        stop(proc)


@pytest.fixture
def faults(admin_emulator: AdminEmulator) -> Iterator[AdminEmulator]:
    """The admin emulator, with its fault knobs reset to off afterwards."""
    try:
        yield admin_emulator
    finally:
        admin_emulator.set_faults(duplicate_fraction=0.0, drop_publish_fraction=0.0)


@pytest.fixture
def recorder() -> Iterator[Callable[[Callable[[dict[str, Any]], int]], Recorder]]:
    made: list[Recorder] = []

    def make(respond: Callable[[dict[str, Any]], int] = lambda _: 200) -> Recorder:
        made.append(Recorder(respond))
        return made[-1]

    yield make
    for r in made:
        r.httpd.shutdown()
        r.httpd.server_close()
