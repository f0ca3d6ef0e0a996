"""The runner's decisions on MemoryStore: claim, stages, checkpoints, coalescing,
fencing, requeue/fail/done and the drain. Clocks are injected where time matters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, records
from shared.claim import runner
from shared.claim.slots import Slots
from shared.errors import Unavailable
from shared.features.table import context
from shared.outcome import Outcome, OutcomeKind
from shared.pipelines import (
    PermanentError,
    Pipeline,
    StageContext,
    Stopped,
    get_pipeline,
    register,
)
from shared.storage import job_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import (
    Bell,
    Clock,
    events,
    handle,
    pending,
    pipeline,
    settings,
    submit,
    wall,
)

# --- deciding


def test_no_free_slot_is_busy_at_once_and_touches_nothing() -> None:
    store = MemoryStore()
    job_id = submit(store)
    slots = Slots(1)
    held = slots.try_acquire()
    assert held is not None
    before = dict(store.calls)
    outcome = handle(job_id, store, settings(), slots=slots)
    assert outcome.busy and outcome.retry_after_s and outcome.retry_after_s >= 1
    assert dict(store.calls) == before
    held.release()
    assert slots.try_acquire() is not None


def test_missing_record_is_acked() -> None:
    assert handle("no-such-job", MemoryStore(), settings()).kind == OutcomeKind.MISSING


def test_malformed_job_id_is_refused() -> None:
    with pytest.raises(records.InvalidInput):
        handle("../etc", MemoryStore(), settings())


def test_corrupt_record_is_acked_and_never_touched() -> None:
    store = MemoryStore()
    store.add_pending("broken")
    gen = store.put_raw("broken", b"{not json")
    outcome = handle("broken", store, settings())
    assert outcome.kind == OutcomeKind.CORRUPT
    raw = store.raw(store.bucket_name, job_object("broken"))
    assert raw is not None and raw.generation == gen and raw.data == b"{not json"
    assert pending(store) == ["broken"]


def test_happy_path_runs_to_done_and_drops_the_marker() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 3, "output": True})
    outcome = handle(job_id, store, settings())
    assert outcome.kind == OutcomeKind.DONE and outcome.attempt == 1
    assert outcome.owner and outcome.owner.startswith("test.")
    job = store.read(job_id).record
    assert job["status"] == "done" and job["attempts"] == 1
    assert [c["stage"] for c in job["result"]["completed"]] == [0, 1, 2]
    assert all(name.startswith(f"outputs/{job_id}/1/") for name in job["result"]["outputs"])
    assert events(store, job_id)[:2] == ["submitted", "claimed"]
    assert events(store, job_id)[-1] == "done"
    assert pending(store) == []


def test_duplicate_doorbell_of_a_finished_job_does_nothing() -> None:
    store = MemoryStore()
    job_id = submit(store)
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    gen = store.read(job_id).generation
    writes = store.calls["write"]
    outcome = handle(job_id, store, settings())
    assert outcome.kind == OutcomeKind.SKIPPED
    assert store.calls["write"] == writes and store.read(job_id).generation == gen


def test_duplicate_doorbell_of_a_running_fresh_job_is_acked() -> None:
    store = MemoryStore()
    clock = Clock()
    job_id = submit(store, now=clock())
    stored = store.read(job_id)
    store.update(
        {**stored.record, **job_queue.claim_fields(stored.record, "other", clock())},
        stored.generation,
    )
    outcome = handle(job_id, store, settings(), clock)
    assert outcome.kind == OutcomeKind.SKIPPED and outcome.detail == "running and fresh"
    assert store.read(job_id).record["owner"] == "other"


def test_backing_off_job_is_acked_until_due() -> None:
    store = MemoryStore()
    clock = Clock()
    not_before = job_queue.format_time(clock() + timedelta(seconds=60))
    job_id = submit(store, now=clock(), not_before=not_before)
    assert handle(job_id, store, settings(), clock).detail == "backing off"
    clock.advance(61)
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE


def test_stale_exhausted_job_is_failed_by_its_doorbell() -> None:
    store = MemoryStore()
    clock = Clock()
    job_id = submit(store, now=clock(), max_attempts=1)
    stored = store.read(job_id)
    store.update(
        {**stored.record, **job_queue.claim_fields(stored.record, "gone", clock())},
        stored.generation,
    )
    clock.advance(31)
    outcome = handle(job_id, store, settings(), clock)
    assert outcome.kind == OutcomeKind.RECOVERED and outcome.detail == "fail"
    assert store.read(job_id).record["status"] == "failed"


def test_concurrent_claims_have_exactly_one_winner() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 2, "sleep_s": 0.05})
    barrier = threading.Barrier(4)
    outcomes: list[Outcome] = []

    def go() -> None:
        barrier.wait()
        outcomes.append(handle(job_id, store, settings()))

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = sorted(o.kind for o in outcomes)
    assert kinds.count(OutcomeKind.DONE) == 1
    assert set(kinds) <= {OutcomeKind.DONE, OutcomeKind.RACED, OutcomeKind.SKIPPED}
    assert store.read(job_id).record["attempts"] == 1


def test_owner_ids_are_unique_per_claim() -> None:
    assert runner.new_owner("i") != runner.new_owner("i")
    assert runner.instance_id() == runner.instance_id()


# --- checkpoints and coalescing


def stepping(clock: Clock, n: int, step_s: float, calls: list[int]) -> str:
    def make(i: int) -> Callable[[StageContext], None]:
        def run(ctx: StageContext) -> None:
            calls.append(i)
            ctx.state[f"s{i}"] = ctx.attempt
            clock.advance(step_s)
            if i == n - 1:
                ctx.result["state"] = dict(ctx.state)

        return run

    return pipeline([(f"s{i}", make(i)) for i in range(n)])


@pytest.mark.parametrize(("step_s", "checkpoints"), [(0.1, 0), (0.4, 1), (2.0, 4)])
def test_boundary_writes_are_coalesced(step_s: float, checkpoints: int) -> None:
    store = MemoryStore()
    clock = Clock()
    name = stepping(clock, 5, step_s, [])
    job_id = submit(store, name, now=clock())
    writes = store.calls["write"]
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE
    # claim + the boundaries that came at least 1 s after the previous write + done
    assert store.calls["write"] - writes == 2 + checkpoints
    assert events(store, job_id).count("checkpoint") == checkpoints


@pytest.mark.parametrize(("every_s", "checkpoints"), [(None, 2), (3.0, 0)])
def test_a_pipeline_s_checkpoint_interval_coalesces_its_boundaries(
    every_s: float | None, checkpoints: int
) -> None:
    """Boundaries at 1.2 and 2.4 s: each its own write by default; with
    checkpoint_every_s=3 none is due before the job ends (done needs no checkpoint)."""
    store = MemoryStore()
    clock = Clock()
    steps = [1.2, 1.2, 0.0]

    def make(i: int) -> Callable[[StageContext], None]:
        def run(ctx: StageContext) -> None:
            ctx.state[f"s{i}"] = True
            clock.advance(steps[i])

        return run

    name = f"t-every-{every_s}-{records.new_job_id()[:8]}"
    stages = [(f"s{i}", make(i)) for i in range(3)]
    register(Pipeline(name, stages=stages, checkpoint_every_s=every_s))
    job_id = submit(store, name, now=clock())
    writes = store.calls["write"]
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE
    assert store.calls["write"] - writes == 2 + checkpoints  # claim, checkpoints, done
    assert events(store, job_id).count("checkpoint") == checkpoints


def test_a_deferred_checkpoint_is_flushed_by_the_heartbeat() -> None:
    store = MemoryStore()
    clock = Clock()
    seen: dict[str, Any] = {}

    def first(ctx: StageContext) -> None:
        ctx.state["first"] = True
        clock.advance(0.5)  # too soon after the claim: the boundary is deferred

    def second(ctx: StageContext) -> None:
        clock.advance(1.0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            checkpoint = store.read(ctx.job_id).record["checkpoint"]
            if checkpoint["next_stage"] == 1:
                seen.update(checkpoint)
                return
            time.sleep(0.02)

    name = pipeline([("first", first), ("second", second)])
    job_id = submit(store, name, now=clock())
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE
    version = get_pipeline(name).version_for({})
    assert seen == {
        "next_stage": 1,
        "state": {"first": True},
        "outputs": [],
        "version": version,
        "completed": ["first"],
    }


def test_resume_from_checkpoint_skips_finished_stages() -> None:
    store = MemoryStore()
    clock = Clock()
    calls: list[int] = []
    name = stepping(clock, 3, 0.0, calls)
    job_id = submit(
        store, name, now=clock(), checkpoint={"next_stage": 2, "state": {"s0": 1, "s1": 1}}
    )
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE
    assert calls == [2]
    assert store.read(job_id).record["result"]["state"] == {"s0": 1, "s1": 1, "s2": 1}


def test_stage_error_requeues_with_backoff_keeping_progress() -> None:
    store = MemoryStore()
    clock = Clock()
    calls: list[str] = []

    def ok(ctx: StageContext) -> None:
        calls.append("ok")
        ctx.state["ok"] = True

    def flaky(ctx: StageContext) -> None:
        calls.append("flaky")
        if ctx.attempt == 1:
            raise RuntimeError("transient")
        ctx.result["state"] = dict(ctx.state)

    job_id = submit(store, pipeline([("ok", ok), ("flaky", flaky)]), now=clock())
    s = settings(backoff_base_seconds=10.0, backoff_max_seconds=10.0)
    bell = Bell()
    outcome = handle(job_id, store, s, clock, bell)
    assert outcome.kind == OutcomeKind.REQUEUED
    job = store.read(job_id).record
    assert job["status"] == "queued" and job["owner"] is None
    assert job["error"]["type"] == "RuntimeError" and job["error"]["retryable"] is True
    assert job["error"]["stage"] == "flaky" and job["error"]["attempt"] == 1
    assert job["checkpoint"] == {  # folded
        "next_stage": 1,
        "state": {"ok": True},
        "outputs": [],
        "version": job["pipeline_version"],
        "completed": ["ok"],
    }
    assert job_queue.parse_time(job["not_before"]) is not None
    assert bell.rung == []  # backing off: the sweep or drain rings when due
    assert pending(store) == [job_id]
    clock.advance(11)
    assert handle(job_id, store, s, clock).kind == OutcomeKind.DONE
    assert calls == ["ok", "flaky", "flaky"]
    assert store.read(job_id).record["result"]["state"] == {"ok": True}


def test_done_record_lists_the_outputs_of_every_committed_stage() -> None:
    store = MemoryStore()
    clock = Clock()

    def first(ctx: StageContext) -> None:
        ctx.outputs.write("first.txt", "one")

    def second(ctx: StageContext) -> None:
        ctx.outputs.write("second.txt", f"attempt {ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("transient")

    job_id = submit(store, pipeline([("first", first), ("second", second)]), now=clock())
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.REQUEUED
    assert handle(job_id, store, settings(), clock).kind == OutcomeKind.DONE
    job = store.read(job_id).record
    # stage one committed in attempt 1; attempt 1's failed stage-two output is not a deliverable
    assert job["outputs"] == [f"outputs/{job_id}/1/first.txt", f"outputs/{job_id}/2/second.txt"]
    assert job["stage"] is None


def test_requeue_without_backoff_rings_at_once() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 1, "fail_at": 0, "fail_attempts": 1})
    bell = Bell()
    assert handle(job_id, store, settings(), bell=bell).kind == OutcomeKind.REQUEUED
    assert bell.rung == [job_id]


def test_last_attempt_error_fails_with_history() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 2, "fail_at": 1}, max_attempts=2)
    assert handle(job_id, store, settings()).kind == OutcomeKind.REQUEUED
    outcome = handle(job_id, store, settings())
    assert outcome.kind == OutcomeKind.FAILED and outcome.attempt == 2
    job = store.read(job_id).record
    assert job["status"] == "failed" and job["attempts"] == 2
    assert events(store, job_id).count("claimed") == 2
    assert "requeued" in events(store, job_id) and events(store, job_id)[-1] == "failed"
    assert pending(store) == []
    assert handle(job_id, store, settings()).kind == OutcomeKind.SKIPPED


def test_permanent_error_fails_at_once() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 2, "fail_at": 0, "permanent": True})
    assert handle(job_id, store, settings()).kind == OutcomeKind.FAILED
    job = store.read(job_id).record
    assert job["attempts"] == 1 and job["error"]["type"] == "PermanentError"
    assert job["error"]["retryable"] is False


def test_unknown_pipeline_is_handed_back_until_the_skew_bound_then_fails() -> None:
    """Rollout skew (shared.resume): no attempt spent while a revision may still bring
    the code; past RECLAIM_ROLLOUT_SKEW_SECONDS it fails, naming pipeline and revision."""
    store = MemoryStore()
    clock = Clock(datetime(2026, 7, 26, 10, 0, tzinfo=UTC))
    job_id = submit(store, "no-such-pipeline", now=clock())
    outcome = handle(job_id, store, settings(rollout_skew_seconds=60.0), clock)
    assert outcome.kind == OutcomeKind.DEFERRED and outcome.redeliver
    job = store.read(job_id).record
    assert job["status"] == "queued" and job["attempts"] == 0 and job["skew_since"]
    clock.advance(60.0)
    assert handle(job_id, store, settings(rollout_skew_seconds=60.0), clock).kind == "failed"
    job = store.read(job_id).record
    assert job["error"]["type"] == "PipelineUnavailable" and job["attempts"] == 0
    assert "'no-such-pipeline'" in job["error"]["message"] and "revision" in job["error"]["message"]


def test_bad_demo_payload_fails_permanently() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 0})
    assert handle(job_id, store, settings()).kind == OutcomeKind.FAILED


# --- fencing


def test_zombie_owner_commits_nothing_after_a_reclaim() -> None:
    """Attempt 1 pauses mid-stage past stale_s; attempt 2 is claimed and finishes;
    attempt 1 wakes up: its output is refused and no write of its lands."""
    store = MemoryStore()
    start = datetime.now(UTC)
    zombie_clock, winner_clock = Clock(start), Clock(start + timedelta(seconds=100))
    entered, release = threading.Event(), threading.Event()

    def work(ctx: StageContext) -> None:
        if ctx.attempt == 1:
            entered.set()
            release.wait(10)
        ctx.result["by"] = ctx.attempt
        ctx.result["out"] = ctx.outputs.write("out.txt", f"attempt {ctx.attempt}")

    job_id = submit(store, pipeline([("work", work)]), now=start)
    s = settings()
    zombie: list[Outcome] = []
    thread = threading.Thread(target=lambda: zombie.append(handle(job_id, store, s, zombie_clock)))
    thread.start()
    assert entered.wait(10)
    winner = handle(job_id, store, s, winner_clock)
    assert winner.kind == OutcomeKind.DONE and winner.attempt == 2
    final = store.read(job_id)
    zombie_clock.advance(100)  # the pause, as the zombie's clock sees it
    release.set()
    thread.join(10)
    assert zombie[0].kind == OutcomeKind.LOST and zombie[0].attempt == 1
    assert store.read(job_id).generation == final.generation
    assert final.record["result"] == {"by": 2, "out": f"outputs/{job_id}/2/out.txt"}
    assert store.names(f"outputs/{job_id}/") == [f"outputs/{job_id}/2/out.txt"]


def test_cancel_mid_stage_stops_the_owner() -> None:
    store = MemoryStore()
    entered = threading.Event()
    stopped: list[bool] = []

    def long(ctx: StageContext) -> None:
        entered.set()
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                ctx.check()
                time.sleep(0.01)
        except Stopped:
            stopped.append(True)
            raise

    job_id = submit(store, pipeline([("long", long)]))
    s = settings(stale_seconds=0.6, min_write_interval_seconds=0.05)
    out: list[Outcome] = []
    thread = threading.Thread(target=lambda: out.append(handle(job_id, store, s, wall)))
    thread.start()
    assert entered.wait(10)
    stored = store.read(job_id)
    now = datetime.now(UTC)
    store.update(
        {**stored.record, **job_queue.cancel_fields(stored.record, now, by="test")},
        stored.generation,
    )
    cancelled = store.read(job_id)
    thread.join(10)
    assert out[0].kind == OutcomeKind.LOST and stopped == [True]
    assert store.read(job_id) == cancelled
    assert cancelled.record["result"] is None


def test_heartbeat_keeps_a_long_stage_fresh() -> None:
    from shared import sweeper

    store = MemoryStore()
    job_id = submit(store, payload={"stages": 1, "sleep_s": 1.5})
    s = settings(stale_seconds=1.2, min_write_interval_seconds=0.05)
    out: list[Outcome] = []
    thread = threading.Thread(target=lambda: out.append(handle(job_id, store, s, wall)))
    thread.start()
    rescued = 0
    while thread.is_alive():
        rescued += sweeper.run_once(context(store, Bell(), s)).rescued
        time.sleep(0.05)
    thread.join()
    assert rescued == 0 and out[0].kind == OutcomeKind.DONE
    job = store.read(job_id).record
    assert job["attempts"] == 1 and job["rescues"] == 0


def test_outputs_are_refused_once_lost() -> None:
    store = MemoryStore()
    refused: list[bool] = []

    def stage(ctx: StageContext) -> None:
        stored = store.read(ctx.job_id)
        store.update(
            {**stored.record, "updated_at": stored.record["updated_at"]}, stored.generation
        )  # someone else wrote: our generation is stale
        try:
            ctx.outputs.write("x.txt", "x")
        except Stopped:
            refused.append(True)
        raise PermanentError("must not be recorded")

    job_id = submit(store, pipeline([("stage", stage)]))
    # stale_s 0 makes every output write prove ownership first
    outcome = handle(job_id, store, settings(stale_seconds=0.0001), wall)
    assert outcome.kind == OutcomeKind.LOST and refused == [True]
    assert store.read(job_id).record["status"] == "running"
    assert store.names(f"outputs/{job_id}/") == []


def test_transient_errors_in_heartbeats_do_not_fail_the_job() -> None:
    class Hiccup(MemoryStore):
        failures = 0

        def update(self, record: dict[str, Any], generation: int) -> Any:
            last = (record.get("history") or [{}])[-1].get("event")
            owner_write = record.get("status") == "running" and last != "claimed"
            if owner_write and self.failures < 3:
                self.failures += 1
                raise Unavailable("503 from storage")
            return super().update(record, generation)

    store = Hiccup()
    job_id = submit(store, payload={"stages": 2, "sleep_s": 0.4})
    s = settings(stale_seconds=0.3, min_write_interval_seconds=0.05)
    outcome = handle(job_id, store, s, wall)
    assert outcome.kind == OutcomeKind.DONE and store.failures == 3
    assert store.read(job_id).record["attempts"] == 1
