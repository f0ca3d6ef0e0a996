"""shared.traces.export against a real OTLP/HTTP receiver (the local cloud's collector,
run in a process of its own so that this process's threads are only the request's): one
export call in the request that ends an attempt, the sampled flag honoured, a failure
that never fails the job, and no thread left running after the request."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import records, tracing
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.stores.memory import MemoryStore
from shared.traces import export
from shared.traces import spans as trace_spans
from tests.unit.unit_support import handle, pipeline, settings


@pytest.fixture(scope="module")
def collector() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reclaim.local.collector"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    try:
        yield url
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


@pytest.fixture
def to_collector(collector: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(export.ENDPOINT_ENV, f"{collector}/v1/traces")
    return collector


def three_stages(ctx: StageContext) -> None:
    with ctx.span("encode", frames=24):
        ctx.state["n"] = ctx.state.get("n", 0) + 1


def queued_job(store: MemoryStore, name: str, *, sampled: bool = True) -> tuple[str, str]:
    job_id = records.new_job_id()
    trace = tracing.new_trace()
    if not sampled:
        trace = tracing.TraceContext(trace.trace_id, trace.span_id, sampled=False)
    record = records.new_record(job_id, name, {}, datetime.now(UTC), traceparent=trace.traceparent)
    store.add_pending(job_id)
    store.create(record)
    return job_id, trace.trace_id


def test_the_request_that_ends_a_job_exports_its_spans_in_one_call(to_collector: str) -> None:
    store = MemoryStore()
    name = pipeline([("a", three_stages), ("b", three_stages), ("c", three_stages)])
    job_id, trace_id = queued_job(store, name)
    before = get(f"{to_collector}/stats")
    threads = set(threading.enumerate())

    outcome = handle(job_id, store, settings(min_write_interval_seconds=0.0))

    assert outcome.kind == OutcomeKind.DONE
    # no thread is left running after the request that exported (the heartbeat joined,
    # the exporter has none: no BatchSpanProcessor, nothing in the background)
    assert set(threading.enumerate()) == threads
    after = get(f"{to_collector}/stats")
    assert after["requests"] - before["requests"] == 1  # one call for the whole attempt
    spans = get(f"{to_collector}/v1/traces/{trace_id}")["spans"]
    names = sorted(s["name"] for s in spans)
    assert names == sorted(
        ["job " + name, "submit", "queued", "attempt 1", "a", "b", "c", "done"] + ["encode"] * 3
    )
    record = store.read(job_id).record
    built = trace_spans.build(record)
    assert built is not None
    assert {s["span_id"] for s in spans if s["name"] != "encode"} == {
        s.span_id for s in built.spans
    }  # what went out is what the record builds
    by_id = {s["span_id"]: s for s in spans}
    for user in (s for s in spans if s["name"] == "encode"):
        parent = by_id[user["parent_span_id"]]
        assert parent["name"] in ("a", "b", "c")  # under its stage's span
        assert user["attributes"]["frames"] == 24
    assert all(s["service"] == "reclaim" for s in spans)


def test_the_same_job_exported_again_writes_the_same_span_ids(to_collector: str) -> None:
    store = MemoryStore()
    name = pipeline([("a", three_stages), ("b", three_stages)])
    job_id, trace_id = queued_job(store, name)
    handle(job_id, store, settings())
    first = {s["span_id"] for s in get(f"{to_collector}/v1/traces/{trace_id}")["spans"]}
    rewritten = get(f"{to_collector}/stats")["rewritten"]

    record = store.read(job_id).record  # as after a crash: built again, sent again
    again = export.attempt_ended(record, 1)

    assert again.ok and again.spans > 0
    held = get(f"{to_collector}/v1/traces/{trace_id}")["spans"]
    assert {s["span_id"] for s in held} == first  # no new span: the same ones, rewritten
    assert get(f"{to_collector}/stats")["rewritten"] - rewritten == again.spans


def test_an_unsampled_trace_exports_nothing(to_collector: str) -> None:
    store = MemoryStore()
    name = pipeline([("a", three_stages)])
    job_id, trace_id = queued_job(store, name, sampled=False)
    before = get(f"{to_collector}/stats")["requests"]
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    assert get(f"{to_collector}/stats")["requests"] == before
    assert get(f"{to_collector}/v1/traces/{trace_id}")["spans"] == []


def test_an_endpoint_that_does_not_answer_never_fails_the_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from reclaim.local.procs import free_port

    monkeypatch.setenv(export.ENDPOINT_ENV, f"http://127.0.0.1:{free_port()}/v1/traces")
    store = MemoryStore()
    name = pipeline([("a", three_stages)])
    job_id, _trace = queued_job(store, name)
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    assert store.read(job_id).record["status"] == "done"
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert any(line.get("message") == "trace export failed; the job goes on" for line in logged)


def test_where_spans_go() -> None:
    assert export.destination({}) is None  # not on Cloud Run, nothing set: nowhere
    assert export.destination({"K_SERVICE": "claim"}) == export.GCP_ENDPOINT
    assert export.destination({"CLOUD_RUN_JOB": "tasks"}) == export.GCP_ENDPOINT
    mine = {"K_SERVICE": "claim", export.ENDPOINT_ENV: "http://c:4318/v1/traces"}
    assert export.destination(mine) == "http://c:4318/v1/traces"
    assert export.destination({export.BASE_ENDPOINT_ENV: "http://c:4318/"}) == (
        "http://c:4318/v1/traces"
    )
    assert export.destination({**mine, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert export.destination({**mine, "OTEL_SDK_DISABLED": "true"}) is None
