"""The front of one service: its one URL, which routes every request to an instance.

A request takes a slot (Service.acquire, which pends and scales out as Cloud Run
does), goes to that instance, and the slot is given back only when the instance
has answered. Answers of the platform itself, never of the function:

- 429, "no available instance": it pended past the documented time
  (https://cloud.google.com/run/docs/about-instance-autoscaling);
- 504 at the service's request timeout, counted from arrival (start-up included),
  while the instance goes on with the request
  (https://cloud.google.com/run/docs/configuring/request-timeout). The cut request
  keeps its slot until the instance really answers: the instance runs exactly
  `concurrency` threads, and a slot handed on early would make the next request
  queue inside it. Cloud Run's own page only says the instance "might continue
  processing the aborted request, which can interfere with handling other requests";
  keeping the slot is the conservative reading.
- 503 when the instance died mid-request (a kill, a crash): Pub/Sub redelivers;
- 401 when the request's ID token does not verify (reclaim/local/cloudrun/iam.py: the stand-in
  for Cloud Run's IAM check, which also strips a good token's signature).
An instance that refuses the connection (its server is gone) is retired and the
request tries another slot.
"""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reclaim.local.cloudrun.config import INSTANCE_LOST_TEXT, NO_INSTANCE_TEXT, TIMEOUT_TEXT
from reclaim.local.cloudrun.iam import INVALID_TOKEN_TEXT, Issuer
from reclaim.local.cloudrun.service import Lease, Service
from reclaim.local.forwarding import ProxyHandler, end_to_end

CONNECT_TIMEOUT_S = 2.0
UNREACHABLE_RETRIES = 3
Answer = tuple[int, list[tuple[str, str]], bytes]


def _text(status: int, text: str) -> Answer:
    return status, [("Content-Type", "text/plain; charset=utf-8")], (text + "\n").encode()


class _Call:
    """One request forwarded to one instance, on its own thread, so the front can
    answer 504 at the deadline while the call goes on holding its slot."""

    def __init__(
        self,
        service: Service,
        lease: Lease,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        self.service = service
        self.lease = lease
        self.request = (method, path, headers, body)
        self.answer: Answer | None = None
        self.unreachable = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cloudrun-call", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        method, path, headers, body = self.request
        inst = self.lease.instance
        conn = http.client.HTTPConnection(inst.host, inst.port, timeout=CONNECT_TIMEOUT_S)
        try:
            try:
                conn.connect()
            except OSError:
                self.unreachable = True
                return
            assert conn.sock is not None
            conn.sock.settimeout(None)  # the instance decides; a kill or crash ends the wait
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                return  # died mid-request: answer stays None (503)
            self.answer = (resp.status, end_to_end(resp.getheaders()), data)
        finally:
            conn.close()
            self.service.release(self.lease, unreachable=self.unreachable)
            self.done.set()


def forward(
    service: Service, method: str, path: str, headers: dict[str, str], body: bytes
) -> Answer:
    """Route one request through `service` and return what the caller gets."""
    deadline = time.monotonic() + service.config.timeout_s
    for _ in range(UNREACHABLE_RETRIES + 1):
        pending = service.pending_timeout()
        remaining = deadline - time.monotonic()
        lease = service.acquire(min(pending, remaining))
        if lease is None:
            if time.monotonic() >= deadline:
                service.note("timed_out")
                return _text(504, TIMEOUT_TEXT)
            service.note("refused")
            return _text(429, NO_INSTANCE_TEXT)
        call = _Call(service, lease, method, path, headers, body)
        call.start()
        if not call.done.wait(max(0.0, deadline - time.monotonic())):
            service.note("timed_out")
            return _text(504, TIMEOUT_TEXT)
        if call.unreachable:
            continue
        if call.answer is None:
            service.note("lost")
            return _text(503, INSTANCE_LOST_TEXT)
        service.note("answered")
        return call.answer
    service.note("lost")
    return _text(503, INSTANCE_LOST_TEXT)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """Google's front end does not refuse connections: a burst of pushes (the emulator's
    window may be in the hundreds) must queue for accept, not be reset (the default
    listen backlog is 5)."""


class Front:
    """The service's URL: a threading HTTP server in front of its instances."""

    def __init__(
        self, service: Service, host: str = "127.0.0.1", port: int = 0, issuer: Issuer | None = None
    ) -> None:
        self.service = service
        self._host = host
        self.issuer = issuer or Issuer()
        self._server = _Server((host, port), _handler(service, self))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def audiences(self) -> tuple[str, ...]:
        """What an ID token for this service may name as its audience: its URL."""
        return (self.url, self.url + "/")

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"{self.service.name}-front", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()


def _handler(service: Service, front: Front) -> type[BaseHTTPRequestHandler]:
    class _Handler(ProxyHandler):
        def _proxy(self) -> None:
            body = self.read_body()
            headers = dict(end_to_end(self.headers.items()))
            headers["X-Forwarded-For"] = self.client_address[0]
            headers["Connection"] = "close"
            if self.headers.get("Host"):  # the service's own host reaches the container, as
                headers["Host"] = self.headers["Host"]  # on Cloud Run (CSRF checks read it)
            if front.issuer.admit(headers, front.audiences):
                status, out_headers, data = forward(service, self.command, self.path, headers, body)
            else:
                status, out_headers, data = _text(401, INVALID_TOKEN_TEXT)
            try:
                self.send_response(status)
                for key, value in out_headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # the caller stopped waiting (Pub/Sub at its ack deadline): the instance's
                # answer has nobody to go to, as on Cloud Run
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _proxy

    return _Handler
