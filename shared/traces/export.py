"""Send a job's spans in the request that ends an attempt: one call, a short timeout, no
background thread, and a failure that is logged and never fails the job.

Why in the request, and not from OpenTelemetry's BatchSpanProcessor: on request-billed
Cloud Run an instance gets CPU only while it serves a request, and an idle one is shut
down with whatever a background exporter still held (docs/seeing.md). So the request that
ends an attempt (claim's push, the Cloud Run job's task, the watchdog's rescue) builds the
spans that attempt adds from the record it just wrote (shared.traces.spans) and hands
them to the OTLP exporter's export() itself, before it answers.

Where the spans go (the standard OpenTelemetry variables, so a user's own collector works):
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT`` + /v1/traces),
an OTLP/HTTP endpoint: the local cloud's collector sets it; else, on Cloud Run (K_SERVICE
or CLOUD_RUN_JOB is set: https://cloud.google.com/run/docs/container-contract#env-vars),
Cloud Trace's OTLP endpoint, the Telemetry API
(https://cloud.google.com/stackdriver/docs/reference/telemetry/overview), with the
runtime account's Application Default Credentials (google-auth's AuthorizedSession, the
trace.append scope: https://cloud.google.com/stackdriver/docs/reference/telemetry/v1.traces.post;
terraform grants roles/cloudtrace.agent, which holds telemetry.traces.write); else nowhere.
``OTEL_TRACES_EXPORTER=none`` or ``OTEL_SDK_DISABLED=true`` turns export off.

Why OTLP and not Google's Cloud Trace exporter (opentelemetry-exporter-gcp-trace): Google
recommends the Telemetry API for OpenTelemetry data (no conversion to the Cloud Trace
API's own format, which drops or truncates fields: "Migrate from the Trace exporter to the
OTLP endpoint", https://cloud.google.com/trace/docs/migrate-to-otlp-endpoints), the same
exporter then serves the local collector and a user's own, and it needs no gRPC client of
Cloud Trace: opentelemetry-exporter-otlp-proto-http over the requests and google-auth the
functions already carry.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.logs import get_logger
from shared.traces.spans import JobTrace, Span, adopt, build

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

log = get_logger(__name__)

EXPORT_TIMEOUT_S = 2.0
"""One export's whole budget (connect, send, the exporter's own retry of a transient
error): a slow or absent endpoint costs the request at most this (OTEL_EXPORTER_OTLP_
TRACES_TIMEOUT, when set, is the exporter's instead)."""
GCP_ENDPOINT = "https://telemetry.googleapis.com/v1/traces"
TRACE_APPEND_SCOPE = "https://www.googleapis.com/auth/trace.append"
SCOPE_NAME = "reclaim"

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
BASE_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TIMEOUT_ENV = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
COLLECTOR_ENV = "LOCAL_TRACE_COLLECTOR"
"""The local cloud's collector (reclaim.local.collector), whose spans the dashboard's job
page draws; unset on GCP, where the page draws the spans built from the record."""
_OFF = (("OTEL_TRACES_EXPORTER", "none"), ("OTEL_SDK_DISABLED", "true"))


def destination(env: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces URL spans go to, or None when nothing is exported."""
    env = os.environ if env is None else env
    if any(env.get(name, "").strip().lower() == off for name, off in _OFF):
        return None
    endpoint = env.get(ENDPOINT_ENV, "").strip()
    if endpoint:
        return endpoint
    base = env.get(BASE_ENDPOINT_ENV, "").strip()
    if base:
        return base.rstrip("/") + "/v1/traces"
    if env.get("K_SERVICE") or env.get("CLOUD_RUN_JOB"):
        return GCP_ENDPOINT
    return None


@dataclass(frozen=True)
class Exported:
    """What one export did: how many spans it sent (0: nothing to send) and whether the
    endpoint took them."""

    spans: int
    ok: bool
    endpoint: str | None = None


NOTHING = Exported(0, True)


def attempt_ended(record: Mapping[str, Any], attempt: int, extra: Sequence[Span] = ()) -> Exported:
    """Export what the end of `attempt` adds to the job's trace (with the stage's own
    spans, `extra`), honouring the trace's sampled flag. Never raises: a failure is
    logged and the job goes on."""
    try:
        endpoint = destination()
        if endpoint is None:
            return NOTHING
        trace = build(record)
        if trace is None or not trace.context.sampled:
            return NOTHING
        spans = trace.segment(attempt)
        return send(trace, [*spans, *adopt(spans, extra)], endpoint)
    except Exception as exc:  # a bug here must never fail the job it describes
        log.warning("trace export failed", job_id=record.get("id"), error=repr(exc))
        return Exported(0, False)


def send(trace: JobTrace, spans: Sequence[Span], endpoint: str) -> Exported:
    """One export call of `spans` (one job's) to `endpoint`; logged when it fails."""
    if not spans:
        return Exported(0, True, endpoint)
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = _exporter(endpoint)
    readable = [_readable(trace, span) for span in spans]
    ok = exporter.export(readable) is SpanExportResult.SUCCESS
    if not ok:
        log.warning(
            "trace export failed; the job goes on",
            job_id=trace.job_id,
            endpoint=endpoint,
            spans=len(spans),
            traceparent=trace.context.traceparent,
        )
    return Exported(len(spans), ok, endpoint)


# --------------------------------------------------------------------------- the exporter

_EXPORTERS: dict[str, SpanExporter] = {}
_LOCK = threading.Lock()
_SESSION_FACTORY: Callable[[], Any] | None = None


def _gcp_session() -> Any:
    """google-auth's requests session with the runtime account's credentials (ADC)."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _project = google.auth.default(scopes=[TRACE_APPEND_SCOPE])
    return AuthorizedSession(credentials)


def _exporter(endpoint: str) -> SpanExporter:
    """One exporter per endpoint and process (its connection pool is kept warm)."""
    with _LOCK:
        found = _EXPORTERS.get(endpoint)
        if found is not None:
            return found
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        session = None
        if endpoint == GCP_ENDPOINT:
            session = (_SESSION_FACTORY or _gcp_session)()
        timeout = None if os.environ.get(TIMEOUT_ENV) else EXPORT_TIMEOUT_S
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout, session=session)
        _EXPORTERS[endpoint] = exporter
        return exporter


_RESOURCE: Any = None


def _resource() -> Any:
    """Who sent the spans: the service (K_SERVICE, the job) and the project (the Telemetry
    API files spans under gcp.project_id). Built from the environment, no detector I/O."""
    global _RESOURCE
    if _RESOURCE is None:
        from opentelemetry.sdk.resources import Resource

        env = os.environ
        attributes = {
            "service.name": env.get("K_SERVICE") or env.get("CLOUD_RUN_JOB") or "reclaim",
        }
        project = env.get("RECLAIM_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT")
        if project:
            attributes["gcp.project_id"] = project
        revision = env.get("K_REVISION")
        if revision:
            attributes["service.version"] = revision
        _RESOURCE = Resource(attributes)
    return _RESOURCE


def _readable(trace: JobTrace, span: Span) -> ReadableSpan:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED if trace.context.sampled else TraceFlags.DEFAULT)
    trace_id = int(trace.trace_id, 16)

    def context(span_id: str, remote: bool = False) -> SpanContext:
        return SpanContext(trace_id, int(span_id, 16), is_remote=remote, trace_flags=flags)

    links = [
        Link(
            SpanContext(
                int(link.trace_id, 16),
                int(link.span_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED if link.sampled else 0),
            ),
            {"reclaim.link": "submit request"},
        )
        for link in span.links
    ]
    status = (
        Status(StatusCode.ERROR, span.error) if span.error is not None else Status(StatusCode.UNSET)
    )
    return ReadableSpan(
        name=span.name,
        context=context(span.span_id),
        parent=context(span.parent_id) if span.parent_id else None,
        resource=_resource(),
        attributes={**span.attributes, "reclaim.span": span.kind},
        links=links,
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=_nanos(span.start),
        end_time=_nanos(span.end),
        instrumentation_scope=InstrumentationScope(SCOPE_NAME),
    )


def _nanos(at: Any) -> int:
    return int(at.timestamp() * 1_000_000) * 1000
