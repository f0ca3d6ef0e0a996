"""The local cloud's trace collector: an OTLP/HTTP receiver for the functions' spans.

On GCP the functions send a job's spans to Cloud Trace's OTLP endpoint (the Telemetry
API, shared/tracing/export.py); locally they send them here, by the standard variable
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` the local cloud sets for every instance and task.

    POST /v1/traces          an ExportTraceServiceRequest, binary protobuf or OTLP JSON
                             (https://opentelemetry.io/docs/specs/otlp/#otlphttp-request),
                             answered with an ExportTraceServiceResponse of the same encoding
    GET  /v1/traces          {"traces": {<trace id>: <span count>}}
    GET  /v1/traces/<id>     {"trace_id", "spans": [...]}: the trace's spans, oldest first
    GET  /stats              {"requests", "spans", "rewritten"}: export calls received,
                             spans held, spans that came again under an id already held

A span sent again under the same (trace id, span id) replaces the one held (counted in
"rewritten"): that is how a job's re-export after a crash is told apart from new spans.
It decodes with the OpenTelemetry protocol's own messages (opentelemetry-proto, which the
exporter itself depends on). It keeps spans in memory, runs on its own daemon thread in
the launcher's process (no process of its own), and bad input gets a 4xx JSON
{"error", "reason"} that changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from reclaim.local.json_api import Refused, ServerThread

MAX_BODY = 8 * 1024 * 1024
_TRACE_PATH = re.compile(r"/v1/traces/([0-9a-f]{32})")
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class Collector:
    """Spans received, by trace id and span id, and the count of export calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._traces: dict[str, dict[str, dict[str, Any]]] = {}
        self.requests = 0
        self.rewritten = 0

    def receive(self, request: ExportTraceServiceRequest) -> int:
        """Keep the request's spans (one export call); how many it held."""
        spans = list(_spans_of(request))
        with self._lock:
            self.requests += 1
            for span in spans:
                held = self._traces.setdefault(span["trace_id"], {})
                if span["span_id"] in held:
                    self.rewritten += 1
                held[span["span_id"]] = span
        return len(spans)

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self._lock:
            spans = list(self._traces.get(trace_id, {}).values())
        return sorted(spans, key=lambda s: (s["start_unix_nano"], s["end_unix_nano"], s["name"]))

    def traces(self) -> dict[str, int]:
        with self._lock:
            return {trace_id: len(spans) for trace_id, spans in self._traces.items()}

    def stats(self) -> dict[str, int]:
        with self._lock:
            held = sum(len(spans) for spans in self._traces.values())
            return {"requests": self.requests, "spans": held, "rewritten": self.rewritten}


def _hex(raw: bytes) -> str:
    return raw.hex()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, UTC).isoformat()


def _spans_of(request: ExportTraceServiceRequest) -> Iterable[dict[str, Any]]:
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                status = None
                if span.status.code == span.status.STATUS_CODE_ERROR:
                    status = {"code": "ERROR", "message": span.status.message}
                yield {
                    "trace_id": _hex(span.trace_id),
                    "span_id": _hex(span.span_id),
                    "parent_span_id": _hex(span.parent_span_id) or None,
                    "name": span.name,
                    "start_unix_nano": span.start_time_unix_nano,
                    "end_unix_nano": span.end_time_unix_nano,
                    "start": _iso(span.start_time_unix_nano),
                    "end": _iso(span.end_time_unix_nano),
                    "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                    "status": status,
                    "links": [
                        {"trace_id": _hex(link.trace_id), "span_id": _hex(link.span_id)}
                        for link in span.links
                    ],
                    "service": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                }


def _decode(raw: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        if content_type == JSON:
            json_format.Parse(raw.decode("utf-8"), request)
        elif content_type == PROTOBUF:
            request.ParseFromString(raw)
        else:
            raise Refused(415, "unsupported media type", f"send {PROTOBUF} or {JSON}")
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, "bad request", f"not an ExportTraceServiceRequest: {exc}") from None
    return request


def _post(collector: Collector, path: str, kind: str, raw: bytes) -> tuple[int, bytes, str]:
    """One export call: its answer (status, body, content type)."""
    try:
        if path != "/v1/traces":
            raise Refused(404, "not found", f"no route POST {path}")
        collector.receive(_decode(raw, kind))
    except Refused as exc:
        error = {"error": exc.error, "reason": exc.reason}
        return exc.status, json.dumps(error).encode(), JSON
    answer = ExportTraceServiceResponse()
    if kind == JSON:
        return 200, json_format.MessageToJson(answer).encode(), JSON
    return 200, answer.SerializeToString(), PROTOBUF


def _get(collector: Collector, path: str) -> tuple[int, Any]:
    match = _TRACE_PATH.fullmatch(path)
    if match is not None:
        return 200, {"trace_id": match.group(1), "spans": collector.trace(match.group(1))}
    if path == "/v1/traces":
        return 200, {"traces": collector.traces()}
    if path == "/stats":
        return 200, collector.stats()
    return 404, {"error": "not found", "reason": f"no route GET {path}"}


def _handler(collector: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the exporter reuses its connection

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                reason = f"Content-Length must be a number of bytes up to {MAX_BODY}"
                body = json.dumps({"error": "bad request", "reason": reason}).encode()
                self.close_connection = True
                self._send(413 if length > MAX_BODY else 400, body, JSON)
                return
            raw = self.rfile.read(length) if length > 0 else b""
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            self._send(*_post(collector, self.path.split("?", 1)[0], kind, raw))

        def do_GET(self) -> None:
            status, payload = _get(collector, self.path.split("?", 1)[0])
            self._send(status, json.dumps(payload, sort_keys=True).encode(), JSON)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the functions export once per attempt: no line per request

    return Handler


class CollectorServer(ServerThread):
    """The collector on host:port (0: a free port), served by a daemon thread."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.collector = Collector()
        super().__init__(_handler(self.collector), host, port, name="otlp-collector")

    @property
    def traces_endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set to."""
        return f"{self.url}/v1/traces"


def main(argv: list[str] | None = None) -> int:
    """``python -m reclaim.local.collector [--host H] [--port P]``: the collector alone,
    in the foreground (a test runs it out of its own process); prints its URL, then serves
    until stdin closes or the process is stopped."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = CollectorServer(args.host, args.port)
    server.start()
    print(server.url, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdin.read()  # the parent closes our stdin (or dies) to stop us
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
