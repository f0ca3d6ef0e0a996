"""The CLI's operations on the seam (MemoryStore: same semantics as GcsStore)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, records
from shared.cli import ops as cli_ops
from shared.storage import CorruptRecord, LostRace, NotFound, Stored
from shared.storage_memory import MemoryStore

NOW = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def clock() -> datetime:
    return NOW


def _job(store: MemoryStore, job_id: str, status: str = "queued", **over: Any) -> Stored:
    record = records.new_record(job_id, "demo", {}, NOW - timedelta(minutes=5), **over)
    stored = store.create(record)
    if status != "queued":
        stored = store.update(
            {**stored.record, "status": status, "owner": "i-1", "attempts": 1}, stored.generation
        )
    return stored


class HeartbeatFirst(MemoryStore):
    """A store where the running owner's heartbeat lands just before our first CAS."""

    def __init__(self, beats: int) -> None:
        super().__init__()
        self.beats = beats

    def update(self, record: dict[str, Any], generation: int) -> Stored:
        if self.beats and record.get("status") == "cancelled":
            self.beats -= 1
            current = super().read(record["id"])
            beat = {**current.record, **job_queue.heartbeat_fields(current.record, NOW)}
            super().update(beat, current.generation)
        return super().update(record, generation)


def test_cancel_outlasts_heartbeats_and_drops_the_marker() -> None:
    store = HeartbeatFirst(beats=2)
    _job(store, "j1", "running")
    store.add_pending("j1")
    stored = cli_ops.cancel_job(store, "j1", by="cli:ann", reason="wrong input", clock=clock)
    assert stored.record["status"] == "cancelled"
    assert store.read("j1").record["status"] == "cancelled"
    assert stored.record["history"][-1]["event"] == "cancelled"
    assert stored.record["history"][-1]["by"] == "cli:ann"
    assert [e.job_id for e in store.list_pending()] == []


def test_cancel_gives_up_after_a_few_lost_races() -> None:
    store = HeartbeatFirst(beats=cli_ops.CAS_ATTEMPTS)
    _job(store, "j1", "running")
    with pytest.raises(LostRace):
        cli_ops.cancel_job(store, "j1", by="cli", clock=clock)
    assert store.read("j1").record["status"] == "running"


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_cancel_of_a_terminal_job_is_refused_and_changes_nothing(status: str) -> None:
    store = MemoryStore()
    before = _job(store, "j1", status)
    with pytest.raises(job_queue.IllegalTransition):
        cli_ops.cancel_job(store, "j1", by="cli", clock=clock)
    assert store.read("j1") == before


def test_cancel_of_an_unknown_job_is_not_found() -> None:
    with pytest.raises(NotFound):
        cli_ops.cancel_job(MemoryStore(), "nope", by="cli", clock=clock)


class Recording(MemoryStore):
    """Remembers the order of marker and record writes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def add_pending(self, job_id: str) -> None:
        self.order.append("pending")
        super().add_pending(job_id)

    def update(self, record: dict[str, Any], generation: int) -> Stored:
        self.order.append("record")
        return super().update(record, generation)


def test_retry_adds_the_marker_before_the_record_and_raises_the_budget() -> None:
    store = Recording()
    _job(store, "j1", "failed")
    store.order.clear()
    stored = cli_ops.retry_job(store, "j1", by="cli:ann", default_max_attempts=3, clock=clock)
    assert store.order == ["pending", "record"]
    assert stored.record["status"] == "queued"
    assert stored.record["max_attempts"] == 1 + 3
    assert stored.record["history"][-1]["event"] == "retried"
    assert [e.job_id for e in store.list_pending()] == ["j1"]


@pytest.mark.parametrize("status", ["queued", "running", "done"])
def test_retry_is_refused_unless_failed_or_cancelled(status: str) -> None:
    store = Recording()
    before = _job(store, "j1", status)
    store.order.clear()
    with pytest.raises(job_queue.IllegalTransition):
        cli_ops.retry_job(store, "j1", by="cli", default_max_attempts=3, clock=clock)
    assert store.order == []
    assert store.read("j1") == before


def test_list_uses_the_batch_the_pending_index_or_history() -> None:
    store = MemoryStore()
    for i, status in enumerate(["queued", "running", "done", "failed"]):
        _job(store, f"j{i}", status, batch_id="b1" if i % 2 == 0 else None)
        if status in ("queued", "running"):
            store.add_pending(f"j{i}")
        if i % 2 == 0:
            store.add_to_batch("b1", f"j{i}")
    store.put_raw("bad", b"{not json")
    store.add_to_batch("b1", "bad")
    store.add_to_batch("b1", "gone")

    in_batch = cli_ops.list_jobs(store, status=None, batch="b1", limit=None)
    assert sorted(r["id"] for r in in_batch.records) == ["j0", "j2"]
    assert list(in_batch.corrupt) == ["bad"]
    assert in_batch.missing == ["gone"]

    store.calls.clear()
    running = cli_ops.list_jobs(store, status="running", batch=None, limit=None)
    assert [r["id"] for r in running.records] == ["j1"]
    assert store.calls["read"] == 2  # only the pending ones were read

    failed = cli_ops.list_jobs(store, status="failed", batch=None, limit=None)
    assert [r["id"] for r in failed.records] == ["j3"]
    assert len(cli_ops.list_jobs(store, status=None, batch=None, limit=2).records) == 2


def test_decode_dead_letter_reads_attribute_then_data_and_pubsub_counts() -> None:
    attrs = {
        "CloudPubSubDeadLetterSourceDeliveryCount": "20",
        "CloudPubSubDeadLetterSourceSubscription": "reclaim-claim",
    }
    data = json.dumps({"job_id": "j9"}).encode()
    letter = cli_ops.decode_dead_letter("a1", "m1", data, attrs, 0, None)
    assert (letter.job_id, letter.delivery_count, letter.source_subscription) == (
        "j9",
        20,
        "reclaim-claim",
    )
    letter = cli_ops.decode_dead_letter("a1", "m1", b"\xff", {"job_id": "j8"}, 3, None)
    assert (letter.job_id, letter.delivery_count) == ("j8", 3)
    assert cli_ops.decode_dead_letter("a", "m", b"[1]", {}, 0, None).job_id is None


def test_requeue_decision() -> None:
    store = MemoryStore()
    _job(store, "q", "queued")
    _job(store, "d", "done")
    store.put_raw("bad", b"nope")
    assert cli_ops.requeue_decision(store, "q") == ("ring", "queued")
    assert cli_ops.requeue_decision(store, "d") == ("drop", "done")
    assert cli_ops.requeue_decision(store, "bad") == ("keep", None)
    assert cli_ops.requeue_decision(store, "missing") == ("keep", None)
    assert cli_ops.requeue_decision(store, None) == ("keep", None)
    with pytest.raises(CorruptRecord):
        store.read("bad")
