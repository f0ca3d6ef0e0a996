"""The claim balancer over real sockets: spread, a dead backend, no backend."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from local.balancer import Balancer
from local.procs import free_port


class _Backend:
    """An HTTP server answering {"name": ..., "path": ..., "body": ...}."""

    def __init__(self, name: str) -> None:
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = json.dumps(
                    {"name": outer.name, "path": self.path, "body": body.decode()}
                ).encode()
                self.send_response(201)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Backend", outer.name)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.name = name
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _post(url: str, body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def lb() -> Iterator[Balancer]:
    b = Balancer("127.0.0.1", 0, connect_timeout=1.0, read_timeout=5.0)
    b.start()
    yield b
    b.stop()


def test_round_robin_spreads_and_relays(lb: Balancer):
    backends = [_Backend(f"b{i}") for i in range(3)]
    for i, b in enumerate(backends):
        lb.add(i, "127.0.0.1", b.port)
    seen = Counter()
    for n in range(9):
        status, headers, body = _post(f"{lb.url}/projects/p/topics/t?x={n}", b'{"n": %d}' % n)
        data = json.loads(body)
        assert status == 201 and headers["X-Backend"] == data["name"]
        assert data["path"] == f"/projects/p/topics/t?x={n}" and data["body"] == f'{{"n": {n}}}'
        seen[data["name"]] += 1
    assert seen == {"b0": 3, "b1": 3, "b2": 3}
    assert lb.counts == {0: 3, 1: 3, 2: 3}
    for b in backends:
        b.close()


def test_dead_backend_is_skipped(lb: Balancer):
    alive = _Backend("alive")
    lb.add(0, "127.0.0.1", free_port())  # nothing listens: connection refused
    lb.add(1, "127.0.0.1", alive.port)
    names = [json.loads(_post(lb.url)[2])["name"] for _ in range(6)]
    assert names == ["alive"] * 6
    alive.close()


def test_no_backend_is_503_and_removal_works(lb: Balancer):
    status, _, body = _post(lb.url)
    assert status == 503 and json.loads(body)["error"] == "no live backend"
    b = _Backend("b")
    lb.add(0, "127.0.0.1", b.port)
    assert _post(lb.url)[0] == 201
    lb.remove(0)
    assert _post(lb.url)[0] == 503
    b.close()


def test_backend_dying_mid_request_is_502(lb: Balancer):
    """A backend that accepts and then drops the connection: the caller gets 502."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def _drop() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.close()

    t = threading.Thread(target=_drop, daemon=True)
    t.start()
    lb.add(0, "127.0.0.1", srv.getsockname()[1])
    status, _, body = _post(lb.url)
    assert status == 502 and "backend 0 failed" in json.loads(body)["error"]
    t.join(5)
    srv.close()
