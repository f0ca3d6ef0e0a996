"""Terminal hooks (shared.finish) and gates (the claim): two seams of the feature table.

A hook that fails leaves the pending marker, and the sweep runs the hooks again; a gate that
decides answers the delivery before any claim write. Each test hands the queue a table of
its own (a value), as the front door hands down the real one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.jobs import JobStatus
from shared.outcome import Outcome, OutcomeKind
from shared.queue import Queue, parse_submission
from shared.seams import Context, Feature, Gate, Hook
from shared.storage import Stored, pending_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock

START = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def make_queue(
    hooks: tuple[Hook, ...] = (), gates: tuple[Gate, ...] = ()
) -> tuple[Queue, MemoryStore]:
    store = MemoryStore()
    settings = Settings.from_env({}, stale_seconds=30.0, drain_max_jobs=0)
    table = (Feature("test", terminal_hooks=hooks, gates=gates),)
    return Queue(store, Bell(), settings, clock=Clock(START), table=table), store


def run(queue: Queue, job_id: str) -> Outcome:
    queue.submit(parse_submission({"pipeline": "demo", "id": job_id}, queue.settings))
    return queue.handle_delivery(job_id, owner="me", slots=Slots(1), gate=DrainGate())


def test_hooks_see_the_terminal_record_in_order_before_the_marker_goes() -> None:
    seen: list[tuple[str, str, bool]] = []

    def hook(name: str) -> Hook:
        def step(ctx: Context, record) -> None:
            marked = pending_object(record["id"]) in ctx.store.names("pending/")  # type: ignore[attr-defined]
            seen.append((name, record["status"], marked))

        return step

    queue, _store = make_queue(hooks=(hook("first"), hook("second")))
    assert run(queue, "j1").kind == OutcomeKind.DONE
    assert seen == [("first", JobStatus.DONE, True), ("second", JobStatus.DONE, True)]
    assert queue.pending() == []
    # cancel runs them too
    queue.submit(parse_submission({"pipeline": "demo", "id": "j2"}, queue.settings))
    queue.cancel("j2", by="ann")
    assert seen[-1] == ("second", JobStatus.CANCELLED, True) and queue.pending() == []


def test_a_failed_hook_keeps_the_marker_and_the_sweep_runs_the_hooks_again() -> None:
    calls: list[str] = []

    def flaky(_ctx: Context, record) -> None:
        calls.append(record["id"])
        if len(calls) == 1:
            raise RuntimeError("lost the answer")

    queue, _store = make_queue(hooks=(flaky,))
    assert run(queue, "j1").kind == OutcomeKind.DONE
    assert queue.pending() == ["j1"]  # left for the sweep
    result = queue.sweep_once()  # a sweep at that moment: the finisher may be on it still
    assert calls == ["j1"] and result.repaired == 0 and queue.pending() == ["j1"]
    queue.clock.advance(60)  # type: ignore[attr-defined]
    result = queue.sweep_once()  # the next run
    assert calls == ["j1", "j1"] and result.repaired == 1 and queue.pending() == []


def test_a_gate_that_decides_answers_before_any_claim() -> None:
    seen: list[str] = []

    def hold(_ctx: Context, stored: Stored, _now: datetime) -> Outcome | None:
        seen.append(str(stored.record["id"]))
        return Outcome(str(stored.record["id"]), OutcomeKind.SKIPPED, "held")

    queue, store = make_queue(gates=(hold,))
    outcome = run(queue, "j1")
    assert (outcome.kind, outcome.detail, seen) == (OutcomeKind.SKIPPED, "held", ["j1"])
    assert store.read("j1").record["status"] == JobStatus.QUEUED
    assert store.read("j1").record.get("attempts", 0) == 0


@pytest.mark.parametrize("decides", [False, True])
def test_gates_run_in_order_and_none_lets_the_claim_go_on(decides) -> None:
    order: list[str] = []

    def first(_ctx: Context, _stored: Stored, _now: datetime) -> Outcome | None:
        order.append("first")
        return Outcome("j1", OutcomeKind.SKIPPED, "first") if decides else None

    def second(_ctx: Context, _stored: Stored, _now: datetime) -> Outcome | None:
        order.append("second")
        return None

    queue, _store = make_queue(gates=(first, second))
    outcome = run(queue, "j1")
    assert order == (["first"] if decides else ["first", "second"])
    assert outcome.kind == (OutcomeKind.SKIPPED if decides else OutcomeKind.DONE)
