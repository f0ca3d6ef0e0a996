"""Helpers shared by the emulator tests (imported by basename, like other suites' *_support)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.cloud import pubsub_v1

from reclaim.local.procs import free_port, spawn, stop, wait_for_port

PROJECT = "reclaim-test"
ROOT = Path(__file__).resolve().parents[2]


def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll until check() is truthy; return its value or fail with the last one."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = check()
    assert value, f"condition not met within {timeout}s (last value {value!r})"
    return value


class Recorder:
    """An HTTP endpoint that records every POST and answers what `respond` says."""

    def __init__(self, respond: Callable[[dict[str, Any]], int]) -> None:
        self.respond = respond
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                call = {
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                    "at": time.monotonic(),
                }
                with recorder.lock:
                    recorder.calls.append(call)
                status = recorder.respond(call)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [c["body"] for c in self.calls]


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


@contextmanager
def run_emulator(log_dir: Path, *flags: str, label: str = "admin") -> Iterator[AdminEmulator]:
    """An emulator process of our own with the admin port on, plus extra command-line flags."""
    port, admin_port = free_port(), free_port()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "reclaim.local.pubsub_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
            "--seed",
            "7",
            *flags,
        ],
        log_path=log_dir / f"pubsub-emulator-{label}.log",
        cwd=ROOT,
        die_with_parent=True,
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
