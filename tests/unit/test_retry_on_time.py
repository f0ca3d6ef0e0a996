"""Retries on time (shared.claim.due_wait): the pure rules, the requeuing owner's ring and
mark, the doorbell that waits for its job's backoff inside its push, and the sweep's ring
ahead of a long backoff. Time is a test clock; a wait moves it (WaitShutdown)."""

from __future__ import annotations

from datetime import timedelta

from shared import job_queue, sweep_plan, sweeper
from shared.claim.shutdown import Shutdown
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.storage import PendingEntry
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, events, handle, pipeline, settings, submit


class WaitShutdown(Shutdown):
    """A shutdown whose sleep moves the test's clock instead of the wall clock (and records
    each wait); `begin_after` starts the shutdown during the n-th wait."""

    def __init__(self, clock: Clock, begin_after: int | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []
        self.begin_after = begin_after

    def sleep(self, seconds: float) -> bool:
        self.waits.append(seconds)
        if self.begin_after is not None and len(self.waits) >= self.begin_after:
            self.begin("test")
            return True
        self.clock.advance(seconds)
        return self.requested


def _flaky(fail_attempts: int = 1) -> str:
    def stage(ctx: StageContext) -> None:
        if ctx.attempt <= fail_attempts:
            raise RuntimeError("transient")
        ctx.result["attempt"] = ctx.attempt

    return pipeline([("flaky", stage)])


def _backing_off(store: MemoryStore, clock: Clock, delay_s: float, **fields: object) -> str:
    """A queued job backing off: due `delay_s` from now."""
    not_before = job_queue.format_time(clock() + timedelta(seconds=delay_s))
    return submit(store, now=clock(), not_before=not_before, **fields)


# --- the pure rules


def test_due_within_is_the_time_left_of_a_backoff_inside_the_window() -> None:
    clock = Clock()
    store = MemoryStore()
    job = store.read(_backing_off(store, clock, 30.0)).record
    assert job_queue.due_within(job, clock(), 90.0, 3) == 30.0
    assert job_queue.due_within(job, clock(), 29.0, 3) is None  # later than the window
    assert job_queue.due_within(job, clock() + timedelta(seconds=31), 90.0, 3) is None  # due
    assert job_queue.due_within({**job, "attempts": 3}, clock(), 90.0, 3) is None  # exhausted
    assert job_queue.due_within({**job, "status": "running"}, clock(), 90.0, 3) is None


def test_the_sweep_rings_ahead_only_a_backoff_longer_than_the_window() -> None:
    clock = Clock()
    at = clock()
    short = {
        "status": "queued",
        "updated_at": job_queue.format_time(at),
        "not_before": job_queue.format_time(at + timedelta(seconds=60)),
    }
    long = {**short, "not_before": job_queue.format_time(at + timedelta(seconds=300))}
    # the short one was rung when it was requeued: its doorbell waits for it already
    assert not job_queue.rings_ahead(short, at + timedelta(seconds=10), 90.0, 3)
    assert not job_queue.rings_ahead(long, at + timedelta(seconds=200), 90.0, 3)  # not yet
    assert job_queue.rings_ahead(long, at + timedelta(seconds=211), 90.0, 3)
    assert not job_queue.rings_ahead(long, at + timedelta(seconds=301), 90.0, 3)  # due: stale


# --- the requeuing owner


def test_a_short_retry_is_rung_at_once_and_its_marker_marked_due_at_not_before() -> None:
    store, clock, bell = MemoryStore(), Clock(), Bell()
    job_id = submit(store, _flaky(), now=clock())
    s = settings(backoff_base_seconds=5.0, backoff_max_seconds=5.0, retry_wait_seconds=90.0)
    assert handle(job_id, store, s, clock, bell).kind == OutcomeKind.REQUEUED
    job = store.read(job_id).record
    not_before = job_queue.parse_time(job["not_before"])
    assert not_before is not None and not_before > clock()
    assert bell.rung == [job_id]
    (marker,) = store.list_pending()
    assert marker.due == not_before


def test_a_long_retry_is_not_rung_but_marked_due() -> None:
    clock = Clock()
    s = settings(backoff_base_seconds=300.0, backoff_max_seconds=300.0, retry_wait_seconds=90.0)
    # full jitter may draw a delay within the window: retry until one is longer (a test of
    # the rule, not of the draw)
    for _ in range(50):
        store, bell = MemoryStore(), Bell()
        job_id = submit(store, _flaky(), now=clock())
        assert handle(job_id, store, s, clock, bell).kind == OutcomeKind.REQUEUED
        job = store.read(job_id).record
        not_before = job_queue.parse_time(job["not_before"])
        assert not_before is not None
        if (not_before - clock()).total_seconds() > 90.0:
            break
    assert not_before is not None and (not_before - clock()).total_seconds() > 90.0
    assert bell.rung == []
    (marker,) = store.list_pending()
    assert marker.due == not_before


# --- the doorbell that waits


def test_a_doorbell_waits_for_the_backoff_then_claims_the_job() -> None:
    store, clock = MemoryStore(), Clock()
    job_id = _backing_off(store, clock, 4.0)
    due = clock() + timedelta(seconds=4)
    s = settings(retry_wait_seconds=90.0)
    shutdown = WaitShutdown(clock)
    outcome = handle(job_id, store, s, clock, shutdown=shutdown)
    assert outcome.kind == OutcomeKind.DONE
    assert shutdown.waits == [4.0]
    history = store.read(job_id).record["history"]
    claimed = next(e for e in history if e["event"] == "claimed")
    assert job_queue.parse_time(claimed["at"]) == due
    assert events(store, job_id)[-1] == "done"


def test_a_retry_is_claimed_at_its_not_before_end_to_end() -> None:
    """The owner requeues with a backoff and rings; the doorbell's claim waits for exactly
    the backoff, so the next attempt's claim is stamped at the not_before."""
    store, clock, bell = MemoryStore(), Clock(), Bell()
    job_id = submit(store, _flaky(), now=clock())
    s = settings(backoff_base_seconds=5.0, backoff_max_seconds=5.0, retry_wait_seconds=90.0)
    assert handle(job_id, store, s, clock, bell).kind == OutcomeKind.REQUEUED
    assert bell.rung == [job_id]
    not_before = job_queue.parse_time(store.read(job_id).record["not_before"])
    shutdown = WaitShutdown(clock)
    assert handle(job_id, store, s, clock, bell, shutdown=shutdown).kind == OutcomeKind.DONE
    history = store.read(job_id).record["history"]
    second = [e for e in history if e["event"] == "claimed"][-1]
    assert second["attempt"] == 2
    assert job_queue.parse_time(second["at"]) == not_before


def test_a_job_due_later_than_the_window_is_acked_as_backing_off() -> None:
    store, clock = MemoryStore(), Clock()
    job_id = _backing_off(store, clock, 120.0)
    shutdown = WaitShutdown(clock)
    outcome = handle(job_id, store, settings(retry_wait_seconds=90.0), clock, shutdown=shutdown)
    assert outcome.kind == OutcomeKind.SKIPPED and outcome.detail == "backing off"
    assert shutdown.waits == []


def test_the_wait_never_outlasts_the_push_budget() -> None:
    """A push of 60 s, less the pending allowance (10 s) and the run's reserve
    (drain_job_seconds 45 s), leaves 5 s for waiting: a 30 s backoff is not waited for."""
    store, clock = MemoryStore(), Clock()
    job_id = _backing_off(store, clock, 30.0)
    s = settings(retry_wait_seconds=90.0, push_deadline_seconds=60.0, drain_job_seconds=45.0)
    shutdown = WaitShutdown(clock)
    outcome = handle(job_id, store, s, clock, shutdown=shutdown)
    assert outcome.detail == "backing off" and shutdown.waits == []


def test_a_shutdown_during_the_wait_passes_the_delivery_on() -> None:
    store, clock, bell = MemoryStore(), Clock(), Bell()
    job_id = _backing_off(store, clock, 4.0)
    shutdown = WaitShutdown(clock, begin_after=1)
    outcome = handle(
        job_id, store, settings(retry_wait_seconds=90.0), clock, bell, shutdown=shutdown
    )
    assert outcome.kind == OutcomeKind.HANDED_BACK and bell.rung == [job_id]
    assert store.read(job_id).record["status"] == "queued"  # untouched


def test_a_duplicate_doorbell_that_waited_too_loses_the_race_quietly() -> None:
    store, clock = MemoryStore(), Clock()
    job_id = _backing_off(store, clock, 2.0)
    s = settings(retry_wait_seconds=90.0)
    assert handle(job_id, store, s, clock, shutdown=WaitShutdown(clock)).kind == OutcomeKind.DONE
    # the second doorbell finds the job done: nothing to wait for, nothing written
    gen = store.read(job_id).generation
    outcome = handle(job_id, store, s, clock, shutdown=WaitShutdown(clock))
    assert outcome.kind == OutcomeKind.SKIPPED and store.read(job_id).generation == gen


def test_drained_jobs_never_wait() -> None:
    """Only the push's own job waits: the runner's attempt without wait acks a job backing
    off (the drain's take)."""
    store, clock = MemoryStore(), Clock()
    job_id = _backing_off(store, clock, 4.0)
    from shared.claim.runner import _Runner

    shutdown = WaitShutdown(clock)
    runner = _Runner(
        context(store, Bell(), settings(retry_wait_seconds=90.0), clock), "t", shutdown
    )
    assert runner.attempt(job_id).detail == "backing off" and shutdown.waits == []


# --- the sweep


def test_the_sweep_rings_a_long_backoff_once_it_is_due_within_the_window() -> None:
    store, clock, bell = MemoryStore(), Clock(), Bell()
    s = settings(retry_wait_seconds=90.0)
    queued_at = clock()
    job_id = submit(store, now=clock(), updated_at=job_queue.format_time(queued_at))
    not_before = queued_at + timedelta(seconds=300)
    stored = store.read(job_id)
    store.update(
        {**stored.record, "not_before": job_queue.format_time(not_before)}, stored.generation
    )
    ctx = context(store, bell, s, clock)
    clock.advance(100)  # due in 200 s: not yet
    assert sweeper.run_once(ctx, clock()).rung_ahead == 0 and bell.rung == []
    clock.advance(120)  # due in 80 s
    gen = store.read(job_id).generation
    assert sweeper.run_once(ctx, clock()).rung_ahead == 1 and bell.rung == [job_id]
    assert store.read(job_id).generation == gen  # rung without a write


def test_a_large_index_reads_markers_due_within_the_window() -> None:
    now = job_queue.parse_time("2026-12-02T12:00:00+00:00")
    assert now is not None
    young = now - timedelta(seconds=10)
    soon = PendingEntry("soon", young, now + timedelta(seconds=60))
    later = PendingEntry("later", young, now + timedelta(seconds=600))
    assert sweep_plan.may_need_action(soon, now, 115.0, 90.0)
    assert not sweep_plan.may_need_action(later, now, 115.0, 90.0)
    assert not sweep_plan.may_need_action(soon, now, 115.0)  # no window: as before


def test_an_early_doorbell_of_a_delayed_job_is_not_waited_for() -> None:
    """A delayed job (run_at) waits in its own index, released by the sweep
    (shared.features.delayed): only a backoff is waited for in a push."""
    store, clock = MemoryStore(), Clock()
    run_at = job_queue.format_time(clock() + timedelta(seconds=4))
    job_id = submit(store, now=clock(), run_at=run_at)
    shutdown = WaitShutdown(clock)
    outcome = handle(job_id, store, settings(retry_wait_seconds=90.0), clock, shutdown=shutdown)
    assert outcome.kind == OutcomeKind.SKIPPED and shutdown.waits == []
