"""The features meet on one job: what a user combining them gets (MemoryStore, the queue's
own clock)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.jobs import JobStatus
from shared.outcome import OutcomeKind
from shared.queue import Queue, parse_submission
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock

START = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def make_queue() -> tuple[Queue, MemoryStore, Bell, Clock]:
    store, bell, clock = MemoryStore(), Bell(), Clock(START)
    settings = Settings.from_env({}, stale_seconds=30.0, drain_max_jobs=0)
    return Queue(store, bell, settings, clock=clock), store, bell, clock


def deliver(queue: Queue, job_id: str) -> OutcomeKind:
    return queue.handle_delivery(job_id, owner="me", slots=Slots(1), gate=DrainGate()).kind


def test_a_delayed_child_waits_for_its_parent_and_for_its_time() -> None:
    queue, store, bell, clock = make_queue()
    settings = queue.settings
    body = {
        "jobs": [
            {"pipeline": "demo", "id": "parent"},
            {"pipeline": "demo", "id": "child", "depends_on": ["parent"], "delay_seconds": 7200},
        ]
    }
    queue.submit(parse_submission(body, settings))
    assert store.read("child").record["status"] == JobStatus.WAITING
    assert deliver(queue, "child") == OutcomeKind.SKIPPED  # waiting: never claimed

    assert deliver(queue, "parent") == OutcomeKind.DONE
    released = store.read("child").record
    assert released["status"] == JobStatus.QUEUED  # released by its parent's end ...
    assert deliver(queue, "child") == OutcomeKind.SKIPPED  # ... but not before its run_at

    clock.advance(7200 + 60)
    assert queue.sweep_once().released == 1  # the hour index hands it to pending/ and rings
    assert bell.rung[-1] == "child"
    assert deliver(queue, "child") == OutcomeKind.DONE
    assert queue.pending() == []


def test_a_record_naming_no_pipeline_passes_the_gates_to_the_runner() -> None:
    """Found by tests/fuzz: a hand-edited pipeline name reached the pause and rate gates,
    whose object names refused it, and claim answered the push 400 (a dead letter)."""
    from shared import records

    queue, store, _bell, clock = make_queue()
    record = {**records.new_record("odd", "demo", {}, START), "pipeline": ";", "rate": "5/s"}
    store.create(record)
    store.add_pending("odd")
    # no revision knows it: deferred (rollout skew, shared.resume), no attempt spent ...
    outcome = queue.handle_delivery("odd", owner="me", slots=Slots(1), gate=DrainGate())
    assert outcome.kind == OutcomeKind.DEFERRED and outcome.redeliver
    assert store.read("odd").record["attempts"] == 0
    # ... and failed, naming the pipeline, once the skew bound has passed
    clock.advance(queue.ctx.settings.rollout_skew_seconds + 1)
    outcome = queue.handle_delivery("odd", owner="me", slots=Slots(1), gate=DrainGate())
    assert outcome.kind == OutcomeKind.FAILED and "pipeline ';'" in outcome.detail
    failed = store.read("odd").record
    assert failed["status"] == JobStatus.FAILED and failed["attempts"] == 0


def test_a_bulk_cancel_by_pipeline_finds_delayed_jobs_and_waiting_children() -> None:
    from shared import bulk

    queue, store, _bell, _clock = make_queue()
    settings = queue.settings
    body = {
        "jobs": [
            {"pipeline": "demo", "id": "now"},
            {"pipeline": "demo", "id": "later", "delay_seconds": 86400},  # the hour index
            {"pipeline": "demo", "id": "child", "depends_on": ["now"]},  # waiting
        ]
    }
    queue.submit(parse_submission(body, settings))
    picked = bulk.select(queue.ctx, bulk.Selector(pipeline="demo"), "cancel", START)
    assert sorted(r["id"] for r in picked) == ["child", "later", "now"]
    for record in picked:
        queue.cancel(str(record["id"]), by="ops")
    assert {store.read(i).record["status"] for i in ("now", "later", "child")} == {
        JobStatus.CANCELLED
    }
