"""A JSON API on its own port and daemon thread: the local cloud's control planes.

The platform's admin API (reclaim/local/cloudrun/admin.py), the Cloud Run jobs runner
(reclaim/local/runjobs/api.py) and the Pub/Sub emulator's admin
(reclaim/local/pubsub_emulator/admin.py)
each route a request to a JSON answer; this serves them alike: a body of at most
`max_body` bytes, a refusal as a 4xx JSON {"error", "reason"} that changed nothing,
no line logged per request (the tests and the demo call these APIs in tight loops).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[[str, str, bytes], tuple[int, Any]]
"""(method, path without the query, body) -> (status, JSON payload); raises Refused."""


class Refused(Exception):
    """A 4xx answer {"error", "reason"}: the request was bad and changed nothing."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.error, self.reason = status, error, reason


def json_object(raw: bytes, refused: Callable[[str], Exception]) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty); `refused(reason)` otherwise."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise refused("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise refused("the body must be a JSON object")
    return body


def _handler(route: Route, max_body: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > max_body:
                    raise Refused(413, "body too large", f"at most {max_body} bytes")
                raw = self.rfile.read(length) if length > 0 else b""
                status, payload = route(self.command, self.path.split("?", 1)[0], raw)
            except Refused as exc:
                status, payload = exc.status, {"error": exc.error, "reason": exc.reason}
            except ValueError:
                status, payload = 400, {"error": "bad request", "reason": "bad Content-Length"}
            data = json.dumps(payload, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class ServerThread:
    """An HTTP handler class served on host:port (0: any free port) by a
    ThreadingHTTPServer on its own daemon thread (the collector serves its own handler)."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], host: str, port: int = 0, *, name: str
    ) -> None:
        self._host = host
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class JsonApiServer(ServerThread):
    """`route` served as a JSON API (see the module)."""

    def __init__(
        self, route: Route, host: str, port: int = 0, *, name: str, max_body: int = 64 * 1024
    ) -> None:
        super().__init__(_handler(route, max_body), host, port, name=name)
