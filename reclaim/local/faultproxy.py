"""An HTTP proxy in front of fake-gcs-server that counts calls and injects faults.

The functions reach Cloud Storage through it (``CloudConfig.functions_storage_host``),
so the demo and the benchmarks can say how many GCS calls the queue made, by
kind, as seen on the wire (client retries included), and the chaos test can
make a seeded fraction of requests fail the way Cloud Storage does under load:

- ``fault_fraction``: answer 503 or 429 WITHOUT forwarding (nothing happened);
- ``lost_answer_fraction``: forward, let the request take effect, then answer
  503 anyway (the answer was lost), which is what makes a generation-matched
  retry come back 412 although the caller's own write landed.

Kinds: GET of an object or its metadata = read, upload POST/PUT and PATCH =
write, DELETE = delete, GET of an object listing = list, the rest = other.
Each call is also attributed to the top-level prefix of the object name it
touches or lists (``by_prefix``, reclaim.local.gcs_names), with the status it was answered.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from reclaim.local.forwarding import ProxyHandler, end_to_end
from reclaim.local.gcs_names import name_prefix, object_name

KINDS = ("read", "write", "delete", "list", "other")
FAULT_STATUSES = (503, 429)
_UPSTREAM_TIMEOUT_S = 60.0


def request_kind(method: str, path: str) -> str:
    """Classify one JSON-API request (pure; the counters and tests share it)."""
    route = urlsplit(path).path
    method = method.upper()
    if method == "DELETE":
        return "delete"
    if route.startswith("/upload/"):
        return "write" if method in ("POST", "PUT") else "other"
    if method in ("PATCH", "PUT"):
        return "write" if "/o/" in route else "other"
    if method == "POST":
        # rewrite, copy and compose create objects; everything else (bucket create) is admin
        verbs = ("/rewriteTo/", "/copyTo/", "/compose")
        return "write" if any(v in route for v in verbs) else "other"
    if method in ("GET", "HEAD"):
        if route.startswith("/download/"):
            return "read"
        parts = route.strip("/").split("/")
        # /storage/v1/b/<bucket>/o            -> list
        # /storage/v1/b/<bucket>/o/<name...>  -> read (metadata or ?alt=media)
        if parts[:2] == ["storage", "v1"] and len(parts) >= 5 and parts[2] == "b":
            if parts[4] != "o":
                return "other"
            return "list" if len(parts) == 5 else "read"
        return "other"
    return "other"


@dataclass
class _State:
    upstream: str
    fault_fraction: float
    lost_answer_fraction: float
    statuses: tuple[int, ...]
    rng: random.Random
    every: int = 0
    kinds: frozenset[str] | None = None
    eligible: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    touched: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self, kind: str, status: int) -> None:
        with self.lock:
            self.answers[f"{kind}:{status}"] += 1

    def touch(self, kind: str, prefix: str, status: int, request: str) -> None:
        with self.lock:
            self.touched[(kind, prefix, status)] += 1
            self.examples.setdefault(f"{kind} {prefix}", request)

    def decide(self, kind: str) -> tuple[int | None, bool]:
        """(status to inject or None, forward first?) for one request; counts it."""
        with self.lock:
            self.calls[kind] += 1
            if self.kinds is not None and kind not in self.kinds:
                return None, True
            if self.every:
                self.eligible += 1
                if self.eligible % self.every:
                    return None, True
                status = self.statuses[(self.eligible // self.every - 1) % len(self.statuses)]
                self.faults[f"{kind}:{status}"] += 1
                return status, False
            roll = self.rng.random()
            if roll < self.fault_fraction:
                status = self.rng.choice(self.statuses)
                self.faults[f"{kind}:{status}"] += 1
                return status, False
            if roll < self.fault_fraction + self.lost_answer_fraction:
                self.faults[f"{kind}:lost"] += 1
                return 503, True
            return None, True


def _check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a number within 0..1")
    return float(value)


class FaultProxy:
    """Start with ``with FaultProxy(upstream, ...) as proxy:``; ``proxy.url`` is the endpoint.

    ``upstream`` may not listen yet (the local cloud starts fake-gcs after the
    proxy exists); requests are forwarded lazily. ``kinds`` limits faults to those
    request kinds (KINDS); ``every`` n > 0 answers every n-th of them with a fault
    instead of a seeded fraction: a count of faults a test can rely on whatever order
    concurrent requests arrive in.
    """

    def __init__(
        self,
        upstream: str,
        *,
        fault_fraction: float = 0.0,
        lost_answer_fraction: float = 0.0,
        statuses: tuple[int, ...] = FAULT_STATUSES,
        seed: int | None = None,
        every: int = 0,
        kinds: tuple[str, ...] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not statuses or any(not 400 <= s <= 599 for s in statuses):
            raise ValueError(f"statuses={statuses!r} must be HTTP error codes")
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"every={every!r} must be a whole number >= 0")
        if kinds is not None and (not kinds or set(kinds) - set(KINDS)):
            raise ValueError(f"kinds={kinds!r} must be some of {KINDS}")
        self._state = _State(
            upstream=upstream.rstrip("/"),
            fault_fraction=_check_fraction("fault_fraction", fault_fraction),
            lost_answer_fraction=_check_fraction("lost_answer_fraction", lost_answer_fraction),
            statuses=tuple(statuses),
            rng=random.Random(seed),
            every=every,
            kinds=None if kinds is None else frozenset(kinds),
        )
        self._check_sum()
        self._server = _Server((host, port), _Handler)
        self._server.state = self._state
        self._host = host
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._server.server_address[1]}"

    def set_faults(
        self, fault_fraction: float | None = None, lost_answer_fraction: float | None = None
    ) -> None:
        """Change the fault rates at run time (e.g. calm the storm before a check)."""
        with self._state.lock:
            if fault_fraction is not None:
                self._state.fault_fraction = _check_fraction("fault_fraction", fault_fraction)
            if lost_answer_fraction is not None:
                self._state.lost_answer_fraction = _check_fraction(
                    "lost_answer_fraction", lost_answer_fraction
                )
            self._check_sum()

    def _check_sum(self) -> None:
        if self._state.fault_fraction + self._state.lost_answer_fraction > 1:
            raise ValueError("fault_fraction + lost_answer_fraction must not exceed 1")

    def counts(self) -> dict[str, int]:
        """Requests received so far by kind (every kind present, faulted ones included)."""
        with self._state.lock:
            return {k: self._state.calls.get(k, 0) for k in KINDS}

    def faults(self) -> dict[str, int]:
        """Injected faults by "kind:status" ("kind:lost" for a forwarded-then-503)."""
        with self._state.lock:
            return dict(self._state.faults)

    def answers(self) -> dict[str, int]:
        """Upstream answers by "kind:status" (e.g. "write:412", a lost CAS race), faults apart."""
        with self._state.lock:
            return dict(self._state.answers)

    def by_prefix(self, statuses: bool = False) -> dict[str, int]:
        """Requests by "kind prefix" ("write jobs/", "list pending/"), the prefix being
        the top level of the name touched or listed; with ``statuses``, by
        "kind prefix status" as answered to the caller (faults included)."""
        out: Counter[str] = Counter()
        with self._state.lock:
            for (kind, prefix, status), n in self._state.touched.items():
                out[f"{kind} {prefix} {status}" if statuses else f"{kind} {prefix}"] += n
        return dict(sorted(out.items()))

    def examples(self) -> dict[str, str]:
        """The first request seen of each "kind prefix" (method and path): what a count
        of calls without an object name ("other -") was."""
        with self._state.lock:
            return dict(sorted(self._state.examples.items()))

    def reset(self) -> None:
        """Zero the counters (a benchmark measures one phase at a time)."""
        with self._state.lock:
            self._state.touched.clear()
            self._state.examples.clear()
            self._state.calls.clear()
            self._state.faults.clear()
            self._state.answers.clear()

    def start(self) -> FaultProxy:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="faultproxy", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that died mid-connection (a SIGKILLed instance) is normal here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(ProxyHandler):
    server: _Server
    _upstream: http.client.HTTPConnection | None = None

    def _handle(self) -> None:
        body = self.read_body()
        kind = request_kind(self.command, self.path)
        injected, forward = self.server.state.decide(kind)
        status, data = 502, b""
        headers: list[tuple[str, str]] = []
        if forward:
            try:
                status, headers, data = self._forward(body)
                self.server.state.answered(kind, status)
            except OSError as exc:
                status, headers, data = 502, [], _error_body(502, f"upstream unreachable: {exc}")
        if injected is not None:
            headers = [("Content-Type", "application/json")]
            data = _error_body(injected, "injected by reclaim.local.faultproxy")
            status = injected
        prefix = name_prefix(object_name(self.command, self.path, body))
        self.server.state.touch(kind, prefix, status, f"{self.command} {self.path[:200]}")
        self._reply(status, headers, data)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._upstream.close()
                self._upstream = None

    def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        up = urlsplit(self.server.state.upstream)
        headers = dict(end_to_end(self.headers.items()))
        headers["Host"] = up.netloc
        for fresh in (False, True):
            conn = self._upstream
            if conn is None or fresh:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection(
                    up.hostname or "127.0.0.1", up.port, timeout=_UPSTREAM_TIMEOUT_S
                )
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._upstream = conn
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.HTTPException, ConnectionError):
                if fresh:
                    raise
                continue  # a kept-alive upstream connection went stale: one fresh try
            kept = end_to_end(resp.getheaders())
            return resp.status, kept, data
        raise AssertionError("unreachable")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


def _error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"code": status, "message": message}}).encode()
