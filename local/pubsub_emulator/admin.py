"""Optional HTTP admin server: GET /stats, GET /faults, POST /faults.

Used by the chaos tests and the demo summary; never part of the Pub/Sub API.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from local.pubsub_emulator.broker import Broker
from local.pubsub_emulator.faults import FaultError

_LOG = logging.getLogger("pubsub_emulator.admin")
MAX_BODY = 64 * 1024


def _handler(broker: Broker) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: Any) -> None:
            body = json.dumps(payload, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/stats":
                self._send(200, broker.snapshot())
            elif self.path == "/faults":
                self._send(200, broker.faults.snapshot())
            elif self.path == "/healthz":
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": f"no such path: {self.path}"})

        def do_POST(self) -> None:
            if self.path != "/faults":
                self._send(404, {"error": f"no such path: {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    raise FaultError("a JSON object body is required")
                changes = json.loads(self.rfile.read(length))
                if not isinstance(changes, dict):
                    raise FaultError("the body must be a JSON object")
                self._send(200, broker.faults.update(changes))
            except (FaultError, ValueError) as exc:
                self._send(400, {"error": str(exc)})

        def log_message(self, format: str, *args: Any) -> None:
            _LOG.debug("admin: " + format, *args)

    return Handler


class AdminServer:
    """ThreadingHTTPServer on its own daemon thread."""

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.httpd = ThreadingHTTPServer((host, port), _handler(broker))
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="admin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
