"""What a status view says (issue 40, "status that tells the truth"): the stage running
now, an error labelled "out of attempts" apart from "permanent", the last error only for
the attempt it belongs to, `paused` on a queued job of a paused pipeline, and reads that
never requeue with settings of their own (the CLI's)."""

from __future__ import annotations

import threading

from shared import job_queue
from shared.features import flow
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.status import read_job, render_job
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, handle, pipeline, settings, submit


def test_a_running_job_shows_the_stage_it_runs() -> None:
    seen: list[str | None] = []
    store = MemoryStore()
    started = threading.Event()
    proceed = threading.Event()

    def first(ctx: StageContext) -> None:
        seen.append(store.read(ctx.job_id).record.get("stage"))

    def second(ctx: StageContext) -> None:
        started.set()
        proceed.wait(10)

    job_id = submit(store, pipeline([("first", first), ("second", second)]))
    s = settings(min_write_interval_seconds=0.0)  # the boundary is written at once
    runner = threading.Thread(target=handle, args=(job_id, store, s))
    runner.start()
    assert started.wait(10)
    view = render_job(store.read(job_id).record, 3)
    proceed.set()
    runner.join(10)
    assert seen == ["first"]  # the claim names the stage it runs first
    assert view["status"] == "running" and view["stage"] == "second"  # then the boundary
    history = store.read(job_id).record["history"]
    assert [e.get("stage") for e in history if e["event"] == "checkpoint"] == ["first"]


def test_running_out_of_attempts_is_not_called_permanent() -> None:
    def flaky(ctx: StageContext) -> None:
        raise RuntimeError("still down")

    store = MemoryStore()
    job_id = submit(store, pipeline([("call", flaky)]))
    s = settings(max_attempts=2)
    assert handle(job_id, store, s).kind == OutcomeKind.REQUEUED
    view = render_job(store.read(job_id).record, 2)
    assert view["error"]["kind"] == "retryable" and view["error"]["attempt"] == 1
    assert handle(job_id, store, s).kind == OutcomeKind.FAILED
    view = render_job(store.read(job_id).record, 2)
    assert view["error"]["kind"] == "out of attempts" and view["error"]["retryable"] is False
    assert view["stage"] == "call"


def test_a_done_job_shows_no_error_of_an_earlier_attempt() -> None:
    def flaky(ctx: StageContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("transient")

    store = MemoryStore()
    job_id = submit(store, pipeline([("call", flaky)]))
    assert handle(job_id, store, settings()).kind == OutcomeKind.REQUEUED
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    record = store.read(job_id).record
    view = render_job(record, 3)
    assert record["error"] is None and view["error"] is None and "previous_error" not in view
    assert any(e.get("error") for e in record["history"])  # the history keeps it


def test_a_retry_running_again_shows_the_earlier_error_as_previous() -> None:
    store = MemoryStore()
    job_id = submit(store)
    stored = store.read(job_id)
    error = job_queue.error_info(
        RuntimeError("x"),
        stage="s",
        attempt=1,
        now=job_queue.parse_time("2026-01-01"),
        retryable=True,
    )
    claimed = {**stored.record, "attempts": 1, "error": error}
    claimed = {
        **claimed,
        **job_queue.claim_fields(claimed, "owner", job_queue.parse_time("2026-01-02")),
    }
    view = render_job(claimed, 3)
    assert claimed["attempts"] == 2 and view["error"] is None
    assert (
        view["previous_error"]["message"] == "x" and view["previous_error"]["kind"] == "retryable"
    )


def test_a_queued_job_of_a_paused_pipeline_says_paused() -> None:
    store, clock = MemoryStore(), Clock()
    ctx = context(store, Bell(), settings(), clock)
    job_id = submit(store, "demo")
    assert "paused" not in read_job(ctx, job_id, clock()).to_json()
    flow.pause(store, "demo", by="test", now=clock())
    flow._PAUSE_CACHE.clear()  # this process read the flag a moment ago
    assert read_job(ctx, job_id, clock()).to_json()["paused"] is True
    flow.resume(store, Bell(), "demo", by="test")
    flow._PAUSE_CACHE.clear()
    assert "paused" not in read_job(ctx, job_id, clock()).to_json()


def test_a_read_without_the_watchdog_never_requeues() -> None:
    """The CLI's read: its stale time is its own, not the deployment's."""
    store, clock = MemoryStore(), Clock()
    ctx = context(store, Bell(), settings(stale_seconds=30.0), clock)
    job_id = submit(store, now=clock())
    stored = store.read(job_id)
    store.update(
        {**stored.record, **job_queue.claim_fields(stored.record, "busy", clock())},
        stored.generation,
    )
    clock.advance(60)  # stale by a 30 s stale time, fresh by the deployment's 600 s
    gen = store.read(job_id).generation
    view = read_job(ctx, job_id, clock(), watchdog=False)
    assert view.watchdog is None and view.record["status"] == "running"
    assert store.read(job_id).generation == gen
    assert read_job(ctx, job_id, clock()).watchdog == "requeue"  # the deployment's read
