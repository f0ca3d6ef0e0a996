"""A tiny threaded HTTP proxy in front of fake-gcs-server that can lose answers.

It makes the "412 although my write landed" path real: the first upload is
forwarded (so it commits), then the client is told 503, so the official client
retries its generation-matched upload by itself and gets 412. With `delay_s`,
every answer is held that long, so parallel calls are surely in flight together.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Fault:
    """What to do to the next upload: forward it first or not, then answer `status`."""

    forward: bool
    status: int = 503
    after_forward: Callable[[], None] | None = None


@dataclass
class ProxyState:
    upstream: str
    faults: list[Fault] = field(default_factory=list)
    uploads: list[int] = field(default_factory=list)  # status the client saw, per upload
    delay_s: float = 0.0  # hold every answer this long
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_fault(self, method: str, path: str) -> Fault | None:
        if method != "POST" or not path.startswith("/upload/"):
            return None
        with self.lock:
            return self.faults.pop(0) if self.faults else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _proxy(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = state.next_fault(self.command, self.path)
        if fault is None or fault.forward:
            status, headers, data = self._forward(body)
            if fault is not None and fault.after_forward is not None:
                fault.after_forward()
        if fault is not None:
            status, headers, data = fault.status, [], b'{"error": {"code": 503}}'
        if self.command == "POST" and self.path.startswith("/upload/"):
            with state.lock:
                state.uploads.append(status)
        if state.delay_s:
            time.sleep(state.delay_s)
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        up = urlsplit(self.server.state.upstream)
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            return resp.status, kept, data
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _proxy


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # parallel calls connect at once
    state: ProxyState


class FlakyProxy:
    """Start with `with FlakyProxy(upstream) as proxy:`; `proxy.url` is the endpoint."""

    def __init__(self, upstream: str, *, delay_s: float = 0.0) -> None:
        self.state = ProxyState(upstream, delay_s=delay_s)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def add_fault(self, fault: Fault) -> None:
        with self.state.lock:
            self.state.faults.append(fault)

    @property
    def uploads(self) -> list[int]:
        with self.state.lock:
            return list(self.state.uploads)

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
