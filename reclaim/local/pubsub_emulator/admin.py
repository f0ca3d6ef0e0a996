"""Optional HTTP admin server: GET /stats, GET /faults, POST /faults, GET /healthz.

Used by the chaos tests and the demo summary; never part of the Pub/Sub API. Bad input
gets a 4xx JSON {"error", "reason"} and changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from reclaim.local.json_api import JsonApiServer, Refused
from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.faults import FaultError

MAX_BODY = 64 * 1024


def _route(broker: Broker, method: str, path: str, raw: bytes) -> tuple[int, Any]:
    if method == "GET" and path == "/stats":
        return 200, broker.snapshot()
    if method == "GET" and path == "/faults":
        return 200, broker.faults.snapshot()
    if method == "GET" and path == "/healthz":
        return 200, {"ok": True}
    if method == "POST" and path == "/faults":
        try:
            changes = json.loads(raw) if raw else None
            if not isinstance(changes, dict):
                raise FaultError("a JSON object body is required")
            return 200, broker.faults.update(changes)
        except (FaultError, ValueError) as exc:
            raise Refused(400, "bad faults", str(exc)) from None
    raise Refused(404, "no such path", f"{method} {path[:80]}")


class AdminServer(JsonApiServer):
    """The admin API on its own port and daemon thread."""

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        super().__init__(
            lambda method, path, raw: _route(broker, method, path, raw),
            host,
            port,
            name="admin",
            max_body=MAX_BODY,
        )
