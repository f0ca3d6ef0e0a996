"""A tiny round-robin HTTP load balancer: the one URL of the claim "function".

Cloud Functions gives a push subscription ONE endpoint while instances come
and go behind it; this plays that part locally, so the chaos test can kill and
add claim instances without rewiring Pub/Sub. A refused connection moves on to
the next backend; a backend that dies mid-request gives the caller a quick 502,
and no live backend a 503, so Pub/Sub redelivers.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from local.forwarding import ProxyHandler, end_to_end


class Balancer:
    """Round-robin over a changing set of (host, port) backends, keyed by index."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        connect_timeout: float = 2.0,
        read_timeout: float = 660.0,
    ) -> None:
        self._host = host
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.counts: Counter[int] = Counter()
        """Requests answered by each backend index (for tests and the demo)."""
        self._backends: dict[int, tuple[str, int]] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_class(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def add(self, index: int, host: str, port: int) -> None:
        with self._lock:
            self._backends[index] = (host, port)

    def remove(self, index: int) -> None:
        with self._lock:
            self._backends.pop(index, None)

    def backends(self) -> dict[int, tuple[str, int]]:
        with self._lock:
            return dict(self._backends)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="claim-balancer", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def rotation(self) -> list[tuple[int, tuple[str, int]]]:
        """Every backend once, starting at the next one in turn."""
        with self._lock:
            items = sorted(self._backends.items())
            if not items:
                return []
            start = self._next % len(items)
            self._next += 1
        return items[start:] + items[:start]

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send one request to the next live backend; 502/503 when that fails."""
        for index, (host, port) in self.rotation():
            conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
            try:
                conn.connect()
            except OSError:
                conn.close()
                continue  # nothing was sent: safe to try the next one
            try:
                assert conn.sock is not None
                conn.sock.settimeout(self.read_timeout)
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                return _error(502, f"backend {index} failed: {type(exc).__name__}: {exc}")
            finally:
                conn.close()
            with self._lock:
                self.counts[index] += 1
            kept = end_to_end(resp.getheaders())
            return resp.status, kept, data
        return _error(503, "no live backend")


def _error(status: int, reason: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps({"error": reason}).encode()
    return status, [("Content-Type", "application/json")], body


def _handler_class(balancer: Balancer) -> type[BaseHTTPRequestHandler]:
    class _Handler(ProxyHandler):
        def _proxy(self) -> None:
            body = self.read_body()
            headers = dict(end_to_end(self.headers.items()))
            headers["X-Forwarded-For"] = self.client_address[0]
            status, out_headers, data = balancer.forward(self.command, self.path, headers, body)
            self.send_response(status)
            for key, value in out_headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _proxy

    return _Handler
