"""The runner and the drain at their edges: what a stage is handed, what a failure
records, when a zombie is fenced, what the drain reads. Each test here kills
mutants that `make mutate` showed no other fast test noticed. MemoryStore, clocks
injected."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue
from shared.claim import runner, stage_outputs
from shared.claim.drain import BACKLOG_READS, DrainGate, _too_young, drain, overdue
from shared.errors import PermanentError, Unavailable
from shared.features.table import context
from shared.outcome import Outcome, OutcomeKind
from shared.pipelines import StageContext
from shared.storage import PendingEntry
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import (
    Bell,
    Clock,
    handle,
    pipeline,
    settings,
    starved_slots,
    submit,
)

# --------------------------------------------------------------------------- the stage


def test_a_stage_gets_the_payload_the_store_and_a_logger() -> None:
    seen: dict[str, Any] = {}

    def stage(ctx: StageContext) -> None:
        seen.update(payload=ctx.payload, store=ctx.store)
        ctx.log.info("hello")
        ctx.result["ok"] = True

    store = MemoryStore()
    job_id = submit(store, pipeline([("only", stage)]), {"k": [1, 2]})
    outcome = handle(job_id, store, settings())
    assert outcome.kind == OutcomeKind.DONE and outcome.job_id == job_id
    assert seen == {"payload": {"k": [1, 2]}, "store": store}


def test_the_claim_names_its_owner_in_the_record_and_the_outcome() -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("only", lambda ctx: None)]))
    outcome = handle(job_id, store, settings())
    record = store.read(job_id).record
    claimed = [e for e in record["history"] if e["event"] == "claimed"]
    assert outcome.owner and record["owner"] == outcome.owner == claimed[0]["owner"]
    assert outcome.owner.startswith("test.")


def test_a_checkpoint_names_the_stage_that_finished() -> None:
    store = MemoryStore()
    name = pipeline([("first", lambda ctx: None), ("second", lambda ctx: 1 / 0)])
    job_id = submit(store, name)
    handle(job_id, store, settings(min_write_interval_seconds=0.0, max_attempts=5))
    record = store.read(job_id).record
    entry = next(e for e in record["history"] if e["event"] == "checkpoint")
    assert (entry["stage"], entry["next_stage"]) == ("first", 1)


def test_a_failed_stage_leaves_the_saved_state_as_it_was() -> None:
    """A stage that mutates nested state and then fails must not leak its half-done
    changes into the requeue write: the next attempt resumes from the saved boundary."""

    def mutate_then_fail(ctx: StageContext) -> None:
        ctx.state["nested"]["n"] = 99
        raise RuntimeError("half done")

    store = MemoryStore()
    job_id = submit(store, pipeline([("a", lambda c: None), ("b", mutate_then_fail)]))
    stored = store.read(job_id)
    checkpoint = {"next_stage": 1, "state": {"nested": {"n": 1}}}
    store.update({**stored.record, "checkpoint": checkpoint}, stored.generation)
    outcome = handle(job_id, store, settings(max_attempts=5))
    assert outcome.kind == OutcomeKind.REQUEUED
    assert store.read(job_id).record["checkpoint"]["state"] == {"nested": {"n": 1}}


def test_a_checkpoint_past_the_last_stage_finishes_without_running_any() -> None:
    ran: list[str] = []
    store = MemoryStore()
    job_id = submit(store, pipeline([("a", lambda c: ran.append("a"))]))
    stored = store.read(job_id)
    checkpoint = {"next_stage": 7, "state": {}}
    store.update({**stored.record, "checkpoint": checkpoint}, stored.generation)
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    assert ran == []


def test_a_permanent_error_records_the_stage_and_attempt() -> None:
    def refuse(ctx: StageContext) -> None:
        raise PermanentError("no such input")

    store = MemoryStore()
    job_id = submit(store, pipeline([("fetch", refuse)]))
    outcome = handle(job_id, store, settings())
    error = store.read(job_id).record["error"]
    assert outcome.kind == OutcomeKind.FAILED and outcome.detail == "no such input"
    assert (error["stage"], error["attempt"], error["type"]) == ("fetch", 1, "PermanentError")


def test_the_last_attempt_fails_with_the_stage_errors_own_type() -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("calc", lambda ctx: 1 / 0)]))
    outcome = handle(job_id, store, settings(max_attempts=1))
    error = store.read(job_id).record["error"]
    assert outcome.kind == OutcomeKind.FAILED
    assert (error["stage"], error["type"], error["retryable"]) == (
        "calc",
        "ZeroDivisionError",
        False,
    )


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("left", "plain"),
    [
        ({"state": {"x": math.inf}}, False),
        ({"result": {"x": math.nan}}, False),
        ({"state": {"deep": _nested(62 - 1)}}, True),  # state at level 3: 62 levels of its own
        ({"state": {"deep": _nested(62)}}, False),
    ],
)
def test_a_stage_must_leave_state_and_result_the_record_can_hold(
    left: dict[str, Any], plain: bool
) -> None:
    def stage(ctx: StageContext) -> None:
        ctx.state.update(left.get("state", {}))
        ctx.result.update(left.get("result", {}))

    store = MemoryStore()
    job_id = submit(store, pipeline([("s", stage), ("t", lambda c: None)]))
    outcome = handle(job_id, store, settings(max_attempts=1, min_write_interval_seconds=0.0))
    if plain:
        assert outcome.kind == OutcomeKind.DONE
        return
    assert outcome.kind == OutcomeKind.FAILED  # a stage error, not a crash outside the mapping
    error = store.read(job_id).record["error"]
    assert "the record cannot hold" in error["message"] and error["stage"] == "s"
    assert ("state" in error["message"]) == ("state" in left)


# --------------------------------------------------------------------------- fencing


def test_a_zombie_is_fenced_before_its_output_once_half_a_stale_period_passed() -> None:
    """After 0.6 stale periods without a write, an output first proves ownership; a
    re-claim by someone else in between makes the output refused and the job lost."""
    clock = Clock(datetime(2026, 2, 1, tzinfo=UTC))
    store = MemoryStore()
    s = settings(stale_seconds=30.0)

    def stage(ctx: StageContext) -> None:
        clock.advance(0.6 * s.stale_seconds)
        stored = store.read(ctx.job_id)
        taken = job_queue.claim_fields(stored.record, "someone-else", clock())
        store.update({**stored.record, **taken}, stored.generation)
        ctx.outputs.write("out.txt", "zombie")

    job_id = submit(store, pipeline([("s", stage)]))
    assert handle(job_id, store, s, clock).kind == OutcomeKind.LOST
    assert store.names(f"outputs/{job_id}/") == []


@pytest.mark.parametrize(
    ("data", "content_type", "stored_type"),
    [
        ({"b": 1, "a": 2}, None, "application/json"),
        ("text", None, "text/plain; charset=utf-8"),
        (b"\x00\x01", None, "application/octet-stream"),
        ("a,b", "text/csv", "text/csv"),
    ],
)
def test_outputs_are_typed_by_what_the_stage_wrote(
    data: Any, content_type: str | None, stored_type: str
) -> None:
    def stage(ctx: StageContext) -> None:
        ctx.result["name"] = ctx.outputs.write("o", data, content_type)

    store = MemoryStore()
    job_id = submit(store, pipeline([("s", stage)]))
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    obj = store.raw(store.bucket_name, f"outputs/{job_id}/1/o")
    assert obj is not None and obj.content_type == stored_type
    if isinstance(data, dict):
        assert obj.data == b'{\n  "a": 2,\n  "b": 1\n}'  # stable bytes: a re-run writes the same


def test_an_output_that_is_not_json_is_a_stage_error() -> None:
    def stage(ctx: StageContext) -> None:
        ctx.outputs.write("o", {"x": math.nan})

    store = MemoryStore()
    job_id = submit(store, pipeline([("s", stage)]))
    assert handle(job_id, store, settings(max_attempts=1)).kind == OutcomeKind.FAILED
    assert store.names(f"outputs/{job_id}/") == []
    with pytest.raises(TypeError, match="not int"):
        stage_outputs.encode_output(7, None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- deciding


def test_a_busy_answer_asks_for_a_redelivery_after_a_quarter_stale_period() -> None:
    store = MemoryStore()
    job_id = submit(store)
    full = runner.Slots(1)
    held = full.try_acquire()
    assert held is not None
    for stale, expected in ((8.0, 2.0), (3.0, 1.0), (400.0, 30.0)):
        outcome = handle(job_id, store, settings(stale_seconds=stale), slots=full)
        assert outcome.kind == "busy" and outcome.retry_after_s == expected
    held.release()


def test_skipped_doorbells_say_why() -> None:
    clock = Clock(datetime(2026, 2, 1, tzinfo=UTC))
    store = MemoryStore()
    later = (clock() + timedelta(seconds=60)).isoformat()
    waiting = submit(store, now=clock(), not_before=later)
    outcome = handle(waiting, store, settings(), clock)
    assert (outcome.kind, outcome.detail, outcome.job_id) == (
        OutcomeKind.SKIPPED,
        "backing off",
        waiting,
    )
    running = submit(store, now=clock(), status="running", attempts=1, owner="x")
    outcome = handle(running, store, settings(), clock)
    assert (outcome.kind, outcome.detail) == (OutcomeKind.SKIPPED, "running and fresh")
    done = submit(store, now=clock(), status="done")
    assert handle(done, store, settings(), clock).detail == "done"


def test_a_stale_exhausted_job_without_its_own_limit_is_failed_by_the_default() -> None:
    clock = Clock(datetime(2026, 2, 1, tzinfo=UTC))
    store = MemoryStore()
    old = clock() - timedelta(hours=1)
    job_id = submit(store, now=old, status="running", attempts=2, owner="gone")
    outcome = handle(job_id, store, settings(max_attempts=2), clock)
    assert outcome.kind == "recovered" and outcome.detail == "fail"
    assert store.read(job_id).record["status"] == "failed"
    assert store.list_pending() == []


def test_claimability_uses_the_configured_clock_skew() -> None:
    """A running record dated 100 s ahead: believed (fresh) with the default skew of
    300 s, undated (stale, so claimable) with a skew of 10 s."""
    clock = Clock(datetime(2026, 2, 1, tzinfo=UTC))
    store = MemoryStore()
    ahead = clock() + timedelta(seconds=100)
    job_id = submit(store, pipeline([("s", lambda c: None)]), now=ahead)
    stored = store.read(job_id)
    store.update(
        {**stored.record, "status": "running", "attempts": 1, "owner": "x"}, stored.generation
    )
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.SKIPPED
    assert handle(job_id, store, settings(clock_skew_seconds=10.0), clock).kind == OutcomeKind.DONE


def test_the_instance_id_names_host_and_process() -> None:
    import os

    ident = runner.instance_id()
    assert isinstance(ident, str) and f"-{os.getpid()}-" in ident
    assert runner.instance_id() == ident
    assert runner.new_owner("inst").startswith("inst.")


# --------------------------------------------------------------------------- the drain

S = settings(stale_seconds=60.0, drain_max_jobs=2)
T0 = datetime(2026, 2, 1, tzinfo=UTC)


def test_a_marker_younger_than_half_a_stale_period_is_too_young() -> None:
    assert _too_young(PendingEntry("j", T0), T0 + timedelta(seconds=29), S)
    assert not _too_young(PendingEntry("j", T0), T0 + timedelta(seconds=30), S)
    assert not _too_young(PendingEntry("j", None), T0, S)  # undatable: read it


def test_overdue_means_stale_running_or_queued_for_half_a_stale_period() -> None:
    queued = {"id": "j", "status": "queued", "attempts": 0, "updated_at": T0.isoformat()}
    assert not overdue(queued, T0 + timedelta(seconds=29), S)
    assert overdue(queued, T0 + timedelta(seconds=31), S)
    assert overdue(queued, T0 + timedelta(seconds=1), S, backlogged=True)
    running = {**queued, "status": "running", "attempts": 1}
    assert not overdue(running, T0 + timedelta(seconds=59), S)
    assert overdue(running, T0 + timedelta(seconds=61), S)
    ahead = {**running, "updated_at": (T0 + timedelta(seconds=100)).isoformat()}
    near = settings(stale_seconds=60.0, clock_skew_seconds=10.0)
    assert overdue(ahead, T0, near)  # beyond the configured skew: undated, stale


class Taker:
    def __init__(self) -> None:
        self.taken: list[str] = []

    def __call__(self, job_id: str, stored: Any) -> Outcome:
        assert stored.record["id"] == job_id
        self.taken.append(job_id)
        return Outcome(job_id, OutcomeKind.DONE)


def _queued(store: MemoryStore, n: int, at: datetime) -> list[str]:
    return [submit(store, now=at) for _ in range(n)]


def test_the_drain_takes_up_to_its_budget_and_never_the_job_just_run() -> None:
    store = MemoryStore()
    now = datetime.now(UTC)  # the markers are dated by the store's own clock
    ids = sorted(_queued(store, 4, now))
    take = Taker()
    got = drain(store, S, lambda: now + timedelta(seconds=45), take, DrainGate(), skip=ids[0])
    assert len(got) == S.drain_max_jobs == len(take.taken)
    assert ids[0] not in take.taken


def test_a_backlog_drain_takes_one_job_per_fresh_listing_until_none_is_due() -> None:
    store = MemoryStore()
    _queued(store, 60, T0)
    gate = DrainGate()
    gate.note_backlog()

    def run(job_id: str, stored: Any) -> Outcome:  # a job that ran leaves the index
        store.remove_pending(job_id)
        return Outcome(job_id, OutcomeKind.DONE)

    reads, lists = store.calls["read"], store.calls["list"]
    got = drain(store, settings(stale_seconds=60.0, drain_max_jobs=1), lambda: T0, run, gate)
    assert len(got) == 60  # not drain_max_jobs: a backlog drains while jobs are due
    assert store.calls["read"] - reads == 60  # every job is due: the first read finds it
    assert store.calls["list"] - lists == 61  # a fresh listing per job, and one finding none
    assert not gate.backlogged(60.0)  # the whole index held nothing due: the backlog is over


def test_a_failed_listing_drains_nothing_and_keeps_the_backlog() -> None:
    store = MemoryStore()
    _queued(store, 2, T0)
    store.inject_failure("list", Unavailable("outage"))
    gate = DrainGate()
    gate.note_backlog()
    assert drain(store, S, lambda: T0 + timedelta(hours=1), Taker(), gate) == []
    assert gate.backlogged(S.stale_seconds)  # not "the whole index was empty"


def test_a_raced_take_does_not_count_against_the_budget() -> None:
    store = MemoryStore()
    _queued(store, 3, T0)

    def take(job_id: str, stored: Any) -> Outcome:
        return Outcome(job_id, OutcomeKind.RACED)

    assert drain(store, S, lambda: T0 + timedelta(hours=1), take, DrainGate()) == []


def test_the_gate_rate_limits_listings() -> None:
    gate = DrainGate()
    assert gate.try_enter(15.0, now_s=100.0)
    assert not gate.try_enter(15.0, now_s=114.9)
    assert gate.try_enter(15.0, now_s=115.0)
    gate.note_backlog(now_s=200.0)
    assert gate.backlogged(60.0, now_s=259.9) and not gate.backlogged(60.0, now_s=260.0)
    gate.clear_backlog()
    assert not gate.backlogged(60.0, now_s=201.0)


def test_a_delivery_drains_other_overdue_jobs_in_its_slot() -> None:
    """handle_delivery drains in the slot it holds, skipping the job it just ran (the
    safety net's listing: freed slots wait for pushes)."""
    store = MemoryStore()
    old = T0 - timedelta(hours=1)
    name = pipeline([("s", lambda c: None)])
    first = submit(store, name, now=old)
    second = submit(store, name, now=old)
    clock = Clock(datetime.now(UTC) + timedelta(hours=1))  # markers dated by the store
    s = settings(drain_max_jobs=3)
    outcome = handle(first, store, s, clock, Bell(), slots=starved_slots())
    assert outcome.kind == OutcomeKind.DONE
    assert [d.job_id for d in outcome.drained] == [second]


def test_check_stops_a_stage_whose_job_was_taken_over() -> None:
    """ctx.check() proves ownership once half a stale period passed; a re-claim by
    someone else in between stops the stage (Stopped) and nothing more is written."""
    clock = Clock(datetime(2026, 2, 1, tzinfo=UTC))
    store = MemoryStore()
    s = settings(stale_seconds=30.0)
    reached: list[str] = []

    def stage(ctx: StageContext) -> None:
        clock.advance(0.6 * s.stale_seconds)
        stored = store.read(ctx.job_id)
        taken = job_queue.claim_fields(stored.record, "someone-else", clock())
        store.update({**stored.record, **taken}, stored.generation)
        ctx.check()
        reached.append("after check")

    job_id = submit(store, pipeline([("s", stage)]))
    assert handle(job_id, store, s, clock).kind == OutcomeKind.LOST
    assert reached == []
    assert store.read(job_id).record["owner"] == "someone-else"


def test_a_delivery_without_injected_slots_uses_the_processes_own() -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("s", lambda c: None)]))
    outcome = runner.handle_delivery(context(store, Bell(), settings()), job_id, owner="test")
    assert outcome.kind == OutcomeKind.DONE


def test_in_a_backlog_where_nothing_is_due_a_pass_reads_a_bounded_sample() -> None:
    store = MemoryStore()
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    for _ in range(60):
        submit(store, not_before=later)  # backing off: none is due
    gate = DrainGate()
    gate.note_backlog()
    before = store.calls["read"]
    s = settings(stale_seconds=60.0, drain_max_jobs=1)
    assert drain(store, s, lambda: datetime.now(UTC), Taker(), gate) == []
    assert store.calls["read"] - before == BACKLOG_READS
    assert gate.backlogged(s.stale_seconds)  # a sample, not the whole index: keep looking


def test_a_drain_that_meets_an_error_stops_quietly() -> None:
    store = MemoryStore()
    submit(store)
    store.inject_failure("read", RuntimeError("outage"))
    now = datetime.now(UTC) + timedelta(hours=1)
    assert drain(store, S, lambda: now, Taker(), DrainGate()) == []
