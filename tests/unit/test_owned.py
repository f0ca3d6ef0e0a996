"""shared.claim.owned: the owner's write discipline on MemoryStore, with a settable clock:
coalesced checkpoints, fencing, the sticky loss, and the heartbeat thread."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import job_queue, records
from shared.claim.owned import Heartbeat, OwnedRecord
from shared.errors import OwnerLost, Unavailable
from shared.jobs import JobRecord, JobStatus
from shared.logs import JobLogger
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Clock

START = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def claimed(store: MemoryStore, clock: Clock, **kw: Any) -> OwnedRecord:
    record = records.new_record("j1", "demo", {}, clock())
    stored = store.create(record)
    new: JobRecord = {**stored.record, **job_queue.claim_fields(stored.record, "me.1", clock())}
    stored = store.update(new, stored.generation)
    return OwnedRecord(
        store,
        stored,
        owner="me.1",
        attempt=1,
        clock=clock,
        min_interval_s=kw.pop("min_interval_s", 1.0),
        heartbeat_s=kw.pop("heartbeat_s", 10.0),
        log=JobLogger("j1", "me.1", 1),
    )


def steal(store: MemoryStore) -> None:
    """Someone else writes the record (a rescue, a re-claim, a cancel)."""
    stored = store.read("j1")
    store.update({**stored.record, "owner": "other.1"}, stored.generation)


def test_a_checkpoint_sooner_than_the_interval_waits_for_the_tick() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    writes = store.calls["write"]
    assert owned.checkpoint("s0", 1, {"n": 1}) is False and owned.has_pending
    owned.tick()
    assert store.calls["write"] == writes  # still within the interval
    clock.advance(1.0)
    owned.tick()
    assert not owned.has_pending and store.calls["write"] == writes + 1
    assert store.read("j1").record["checkpoint"] == {
        "next_stage": 1,
        "state": {"n": 1},
        "outputs": [],
    }


def test_a_checkpoint_after_the_interval_is_written_at_once() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    clock.advance(2.0)
    assert owned.checkpoint("s0", 1, {}) is True
    assert job_queue.checkpoint_of(store.read("j1").record) == (1, {})


def test_the_tick_writes_a_heartbeat_only_when_one_is_due() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=5.0)
    writes = store.calls["write"]
    clock.advance(4.0)
    owned.tick()
    assert store.calls["write"] == writes
    clock.advance(1.0)
    owned.tick()
    assert store.calls["write"] == writes + 1
    assert store.read("j1").record["updated_at"] == job_queue.format_time(clock())


def test_a_storage_hiccup_keeps_the_checkpoint_pending() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    clock.advance(2.0)
    store.inject_failure("write", Unavailable("503 from storage"))
    assert owned.checkpoint("s0", 1, {}) is False and owned.has_pending
    owned.tick()
    assert not owned.has_pending


def test_a_bug_in_a_checkpoint_write_is_not_mistaken_for_a_hiccup() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    clock.advance(2.0)
    store.inject_failure("write", TypeError("a bug"))
    with pytest.raises(TypeError):
        owned.checkpoint("s0", 1, {})


def test_losing_the_record_is_sticky_and_costs_no_more_calls() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    steal(store)
    clock.advance(2.0)
    with pytest.raises(OwnerLost):
        owned.checkpoint("s0", 1, {})
    assert owned.lost
    calls = dict(store.calls)
    with pytest.raises(OwnerLost):
        owned.finish(lambda job: job_queue.done_fields(job, clock(), {}), "done")
    owned.tick()
    assert dict(store.calls) == calls
    assert store.read("j1").record["owner"] == "other.1"


def test_confirm_is_free_while_fresh_and_fences_after_a_pause() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    writes = store.calls["write"]
    owned.confirm(5.0)
    assert store.calls["write"] == writes
    clock.advance(6.0)
    owned.confirm(5.0)  # a fencing heartbeat: still ours
    assert store.calls["write"] == writes + 1
    steal(store)
    clock.advance(6.0)
    with pytest.raises(OwnerLost):
        owned.confirm(5.0)


def test_finish_folds_a_pending_checkpoint_into_the_final_write_and_closes() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    owned.checkpoint("s0", 1, {"kept": True})
    writes = store.calls["write"]
    stored = owned.finish(lambda job: job_queue.requeue_fields(job, clock(), delay_s=5), "requeued")
    assert store.calls["write"] == writes + 1
    assert stored.record["status"] == JobStatus.QUEUED
    assert job_queue.checkpoint_of(stored.record) == (1, {"kept": True})
    with pytest.raises(OwnerLost, match="already finished"):
        owned.checkpoint("s1", 2, {})


def test_a_done_write_does_not_fold_a_pending_checkpoint() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    owned.checkpoint("s0", 1, {"dropped": True})
    stored = owned.finish(lambda job: job_queue.done_fields(job, clock(), {}), "done", fold=False)
    assert stored.record["status"] == JobStatus.DONE
    assert job_queue.checkpoint_of(stored.record) == (0, {})


class _Ticks:
    """Stands in for an OwnedRecord: the first tick hits a bug, later ones count."""

    def __init__(self) -> None:
        self.ticks = 0
        self.again = threading.Event()

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 1:
            raise TypeError("a bug in one tick")
        self.again.set()


def test_the_heartbeat_survives_a_bug_in_one_tick() -> None:
    ticks = _Ticks()
    with Heartbeat(ticks, 0.02, JobLogger("j1")):
        assert ticks.again.wait(5.0)
    assert ticks.ticks >= 2


def test_the_heartbeat_stops_once_the_job_is_lost() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=0.0)
    steal(store)
    with Heartbeat(owned, 0.02, JobLogger("j1")):
        deadline = time.monotonic() + 5.0
        while not owned.lost and time.monotonic() < deadline:
            time.sleep(0.02)
    assert owned.lost


def test_progress_rides_on_the_next_write_at_most_one_per_interval() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=10.0)
    writes = store.calls["write"]
    clock.advance(0.5)
    owned.report_progress({"done": 1, "total": 4, "message": "a"})
    owned.report_progress({"done": 2, "total": 4, "message": "b"})  # the latest wins
    owned.tick()
    assert store.calls["write"] == writes  # within the write interval: kept for later
    clock.advance(0.5)
    owned.tick()  # one write, though no heartbeat was due yet
    assert store.calls["write"] == writes + 1
    assert store.read("j1").record["progress"] == {"done": 2, "total": 4, "message": "b"}
    clock.advance(1.0)
    owned.tick()
    assert store.calls["write"] == writes + 1  # nothing new to say: no write


def test_progress_is_folded_into_a_checkpoint_and_fenced_like_it() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    owned.report_progress({"done": 1, "total": 2, "message": None})
    clock.advance(2.0)
    writes = store.calls["write"]
    assert owned.checkpoint("s0", 1, {}) is True
    assert store.calls["write"] == writes + 1  # one write carries both
    assert store.read("j1").record["progress"]["done"] == 1
    steal(store)
    owned.report_progress({"done": 2, "total": 2, "message": None})
    clock.advance(2.0)
    with pytest.raises(OwnerLost):
        owned.checkpoint("s1", 2, {})
    assert store.read("j1").record["progress"]["done"] == 1  # a lost owner's never lands


# --- a pipeline's checkpoint interval (Pipeline.checkpoint_every_s)


def test_coalesced_checkpoints_wait_for_their_interval_then_one_write_carries_them() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=10.0)
    owned.coalesce_checkpoints(3.0)
    writes = store.calls["write"]
    clock.advance(1.2)
    assert owned.checkpoint("s0", 1, {"n": 1}) is False  # past the write interval, not 3 s
    clock.advance(1.2)
    assert owned.checkpoint("s1", 2, {"n": 2}) is False
    owned.tick()
    assert store.calls["write"] == writes  # 2.4 s since the claim's write
    clock.advance(0.6)
    owned.tick()
    assert store.calls["write"] == writes + 1  # one write for both boundaries
    assert job_queue.checkpoint_of(store.read("j1").record) == (2, {"n": 2})


def test_a_due_heartbeat_carries_a_pending_checkpoint() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=5.0)
    owned.coalesce_checkpoints(60.0)
    owned.checkpoint("s0", 1, {"n": 1})
    clock.advance(5.0)
    owned.tick()
    assert not owned.has_pending
    assert job_queue.checkpoint_of(store.read("j1").record) == (1, {"n": 1})


def test_a_coalesced_checkpoint_goes_with_a_hand_back_and_no_interval_goes_below_a_second() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock)
    owned.coalesce_checkpoints(0.1)
    assert owned.checkpoint_every_s == 1.0  # the record's own write interval stands
    owned.coalesce_checkpoints(30.0)
    clock.advance(2.0)
    assert owned.checkpoint("s0", 1, {"n": 1}) is False
    owned.finish(lambda job: job_queue.handback_fields(job, clock(), max_attempts=3), "handed back")
    job = store.read("j1").record
    assert job["status"] == JobStatus.QUEUED and job_queue.checkpoint_of(job) == (1, {"n": 1})


def test_progress_waits_for_a_pipeline_s_checkpoint_interval_and_rides_with_its_write() -> None:
    store, clock = MemoryStore(), Clock(START)
    owned = claimed(store, clock, heartbeat_s=10.0)
    owned.coalesce_checkpoints(3.0)
    writes = store.calls["write"]
    clock.advance(1.2)
    owned.checkpoint("s0", 1, {"n": 1})
    owned.report_progress({"done": 1, "total": 3, "message": None})
    owned.tick()
    assert store.calls["write"] == writes  # a progress report alone waits for the interval
    clock.advance(1.8)
    owned.tick()
    assert store.calls["write"] == writes + 1  # one write: the checkpoint and the progress
    job = store.read("j1").record
    assert job["progress"]["done"] == 1 and job_queue.checkpoint_of(job) == (1, {"n": 1})
