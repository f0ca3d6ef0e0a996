"""shared.queue: the front door wires one store, doorbell, settings and clock into
every operation (MemoryStore, a recording doorbell, a settable clock)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import BatchNotFound, IllegalTransition, JobNotFound
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


def submit(queue: Queue, body: object) -> list[str]:
    result = queue.submit(parse_submission(body, queue.settings))
    return [job.job_id for job in result.jobs]


def test_a_job_goes_through_the_front_door_from_submit_to_done() -> None:
    queue, _store, bell, _clock = make_queue()
    (job_id,) = submit(queue, {"pipeline": "demo", "id": "j1", "batch_id": "b1"})
    assert bell.rung == ["j1"] and queue.pending() == ["j1"]
    assert queue.get(job_id).record["status"] == JobStatus.QUEUED
    outcome = queue.handle_delivery(job_id, owner="me", slots=Slots(1), gate=DrainGate())
    assert outcome.kind == OutcomeKind.DONE and str(outcome.owner).startswith("me.")
    view = queue.get(job_id)
    assert view.record["status"] == JobStatus.DONE and view.watchdog is None
    assert queue.read(job_id)["history"][0]["at"] == START.isoformat()  # the queue's clock
    assert queue.get_batch("b1").done and queue.pending() == []


def test_a_person_cancels_and_retries_through_it() -> None:
    queue, _store, bell, _clock = make_queue()
    submit(queue, {"pipeline": "demo", "id": "j1"})
    assert queue.cancel("j1", by="ann", reason="oops")["status"] == JobStatus.CANCELLED
    with pytest.raises(IllegalTransition):
        queue.cancel("j1", by="ann")
    retried = queue.retry("j1", by="ann")
    assert retried.rung and retried.record["status"] == JobStatus.QUEUED
    assert bell.rung == ["j1", "j1"]
    queue.ring("j1")
    assert bell.rung[-1] == "j1"


def test_the_sweep_rescues_a_silent_owner_on_the_queue_s_clock() -> None:
    queue, store, _bell, clock = make_queue()
    submit(queue, {"pipeline": "demo", "id": "j1"})
    stored = store.read("j1")
    store.update({**stored.record, "status": JobStatus.RUNNING, "attempts": 1}, stored.generation)
    assert queue.sweep_once().rescued == 0  # fresh
    clock.advance(31)
    result = queue.sweep_once()
    assert result.rescued == 1 and result.rung == 1
    assert queue.read("j1")["status"] == JobStatus.QUEUED


def test_listing_and_reading_as_stored() -> None:
    queue, store, _bell, _clock = make_queue()
    submit(queue, {"jobs": [{"pipeline": "demo", "id": i} for i in ("a", "b", "c")]})
    store.put_raw("bad", b"{")
    assert [r["id"] for r in queue.list_jobs(status=JobStatus.QUEUED).records] == ["a", "b", "c"]
    many = queue.read_many(["c", "bad", "gone"])
    assert [r["id"] for r in many.records] == ["c"] and many.missing == ["gone"]
    assert list(many.corrupt) == ["bad"]
    with pytest.raises(JobNotFound):
        queue.read("gone")
    with pytest.raises(JobNotFound):
        queue.get("gone")
    with pytest.raises(BatchNotFound):
        queue.get_batch("nothing")
