"""A job's trace: made at submit, kept in the record, carried by every doorbell (submit,
retry, rescue, requeue), and written on every log line about the job."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from shared import job_queue, logs, records, sweeper, tracing
from shared.doorbell import message_for
from shared.features.table import context
from shared.queue import Queue, parse_submission
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, handle, pipeline, settings

REQUEST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE = "projects/reclaim-local/traces/4bf92f3577b34da6a3ce929d0e0e4736"


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_each_job_of_a_batch_is_its_own_trace_linked_to_the_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("INFO", project="reclaim-local")
    store, bell = MemoryStore(), Bell()
    queue = Queue(store, bell, settings())
    body = {"jobs": [{"pipeline": "demo", "id": "a"}, {"pipeline": "demo", "id": "b"}]}
    capsys.readouterr()
    queue.submit(parse_submission(body, queue.settings), traceparent=REQUEST)
    ids = set()
    for job_id in ("a", "b"):
        carried = store.read(job_id).record["traceparent"]
        ctx = tracing.parse(carried)
        assert ctx is not None and ctx.trace_id != REQUEST.split("-")[1]
        assert bell.traces[job_id] == carried
        ids.add(ctx.trace_id)
    assert len(ids) == 2
    created = [e for e in lines(capsys) if e["message"] == "job created"]
    assert {e["submit_trace"] for e in created} == {REQUEST.split("-")[1]}
    assert {e["logging.googleapis.com/trace"].rsplit("/", 1)[1] for e in created} == ids


def test_without_a_request_trace_each_job_starts_its_own() -> None:
    store, bell = MemoryStore(), Bell()
    queue = Queue(store, bell, settings())
    queue.submit(parse_submission({"pipeline": "demo", "id": "x"}, queue.settings))
    queue.submit(parse_submission({"pipeline": "demo", "id": "y"}, queue.settings))
    x, y = (tracing.parse(store.read(i).record["traceparent"]) for i in ("x", "y"))
    assert x is not None and y is not None and x.trace_id != y.trace_id


def test_the_doorbell_message_carries_a_valid_trace_only() -> None:
    assert message_for("j", REQUEST)[1] == {"job_id": "j", "traceparent": REQUEST}
    assert message_for("j", "junk")[1] == {"job_id": "j"}
    assert message_for("j")[1] == {"job_id": "j"}


def test_every_line_of_a_jobs_life_carries_its_trace(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("INFO", project="reclaim-local")
    clock = Clock()
    calls = {"n": 0}

    def flaky(ctx: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("first attempt fails")

    name = pipeline([("only", flaky)])
    store, bell = MemoryStore(), Bell()
    s = settings()
    queue = Queue(store, bell, s, clock=clock)
    queue.submit(parse_submission({"pipeline": name, "id": "t1"}, s), traceparent=REQUEST)
    capsys.readouterr()
    trace = (
        f"projects/reclaim-local/traces/{tracing.trace_id(store.read('t1').record['traceparent'])}"
    )
    handle("t1", store, s, clock, bell)  # requeued after the stage error, rung at once
    handle("t1", store, s, clock, bell)  # done
    about = [e for e in lines(capsys) if e.get("job_id") == "t1"]
    assert {e["message"] for e in about} >= {"claimed", "requeued after a stage error", "done"}
    assert {e.get("logging.googleapis.com/trace") for e in about} == {trace}
    assert bell.traces["t1"] == store.read("t1").record["traceparent"]


def test_a_rescue_and_a_retry_ring_in_the_jobs_trace(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("INFO", project="reclaim-local")
    clock = Clock()
    store, bell = MemoryStore(), Bell()
    s = settings()
    trace = REQUEST
    record = records.new_record("r1", "demo", {}, clock(), traceparent=trace)
    store.add_pending("r1")
    stored = store.create(record)
    store.update({**record, **job_queue.claim_fields(record, "gone", clock())}, stored.generation)
    clock.advance(s.stale_seconds + 1)
    capsys.readouterr()
    sweeper.run_once(context(store, bell, s), clock())
    rescued = [e for e in lines(capsys) if e.get("job_id") == "r1"]
    assert rescued and {e.get("logging.googleapis.com/trace") for e in rescued} == {TRACE}
    assert bell.traces["r1"] == trace
    Queue(store, bell, s, clock=clock).cancel("r1", by="me")
    bell.traces.clear()
    Queue(store, bell, s, clock=clock).retry("r1", by="me")
    assert bell.traces["r1"] == trace and store.read("r1").record["traceparent"] == trace


def test_a_bad_traceparent_in_a_new_record_is_refused() -> None:
    from shared.errors import InvalidInput

    with pytest.raises(InvalidInput):
        records.new_record("z", "demo", {}, Clock()(), traceparent="nope")
    assert "traceparent" not in records.new_record("z", "demo", {}, Clock()() - timedelta(0))
