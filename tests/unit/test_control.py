"""shared.control: cancel and retry on MemoryStore (GcsStore's semantics), racing
an owner's heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import control, job_queue, records
from shared.config import Settings
from shared.errors import CorruptRecord, IllegalTransition, JobNotFound, LostRace
from shared.features.table import context
from shared.jobs import JobRecord, JobStatus
from shared.storage import Stored, job_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell

NOW = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def clock() -> datetime:
    return NOW


def make_job(store: MemoryStore, job_id: str, status: JobStatus = JobStatus.QUEUED) -> Stored:
    record = records.new_record(job_id, "demo", {}, NOW - timedelta(minutes=5))
    stored = store.create(record)
    if status != JobStatus.QUEUED:
        stored = store.update(
            {**stored.record, "status": status, "owner": "i-1", "attempts": 1}, stored.generation
        )
    return stored


class HeartbeatFirst(MemoryStore):
    """A store where the running owner's heartbeat lands just before our CAS."""

    def __init__(self, beats: int) -> None:
        super().__init__()
        self.beats = beats

    def update(self, record: JobRecord, generation: int) -> Stored:
        if self.beats and record.get("status") == JobStatus.CANCELLED:
            self.beats -= 1
            current = super().read(record["id"])
            beat: JobRecord = {**current.record, **job_queue.heartbeat_fields(current.record, NOW)}
            super().update(beat, current.generation)
        return super().update(record, generation)


class Recording(MemoryStore):
    """Remembers the order of marker and record writes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None:
        self.order.append("pending")
        super().add_pending(job_id, pool=pool, pipeline=pipeline)

    def update(self, record: JobRecord, generation: int) -> Stored:
        self.order.append("record")
        return super().update(record, generation)


def cancel(store: MemoryStore, job_id: str, **kw: Any) -> JobRecord:
    ctx = context(store, Bell(), Settings.from_env({}, max_attempts=3), clock)
    return control.cancel(ctx, job_id, by=kw.pop("by", "cli"), reason=kw.pop("reason", None))


def retry(store: MemoryStore, job_id: str, bell: Bell | None = None) -> control.Retried:
    ctx = context(store, bell or Bell(), Settings.from_env({}, max_attempts=3), clock)
    return control.retry(ctx, job_id, by="cli:ann")


# ------------------------------------------------------------------ cancel


def test_cancel_outlasts_heartbeats_and_drops_the_marker() -> None:
    store = HeartbeatFirst(beats=2)
    make_job(store, "j1", JobStatus.RUNNING)
    store.add_pending("j1")
    record = cancel(store, "j1", by="cli:ann", reason="wrong input")
    assert record["status"] == JobStatus.CANCELLED
    assert store.read("j1").record["status"] == JobStatus.CANCELLED
    assert record["history"][-1]["event"] == "cancelled"
    assert record["history"][-1]["by"] == "cli:ann"
    assert [e.job_id for e in store.list_pending()] == []


def test_cancel_gives_up_after_a_few_lost_races() -> None:
    store = HeartbeatFirst(beats=control.CAS_ATTEMPTS)
    make_job(store, "j1", JobStatus.RUNNING)
    with pytest.raises(LostRace):
        cancel(store, "j1")
    assert store.read("j1").record["status"] == JobStatus.RUNNING


@pytest.mark.parametrize("status", job_queue.TERMINAL_STATUSES)
def test_cancel_of_a_terminal_job_is_refused_and_changes_nothing(status: JobStatus) -> None:
    store = MemoryStore()
    before = make_job(store, "j1", status)
    with pytest.raises(IllegalTransition):
        cancel(store, "j1")
    assert store.read("j1") == before


def test_cancel_of_an_unknown_or_unreadable_job() -> None:
    store = MemoryStore()
    with pytest.raises(JobNotFound, match="no job 'nope'"):
        cancel(store, "nope")
    store.put_raw("bad", b"{")
    with pytest.raises(CorruptRecord):
        cancel(store, "bad")
    assert store.raw(store.bucket_name, job_object("bad")).data == b"{"  # type: ignore[union-attr]


# ------------------------------------------------------------------ retry


def test_retry_adds_the_marker_before_the_record_raises_the_budget_and_rings() -> None:
    store, bell = Recording(), Bell()
    make_job(store, "j1", JobStatus.FAILED)
    store.order.clear()
    retried = retry(store, "j1", bell)
    assert store.order == ["pending", "record"]
    assert retried.rung and bell.rung == ["j1"]
    assert retried.record["status"] == JobStatus.QUEUED
    assert retried.record["max_attempts"] == 1 + 3
    assert retried.record["history"][-1]["event"] == "retried"
    assert [e.job_id for e in store.list_pending()] == ["j1"]


def test_a_failed_ring_is_reported_and_the_job_stays_queued() -> None:
    store = MemoryStore()
    make_job(store, "j1", JobStatus.CANCELLED)
    retried = retry(store, "j1", Bell(fail=True))
    assert not retried.rung and retried.ring_error and "down" in retried.ring_error
    assert store.read("j1").record["status"] == JobStatus.QUEUED


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.DONE])
def test_retry_is_refused_unless_failed_or_cancelled(status: JobStatus) -> None:
    store, bell = Recording(), Bell()
    before = make_job(store, "j1", status)
    store.order.clear()
    with pytest.raises(IllegalTransition):
        retry(store, "j1", bell)
    assert store.order == [] and bell.rung == []
    assert store.read("j1") == before
