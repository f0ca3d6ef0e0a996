"""The owner's handle (shared.claim.owned) at its edges, with the clock in the test's hands:
the heartbeat tick, write coalescing, fencing and closing, as `make mutate` asked
(the surviving mutants these kill; test_owned.py covers the common paths). The
heartbeat was hidden by the demo's check() calls (issue 16);
tests/integration/test_blocking_stage.py proves it over HTTP."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared import job_queue, records
from shared.claim.owned import Heartbeat, OwnedRecord, OwnerLost
from shared.errors import LostRace, Unavailable
from shared.logs import JobLogger
from shared.storage import Stored
from shared.stores.memory import MemoryStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def claimed(store: MemoryStore, clock: Clock, job_id: str = "j1") -> Stored:
    store.create(records.new_record(job_id, "demo", {}, clock()))
    stored = store.read(job_id)
    fields = job_queue.claim_fields(stored.record, "owner-1", clock())
    return store.update({**stored.record, **fields}, stored.generation)


def owned(
    store: MemoryStore, clock: Clock, *, min_interval_s: float = 1.0, heartbeat_s: float = 10.0
) -> OwnedRecord:
    return OwnedRecord(
        store,
        claimed(store, clock),
        owner="owner-1",
        attempt=1,
        clock=clock,
        min_interval_s=min_interval_s,
        heartbeat_s=heartbeat_s,
        log=JobLogger("j1", "owner-1", 1),
    )


def test_the_intervals_are_kept_as_given_and_never_negative() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=0.25, heartbeat_s=0.5)
    assert (handle.min_interval_s, handle.heartbeat_s) == (0.25, 0.5)
    handle = owned(MemoryStore(), clock, min_interval_s=-1, heartbeat_s=-1)
    assert (handle.min_interval_s, handle.heartbeat_s) == (0.0, 0.0)
    assert handle.writes == 0 and not handle.lost and not handle.has_pending


def test_a_tick_proves_life_once_the_heartbeat_interval_passed_and_not_before() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, heartbeat_s=10.0)
    generation = handle.stored.generation
    clock.advance(9.9)
    handle.tick()
    assert handle.writes == 0 and handle.stored.generation == generation
    clock.advance(0.1)  # exactly the interval
    handle.tick()
    assert handle.writes == 1
    record = store.read("j1").record
    assert record["updated_at"] == job_queue.format_time(clock())
    assert record["status"] == "running" and record["owner"] == "owner-1"
    assert store.read("j1").generation == handle.stored.generation != generation
    handle.tick()  # just written: nothing due
    assert handle.writes == 1
    clock.advance(10.0)
    handle.tick()
    assert handle.writes == 2  # one more per write, counted


def test_a_checkpoint_within_the_interval_waits_for_the_tick() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=1.0, heartbeat_s=10.0)
    state = {"n": 1, "deep": {"v": 1}}
    assert handle.checkpoint("s0", 1, state, ["outputs/j1/1/a"]) is False
    state["n"] = 2  # the next stage goes on mutating the state: the pending copy must not move
    state["deep"]["v"] = 2
    assert handle.has_pending and handle.writes == 0
    clock.advance(0.5)
    handle.tick()
    assert handle.has_pending and handle.writes == 0
    clock.advance(0.5)  # exactly min_interval since the claim
    handle.tick()
    assert not handle.has_pending and handle.writes == 1
    checkpoint = store.read("j1").record["checkpoint"]
    expected = {"n": 1, "deep": {"v": 1}}
    assert checkpoint == {"next_stage": 1, "state": expected, "outputs": ["outputs/j1/1/a"]}


def test_a_due_checkpoint_is_written_at_once() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=1.0)
    clock.advance(1.0)
    assert handle.checkpoint("s0", 1, {}) is True
    assert not handle.has_pending and handle.writes == 1


def test_a_transient_error_keeps_the_checkpoint_pending_for_the_next_tick() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=0.0)
    store.inject_failure("write", Unavailable("503"))
    assert handle.checkpoint("s0", 1, {"a": 1}) is False
    assert handle.has_pending and handle.writes == 0 and not handle.lost
    store.inject_failure("write", Unavailable("503"))
    handle.tick()  # the tick retries, and a transient error does not escape it
    assert handle.has_pending
    handle.tick()
    assert not handle.has_pending and handle.writes == 1
    assert store.read("j1").record["checkpoint"]["state"] == {"a": 1}


def test_the_tick_flushes_a_checkpoint_rather_than_a_bare_heartbeat() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=1.0, heartbeat_s=1.0)
    handle.checkpoint("s0", 1, {})
    clock.advance(1.0)
    handle.tick()
    assert handle.writes == 1
    assert store.read("j1").record["history"][-1]["event"] == "checkpoint"


def test_a_lost_race_marks_the_handle_lost_for_good() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, heartbeat_s=1.0)
    stored = store.read("j1")
    store.update({**stored.record, "stage": "someone else"}, stored.generation)
    clock.advance(1.0)
    with pytest.raises(OwnerLost):  # the heartbeat meets the other writer's generation
        handle.tick()
    assert handle.lost
    calls = sum(store.calls.values())
    handle.tick()  # lost: no more storage calls
    with pytest.raises(OwnerLost, match="attempt 1 of j1 was lost"):
        handle.checkpoint("s0", 1, {})
    with pytest.raises(OwnerLost):
        handle.confirm(0.0)
    assert sum(store.calls.values()) == calls


def test_the_owner_lost_error_carries_the_storage_reason() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=0.0)
    store.inject_failure("write", LostRace("record j1 changed since generation 2"))
    with pytest.raises(OwnerLost, match="record j1 changed since generation 2"):
        handle.finish(lambda job: job_queue.done_fields(job, clock(), {}), "done")


def test_confirm_is_free_while_the_last_proof_is_fresh_and_fences_after() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock)
    clock.advance(5.0)
    handle.confirm(5.0)  # exactly max_age: still fresh
    assert handle.writes == 0
    clock.advance(0.1)
    handle.confirm(5.0)
    assert handle.writes == 1
    assert store.read("j1").record["updated_at"] == job_queue.format_time(clock())


def test_finish_closes_the_handle_and_folds_a_pending_checkpoint() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=10.0)
    handle.checkpoint("s0", 1, {"k": "v"})
    assert handle.has_pending
    handle.finish(
        lambda job: job_queue.requeue_fields(job, clock(), delay_s=0.0), "requeued", fold=True
    )
    record = store.read("j1").record
    assert record["status"] == "queued" and record["checkpoint"]["state"] == {"k": "v"}
    assert not handle.has_pending and handle.writes == 1
    with pytest.raises(OwnerLost, match="already finished"):
        handle.checkpoint("s1", 2, {})
    calls = sum(store.calls.values())
    clock.advance(100)
    handle.tick()  # closed: the heartbeat writes nothing more
    assert sum(store.calls.values()) == calls


def test_finish_without_fold_drops_the_pending_checkpoint() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, min_interval_s=10.0)
    handle.checkpoint("s0", 1, {"k": "v"})
    handle.finish(lambda job: job_queue.done_fields(job, clock(), {"r": 1}), "done", fold=False)
    record = store.read("j1").record
    assert record["status"] == "done" and record["checkpoint"]["state"] == {}


def test_close_stops_every_later_write() -> None:
    store, clock = MemoryStore(), Clock()
    handle = owned(store, clock, heartbeat_s=1.0)
    handle.close()
    clock.advance(5.0)
    handle.tick()
    assert handle.writes == 0
    with pytest.raises(OwnerLost, match="already finished"):
        handle.confirm(0.0)


class FakeOwned:
    """Counts ticks; raises what it is told to, in order."""

    def __init__(self, errors: list[BaseException | None]) -> None:
        self.errors = errors
        self.ticks = 0
        self.done = threading.Event()

    def tick(self) -> None:
        self.ticks += 1
        error = self.errors.pop(0) if self.errors else None
        if not self.errors:
            self.done.set()
        if error is not None:
            raise error


def test_the_heartbeat_thread_survives_transient_errors_and_stops_when_lost() -> None:
    fake = FakeOwned([Unavailable("503"), None, OwnerLost("gone")])
    beat = Heartbeat(fake, 0.01, JobLogger("j1"))  # type: ignore[arg-type]
    assert beat._thread.daemon and beat._thread.name == "reclaim-heartbeat"
    with beat:
        assert fake.done.wait(5)
        beat._thread.join(5)
        assert not beat._thread.is_alive()  # OwnerLost ended it, before __exit__
    assert fake.ticks == 3


def test_the_heartbeat_thread_ticks_until_the_job_ends() -> None:
    fake = FakeOwned([None] * 3)
    with Heartbeat(fake, 0.01, JobLogger("j1")):  # type: ignore[arg-type]
        assert fake.done.wait(5)
    ticks = fake.ticks
    assert ticks >= 3
    threading.Event().wait(0.05)
    assert fake.ticks == ticks  # stopped with the job
