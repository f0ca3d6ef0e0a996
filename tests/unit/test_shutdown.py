"""shared.claim.shutdown and the runner's hand-back on MemoryStore: a job is handed back at its
next stage boundary or check() (queued, due, no attempt spent, checkpoint kept, doorbell
rung), a stage that never checks is handed back from outside and commits nothing, and a
delivery that arrives during the shutdown is passed on. SIGTERM itself is
Shutdown.begin() here; tests/integration/test_handback.py sends the real one."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shared import job_queue
from shared.claim.shutdown import Shutdown
from shared.claim.stage_times import STAGE_TIMES, StageTimes
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, events, handle, pipeline, settings, submit


def _wait(what: str, check: Any, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"never saw {what}"
        time.sleep(0.01)


# --- the Shutdown object


def test_begin_is_once_and_hands_back_what_is_still_running_after_the_wait() -> None:
    shutdown = Shutdown(hand_back_wait_s=0.2)
    called: list[str] = []
    finished = threading.Event()
    with shutdown.running(lambda: called.append("finished early")):
        pass  # this job ended before the shutdown: never handed back
    with shutdown.running(lambda: (called.append("stuck"), finished.set())):
        assert not shutdown.requested
        assert shutdown.begin("test") and not shutdown.begin("again")
        assert shutdown.requested and called == []  # stages get the wait first
        assert finished.wait(5)
    _wait("the count", lambda: shutdown.forced == 1)
    assert called == ["stuck"]


def test_outside_gunicorn_nothing_is_watched() -> None:
    assert Shutdown().watch_gunicorn() is False  # pytest is no gunicorn worker


# --- the runner


def _checking_stage(started: threading.Event) -> Any:
    """The first attempt waits, calling check(), until the shutdown stops it; later
    attempts pass at once."""

    def stage(ctx: StageContext) -> None:
        started.set()
        while ctx.attempt == 1:
            ctx.check()
            time.sleep(0.01)
        ctx.state["worked"] = ctx.attempt

    return stage


def test_a_stage_that_checks_hands_the_job_back_at_no_cost() -> None:
    store = MemoryStore()
    started = threading.Event()
    name = pipeline(
        [
            ("fetch", lambda ctx: ctx.state.update(fetched=True)),
            ("work", _checking_stage(started)),
            ("report", lambda ctx: ctx.result.update(state=dict(ctx.state), attempt=ctx.attempt)),
        ]
    )
    job_id = submit(store, name, max_attempts=1)
    bell, shutdown = Bell(), Shutdown(hand_back_wait_s=60)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(handle, job_id, store, settings(), bell=bell, shutdown=shutdown)
        assert started.wait(5)
        shutdown.begin("test")
        outcome = running.result(10)
    assert outcome.kind == OutcomeKind.HANDED_BACK and not outcome.redeliver
    job = store.read(job_id).record
    assert (job["status"], job["owner"], job["attempts"]) == ("queued", None, 1)
    assert job["max_attempts"] == 2 and job["handbacks"] == 1  # the one attempt not spent
    assert job_queue.checkpoint_of(job) == (1, {"fetched": True})  # the coalesced boundary
    assert events(store, job_id)[-1] == "handed back" and bell.rung == [job_id]
    # a live instance resumes it from its checkpoint, its last attempt still allowed
    again = handle(job_id, store, settings(), shutdown=Shutdown())
    assert again.kind == OutcomeKind.DONE and again.attempt == 2
    assert store.read(job_id).record["result"] == {
        "state": {"fetched": True, "worked": 2},
        "attempt": 2,
    }


def test_a_stage_boundary_hands_the_job_back_with_the_checkpoint() -> None:
    store = MemoryStore()
    shutdown = Shutdown(hand_back_wait_s=60)
    ran: list[str] = []

    def first(ctx: StageContext) -> None:
        ran.append(f"first/{ctx.attempt}")
        shutdown.begin("SIGTERM during a stage that never checks")
        ctx.state["done"] = "first"

    def second(ctx: StageContext) -> None:
        ran.append(f"second/{ctx.attempt}")
        ctx.result["state"] = dict(ctx.state)

    name = pipeline([("first", first), ("second", second)])
    job_id = submit(store, name)
    outcome = handle(job_id, store, settings(), shutdown=shutdown)
    assert outcome.kind == OutcomeKind.HANDED_BACK and ran == ["first/1"]
    job = store.read(job_id).record
    assert job["status"] == "queued" and job_queue.checkpoint_of(job) == (1, {"done": "first"})
    resumed = handle(job_id, store, settings(), shutdown=Shutdown())
    assert resumed.kind == OutcomeKind.DONE and resumed.attempt == 2
    assert ran == ["first/1", "second/2"]  # resumed at the checkpoint
    done = store.read(job_id).record
    assert done["result"] == {"state": {"done": "first"}}
    assert done["max_attempts"] == 4 and done["attempts"] == 2  # one attempt spent, not two
    assert events(store, job_id) == [
        "submitted",
        "claimed",
        "checkpoint",  # folded into the hand-back's one write
        "handed back",
        "claimed",
        "done",
    ]


def test_a_stage_that_never_checks_is_handed_back_from_outside_and_commits_nothing() -> None:
    store = MemoryStore()
    release = threading.Event()
    started = threading.Event()

    def blocked(ctx: StageContext) -> None:  # a long call: no check(), no boundary
        started.set()
        release.wait(10)
        ctx.state["late"] = True

    name = pipeline([("blocked", blocked), ("after", lambda ctx: None)])
    job_id = submit(store, name)
    bell, shutdown = Bell(), Shutdown(hand_back_wait_s=0.1)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(handle, job_id, store, settings(), bell=bell, shutdown=shutdown)
        assert started.wait(5)
        shutdown.begin("test")
        _wait("the hand-back from outside", lambda: bell.rung == [job_id])
        handed = store.read(job_id)
        assert handed.record["status"] == "queued" and shutdown.forced == 1
        assert events(store, job_id)[-1] == "handed back"
        release.set()  # the stage returns long after: its owner writes nothing more
        outcome = running.result(10)
    assert outcome.kind == OutcomeKind.LOST
    assert store.read(job_id) == handed


def test_a_delivery_during_the_shutdown_is_passed_on_untouched() -> None:
    store = MemoryStore()
    job_id = submit(store)
    before = store.read(job_id)
    bell, shutdown = Bell(), Shutdown(hand_back_wait_s=60)
    shutdown.begin("test")
    outcome = handle(job_id, store, settings(), bell=bell, shutdown=shutdown)
    assert outcome.kind == OutcomeKind.HANDED_BACK and not outcome.redeliver
    assert store.read(job_id) == before and bell.rung == [job_id]
    failing = handle(job_id, store, settings(), bell=Bell(fail=True), shutdown=shutdown)
    assert failing.redeliver and failing.to_json()["redeliver"] is True  # the push comes back


def test_a_hand_back_whose_doorbell_fails_asks_for_the_push_again() -> None:
    store = MemoryStore()
    shutdown = Shutdown(hand_back_wait_s=60)
    name = pipeline([("one", lambda ctx: shutdown.begin("test")), ("two", lambda ctx: None)])
    job_id = submit(store, name)
    outcome = handle(job_id, store, settings(), bell=Bell(fail=True), shutdown=shutdown)
    assert outcome.kind == OutcomeKind.HANDED_BACK and outcome.redeliver
    assert store.read(job_id).record["status"] == "queued"  # the sweep would ring it too


# --- a stage that fits the grace finishes first (shared.claim.stage_times)


def test_stage_times_expect_a_stage_s_longest_recent_run_or_borrow_its_pipeline_s() -> None:
    times = StageTimes()
    assert times.expected("p", "a") is None  # nothing recorded: no guess
    times.record("p", "a", 2.0)
    times.record("p", "a", 3.0)
    times.record("p", "b", 7.0)
    times.record("q", "z", 50.0)
    assert times.expected("p", "a") == 3.0  # its own runs, the longest
    assert times.expected("p", "c") == 7.0  # not run here yet: its pipeline's longest
    assert times.expected("r", "a") is None


def test_the_shutdown_lets_a_stage_finish_only_when_its_remaining_time_fits() -> None:
    shutdown = Shutdown(hand_back_wait_s=60, finish_fits_s=5.0, finish_by_s=70)
    blocks = [
        shutdown.running(lambda: None, lambda left=left: left)
        for left in (3.0, 5.0, 5.1, None)  # fits, fits at the edge, too long, unknown
    ]
    jobs = [b.__enter__() for b in blocks]
    shutdown.begin("test")
    assert [j.finishing for j in jobs] == [True, True, False, False]
    assert [j.deadline_s for j in jobs] == [70, 70, 60, 60]
    for b in blocks:
        b.__exit__(None, None, None)


def _until_the_shutdown(shutdown: Shutdown, started: threading.Event, ran: list[int]) -> Any:
    """A stage that runs, calling check(), until the shutdown began, then ends: a stage the
    SIGTERM caught mid-way whose work is nearly done."""

    def stage(ctx: StageContext) -> None:
        started.set()
        while not shutdown.requested:
            ctx.check()
            time.sleep(0.01)
        ctx.check()  # a stage let finish is not stopped here
        ran.append(ctx.attempt)
        ctx.state["worked"] = ctx.attempt

    return stage


def _caught_mid_stage(
    record_s: float, last: bool = False
) -> tuple[MemoryStore, str, Any, list[int]]:
    """A job caught by the SIGTERM in its `work` stage, recorded at `record_s` a run (the
    shutdown lets stages expected within 600 s finish); (store, job, outcome, runs)."""
    store = MemoryStore()
    shutdown = Shutdown(hand_back_wait_s=60, finish_fits_s=600, finish_by_s=600)
    started, ran = threading.Event(), list[int]()
    stages = [
        ("fetch", lambda ctx: ctx.state.update(fetched=True)),
        ("work", _until_the_shutdown(shutdown, started, ran)),
    ]
    if not last:
        stages.append(("report", lambda ctx: ctx.result.update(state=dict(ctx.state))))
    name = pipeline(stages)
    STAGE_TIMES.record(name, "work", record_s)
    job_id = submit(store, name)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(handle, job_id, store, settings(), bell=Bell(), shutdown=shutdown)
        assert started.wait(5)
        shutdown.begin("test")
        outcome = running.result(10)
    return store, job_id, outcome, ran


def test_a_stage_expected_to_end_within_the_grace_finishes_and_goes_back_at_the_boundary() -> None:
    store, job_id, outcome, ran = _caught_mid_stage(record_s=300.0)
    assert outcome.kind == OutcomeKind.HANDED_BACK and ran == [1]  # the stage ended
    job = store.read(job_id).record
    assert job["status"] == "queued" and job["attempts"] == 1 and job["handbacks"] == 1
    # its checkpoint went with the hand-back: the next attempt starts at "report"
    assert job_queue.checkpoint_of(job) == (2, {"fetched": True, "worked": 1})
    again = handle(job_id, store, settings(), shutdown=Shutdown())
    assert again.kind == OutcomeKind.DONE and ran == [1]  # not run again
    assert store.read(job_id).record["result"] == {"state": {"fetched": True, "worked": 1}}


def test_a_stage_expected_past_the_grace_is_stopped_and_its_job_goes_back_at_once() -> None:
    store, job_id, outcome, ran = _caught_mid_stage(record_s=900.0)
    assert outcome.kind == OutcomeKind.HANDED_BACK and ran == []  # check() stopped it
    assert job_queue.checkpoint_of(store.read(job_id).record) == (1, {"fetched": True})


def test_the_last_stage_let_finish_ends_the_job() -> None:
    store, job_id, outcome, ran = _caught_mid_stage(record_s=300.0, last=True)
    assert outcome.kind == OutcomeKind.DONE and ran == [1]
    assert store.read(job_id).record["status"] == "done"


def test_a_stage_let_finish_that_overruns_is_handed_back_from_outside_at_its_deadline() -> None:
    store = MemoryStore()
    release, started = threading.Event(), threading.Event()

    def blocked(ctx: StageContext) -> None:  # slower than its record, and never checks
        started.set()
        release.wait(10)

    name = pipeline([("blocked", blocked), ("after", lambda ctx: None)])
    STAGE_TIMES.record(name, "blocked", 300.0)
    job_id = submit(store, name)
    bell = Bell()
    shutdown = Shutdown(hand_back_wait_s=0.05, finish_fits_s=600, finish_by_s=0.2)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(handle, job_id, store, settings(), bell=bell, shutdown=shutdown)
        assert started.wait(5)
        shutdown.begin("test")
        _wait("the hand-back from outside", lambda: bell.rung == [job_id])
        assert store.read(job_id).record["status"] == "queued" and shutdown.forced == 1
        release.set()
        outcome = running.result(10)
    assert outcome.kind == OutcomeKind.LOST  # its late end commits nothing


def test_the_platform_s_grace_sets_what_may_finish_and_when_the_rest_goes_back() -> None:
    """RECLAIM_SHUTDOWN_GRACE_SECONDS: under a 2 s grace (the local cloud's in tests) a
    stage with 2.3 s left is stopped, not let finish past the SIGKILL; under Cloud Run's
    10 s it finishes. The settings carry the grace to the claim's shutdown."""
    assert settings().shutdown_grace_seconds == 10.0
    assert settings(shutdown_grace_seconds=2).shutdown_grace_seconds == 2.0
    for grace, finishes in ((2.0, False), (10.0, True)):
        shutdown = Shutdown()
        shutdown.use_grace(grace)
        assert (shutdown.hand_back_wait_s, shutdown.finish_fits_s) == (grace / 2, grace / 2)
        with shutdown.running(lambda: None, lambda: 2.3) as job:
            shutdown.begin("test")
            assert job.finishing is finishes
