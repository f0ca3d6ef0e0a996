"""shared.drain: the gate's rate limit and backlog window, what counts as overdue,
and drains run through handle_delivery on MemoryStore with an injected clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, records
from shared.drain import DrainGate, drain, overdue
from shared.errors import Unavailable
from shared.jobs import JobStatus
from shared.outcome import Outcome, OutcomeKind
from shared.slots import Slots
from shared.storage_memory import MemoryStore
from tests.unit.unit_support import Clock, handle, settings, submit

# --- the gate


def test_the_gate_lets_one_listing_through_per_interval() -> None:
    gate = DrainGate()
    assert gate.try_enter(10.0, now_s=100.0)
    assert not gate.try_enter(10.0, now_s=105.0)
    assert gate.try_enter(10.0, now_s=110.0)


def test_a_refusal_opens_a_backlog_window_that_a_clear_or_time_closes() -> None:
    gate = DrainGate()
    assert not gate.backlogged(30.0, now_s=0.0)
    gate.note_refusal(now_s=100.0)
    assert gate.backlogged(30.0, now_s=129.0)
    assert not gate.backlogged(30.0, now_s=130.0)
    gate.note_refusal(now_s=200.0)
    gate.clear_backlog()
    assert not gate.backlogged(30.0, now_s=201.0)


# --- one drain, called directly


def test_a_listing_outage_drains_nothing_and_does_not_raise() -> None:
    store = MemoryStore()
    store.inject_failure("list", Unavailable("503 from storage"))
    taken: list[str] = []

    def take(job_id: str, stored: Any) -> Outcome:
        taken.append(job_id)
        return Outcome(job_id, OutcomeKind.DONE)

    assert drain(store, settings(drain_max_jobs=3), Clock(), take, DrainGate()) == []
    assert taken == []


def test_a_bug_in_the_listing_is_not_swallowed() -> None:
    store = MemoryStore()
    store.inject_failure("list", TypeError("a bug"))
    with pytest.raises(TypeError):
        drain(store, settings(drain_max_jobs=3), Clock(), lambda *_: None, DrainGate())


def test_the_drain_skips_the_request_s_own_job_and_lost_races() -> None:
    store = MemoryStore()
    clock = Clock()
    own = submit(store, now=clock())
    other = submit(store, now=clock())
    clock.advance(60)
    seen: list[str] = []

    def take(job_id: str, stored: Any) -> Outcome:
        seen.append(job_id)
        return Outcome(job_id, OutcomeKind.RACED)

    outcomes = drain(store, settings(drain_max_jobs=3), clock, take, DrainGate(), skip=own)
    assert seen == [other] and outcomes == []  # a lost race is not reported as drained


# --- through handle_delivery


def test_drain_runs_overdue_jobs_in_the_same_slot_and_is_rate_limited() -> None:
    store = MemoryStore()
    clock = Clock()
    lost_doorbell = submit(store, now=clock())
    clock.advance(60)  # its marker and record are a minute old now
    old = clock() - timedelta(seconds=60)
    fresh = submit(store, now=clock())
    trigger = submit(store, now=clock())
    s = settings(drain_max_jobs=3)
    gate = DrainGate()
    outcome = handle(trigger, store, s, clock, gate=gate)
    assert outcome.kind == OutcomeKind.DONE
    assert [(d.job_id, d.kind) for d in outcome.drained] == [(lost_doorbell, OutcomeKind.DONE)]
    assert store.read(fresh).record["status"] == "queued"  # its doorbell is on the way
    another = submit(store, now=old)
    assert handle(fresh, store, s, clock, gate=gate).drained == []  # gate: listed just now
    assert store.read(another).record["status"] == "queued"


def test_in_a_backlog_a_freed_slot_takes_due_jobs_at_once() -> None:
    store = MemoryStore()
    clock = Clock()
    waiting = [submit(store, now=clock()) for _ in range(3)]  # fresh: doorbells held back
    trigger = submit(store, now=clock())
    gate = DrainGate()
    s = settings(drain_max_jobs=3, max_concurrent=1)
    slots = Slots(1)
    with slots.try_acquire():  # this instance is full: the next doorbell is refused
        assert handle(waiting[0], store, s, clock, gate=gate, slots=slots).kind == OutcomeKind.BUSY
    assert gate.backlogged(s.stale_seconds)
    outcome = handle(trigger, store, s, clock, gate=gate, slots=slots)
    assert outcome.kind == OutcomeKind.DONE
    assert sorted(d.job_id for d in outcome.drained) == sorted(waiting)
    assert all(store.read(j).record["status"] == "done" for j in waiting)
    assert not gate.backlogged(s.stale_seconds, now_s=time.monotonic() + s.stale_seconds)


def test_a_backlog_drain_that_sees_the_whole_index_with_nothing_due_ends_the_backlog() -> None:
    store = MemoryStore()
    clock = Clock()
    trigger = submit(store, now=clock())
    gate = DrainGate()
    gate.note_refusal()
    s = settings(drain_max_jobs=3)
    outcome = handle(trigger, store, s, clock, gate=gate)
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    assert not gate.backlogged(s.stale_seconds)  # later slots skip the listing


def test_drain_takes_at_most_its_budget() -> None:
    store = MemoryStore()
    clock = Clock()
    for _ in range(4):
        submit(store, now=clock())
    clock.advance(60)
    trigger = submit(store, now=clock())
    outcome = handle(trigger, store, settings(drain_max_jobs=2), clock)
    assert len(outcome.drained) == 2
    assert all(d.kind == OutcomeKind.DONE for d in outcome.drained)


def test_drain_reads_no_record_whose_marker_is_too_young_to_be_overdue() -> None:
    store = MemoryStore()
    clock = Clock()
    for _ in range(3):
        submit(store, now=clock())
    trigger = submit(store, now=clock())
    store.calls.clear()
    outcome = handle(trigger, store, settings(drain_max_jobs=3), clock)
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    assert store.calls["read"] == 1  # the trigger's own record only
    assert store.calls["list"] == 1


def test_overdue_policy() -> None:
    s = settings()
    now = datetime.now(UTC)
    rec = records.new_record("a", "demo", {}, now - timedelta(seconds=20))
    assert overdue(rec, now, s)  # queued and due for more than stale_s / 2
    assert not overdue({**rec, "updated_at": job_queue.format_time(now)}, now, s)
    running = {**rec, **job_queue.claim_fields(rec, "o", now - timedelta(seconds=20))}
    assert not overdue(running, now, s)  # running and fresh
    assert overdue(running, now + timedelta(seconds=15), s)
    assert not overdue({**rec, "status": JobStatus.DONE}, now, s)


def test_a_drain_error_does_not_fail_the_request() -> None:
    class Flaky(MemoryStore):
        def read(self, job_id: str) -> Any:
            if job_id == "broken-job":
                raise Unavailable("storage hiccup")
            return super().read(job_id)

    store = Flaky()
    clock = Clock()
    store.add_pending("broken-job")
    trigger = submit(store, now=clock())
    outcome = handle(trigger, store, settings(drain_max_jobs=3), clock)
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
