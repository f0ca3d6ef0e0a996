"""What the local HTTP proxies (the Cloud Run fronts, the GCS fault proxy) share."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any

# Headers that describe one connection, not the message: a proxy never passes them on.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
    }
)


def end_to_end(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers a proxy forwards."""
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]


class ProxyHandler(BaseHTTPRequestHandler):
    """A quiet, kept-alive HTTP/1.1 handler that reads any request body (plain or
    chunked): what the fronts and the fault proxy both serve with."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # headers and body leave in separate writes: without NODELAY, Nagle and the
        # client's delayed ACK add ~40 ms to every kept-alive request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def log_message(self, format: str, *args: Any) -> None:
        pass
