"""Helpers shared by the emulator tests (imported by basename, like other suites' *_support)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROJECT = "reclaim-test"


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
