"""Flow control on the in-memory store: the pure rules (features.flow_policy, property-tested)
and the gates and releases (shared.features.flow) through the real runner."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import bulk
from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import InvalidInput, InvalidSubmission
from shared.features import flow
from shared.features import flow_policy as fp
from shared.jobs import JobStatus
from shared.outcome import OutcomeKind
from shared.pipelines import Pipeline, StageContext, register
from shared.queue import Queue, parse_submission
from shared.shards import TIME_INDEX_FANOUT, fanout_slot
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, starved_slots

START = datetime(2026, 7, 26, 10, 0, 0, 100_000, tzinfo=UTC)


# ------------------------------------------------------------------ pure rules


@pytest.mark.parametrize(
    ("text", "limit", "period"),
    [("5/s", 5, 1), ("100/min", 100, 60), (" 2 / hour ", 2, 3600), ("7/M", 7, 60)],
)
def test_a_rate_reads_as_a_limit_per_window(text: str, limit: int, period: int) -> None:
    assert fp.parse_rate(text) == fp.Rate(limit, period)


@pytest.mark.parametrize("text", ["", "5", "5/", "/s", "0/s", "-1/s", "5/day", "1.5/s", 5, None])
def test_a_malformed_rate_is_refused_with_a_reason(text: Any) -> None:
    with pytest.raises(InvalidInput, match="rate"):
        fp.parse_rate(text)


@settings(deadline=None)  # no timing in a test: the first example pays the imports
@given(
    st.integers(min_value=0, max_value=4_000_000_000),
    st.sampled_from([1, 60, 3600]),
    st.integers(min_value=1, max_value=50),
)
def test_windows_are_aligned_consecutive_and_hold_now(epoch: int, period: int, n: int) -> None:
    rate = fp.Rate(3, period)
    now = datetime.fromtimestamp(epoch, UTC)
    windows = rate.windows_from(now, n)
    assert windows[0] <= now < windows[0] + timedelta(seconds=period)
    assert all(int(w.timestamp()) % period == 0 for w in windows)
    assert all((b - a).total_seconds() == period for a, b in itertools.pairwise(windows))
    labels = [fp.window_label(w) for w in windows]
    assert labels == sorted(labels)  # names sort as time: one listing reads ahead in order
    assert [fp.label_start(label) for label in labels] == windows


@settings(deadline=None)
@given(st.text(min_size=1, max_size=8), st.datetimes(timezones=st.just(UTC)))
def test_waiter_names_sort_oldest_first_and_give_back_the_id(suffix: str, at: datetime) -> None:
    job_id = "j-" + "".join(c for c in suffix if c.isalnum() and c.isascii()) + "x"
    older = {"id": job_id, "created_at": at.isoformat()}
    newer = {"id": "a", "created_at": (at + timedelta(microseconds=1)).isoformat()}
    name = fp.waiter_name("k", older)  # type: ignore[arg-type]
    assert fp.waiter_job_id(name) == job_id
    assert name < fp.waiter_name("k", newer)  # type: ignore[arg-type]


def test_a_place_counts_only_while_its_holder_runs_that_attempt_fresh() -> None:
    holder = fp.Holder("a", 2, START)
    running = {"status": "running", "attempts": 2, "updated_at": START.isoformat()}
    assert fp.holds(holder, running, START + timedelta(seconds=10), 30)  # type: ignore[arg-type]
    assert not fp.holds(holder, running, START + timedelta(seconds=31), 30)  # type: ignore[arg-type]
    about_to_claim = {"status": "queued", "attempts": 1}
    assert fp.holds(holder, about_to_claim, START + timedelta(seconds=5), 30)  # type: ignore[arg-type]
    requeued = {"status": "queued", "attempts": 2, "updated_at": START.isoformat()}
    assert not fp.holds(holder, requeued, START, 30)  # type: ignore[arg-type]
    assert not fp.holds(holder, {"status": "done", "attempts": 2}, START, 30)  # type: ignore[arg-type]
    assert not fp.holds(holder, None, START, 30)


# ------------------------------------------------------------------ submit


def parse(**job: Any) -> Any:
    return parse_submission({"pipeline": "demo", **job}, Settings.from_env({}))


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ({"concurrency_key": "a/b"}, "concurrency_key"),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "k", "max_running": 0}, "max_running"),
        ({"concurrency_key": "k", "max_running": "2"}, "max_running"),
        ({"max_running": 2}, "needs a concurrency_key"),
        ({"rate": "fast"}, "rate"),
    ],
)
def test_bad_flow_fields_are_refused_before_anything_is_written(job: Any, reason: str) -> None:
    with pytest.raises(InvalidSubmission, match=reason):
        parse(**job)


def test_the_flow_fields_go_into_the_record() -> None:
    queue, store, _ = make_queue()
    spec = parse(concurrency_key="cust-1", max_running=2, rate="5/s", id="j1")
    queue.submit(spec)
    record = store.read("j1").record
    assert (record["concurrency_key"], record["max_running"], record["rate"]) == (
        "cust-1",
        2,
        "5/s",
    )


# ------------------------------------------------------------------ through the runner


def make_queue() -> tuple[Queue, MemoryStore, Bell]:
    store = MemoryStore()
    bell = Bell()
    settings = Settings.from_env({}, stale_seconds=30.0, drain_max_jobs=0)
    flow._PAUSE_CACHE.clear()
    return Queue(store, bell, settings, clock=Clock(START)), store, bell


def submit(queue: Queue, job_id: str, pipeline: str = "demo", **fields: Any) -> None:
    body = {"pipeline": pipeline, "id": job_id, **fields}
    queue.submit(parse_submission(body, queue.settings))


def free_places(store: MemoryStore, key: str) -> bool:
    """Every place of the key exists empty (a place is emptied, never deleted)."""
    names = [b.name for b in store.list_blobs(f"limits/{key}/")]
    return bool(names) and all(store.read_blob(n).data == b"" for n in names)


def deliver(queue: Queue, job_id: str) -> Any:
    return queue.handle_delivery(job_id, owner="me", slots=Slots(4), gate=DrainGate())


def test_at_its_limit_a_job_waits_without_an_attempt_and_the_finish_rings_it() -> None:
    queue, store, bell = make_queue()
    seen: dict[str, Any] = {}

    def holder_stage(ctx: StageContext) -> None:  # while "a" runs, "b" is delivered
        seen["b"] = deliver(queue, "b")

    register(Pipeline("flow-hold", stages=[("hold", holder_stage)]), replace=True)
    submit(queue, "a", "flow-hold", concurrency_key="k", max_running=1)
    submit(queue, "b", concurrency_key="k", max_running=1)
    bell.rung.clear()
    assert deliver(queue, "a").kind == OutcomeKind.DONE
    assert seen["b"].kind == OutcomeKind.SKIPPED and "waiting" in seen["b"].detail
    assert store.read("b").record["attempts"] == 0  # no attempt burnt
    assert "b" in bell.rung  # a's finish rang the oldest waiter
    assert store.list_blobs("waiting-for/") == []  # and dropped its marker
    assert free_places(store, "k")  # a's place went back
    assert deliver(queue, "b").kind == OutcomeKind.DONE


def test_a_dead_holders_place_is_taken_over() -> None:
    queue, store, _ = make_queue()
    submit(queue, "dead", concurrency_key="k", max_running=1)
    # "dead" took the place for attempt 1 and never claimed: long ago, so it holds nothing
    old = fp.Holder("dead", 1, START - timedelta(minutes=5))
    store.put_blob(fp.place_name("k", 0), old.to_bytes(), generation=0)
    submit(queue, "b", concurrency_key="k", max_running=1)
    assert deliver(queue, "b").kind == OutcomeKind.DONE


def test_a_fresh_holder_keeps_its_place() -> None:
    queue, store, _ = make_queue()
    submit(queue, "alive", concurrency_key="k", max_running=1)
    alive = fp.Holder("alive", 1, START)  # just taken, about to claim
    store.put_blob(fp.place_name("k", 0), alive.to_bytes(), generation=0)
    submit(queue, "b", concurrency_key="k", max_running=1)
    assert deliver(queue, "b").kind == OutcomeKind.SKIPPED
    assert [fp.waiter_job_id(b.name) for b in store.list_blobs("waiting-for/k/")] == ["b"]


def test_pause_parks_deliveries_and_resume_rings_them() -> None:
    queue, store, bell = make_queue()
    assert flow.pause(store, "demo", by="t", now=START) is True
    assert flow.pause(store, "demo", by="t", now=START) is False
    submit(queue, "p1")
    outcome = deliver(queue, "p1")
    assert outcome.kind == OutcomeKind.SKIPPED and "paused" in outcome.detail
    assert [b.name for b in store.list_blobs("parked/")] == ["parked/demo/p1"]
    bell.rung.clear()
    resumed = flow.resume(store, bell, "demo", by="test")
    assert (resumed.was_paused, resumed.rung, resumed.more) == (True, 1, False)
    assert bell.rung == ["p1"] and store.list_blobs("parked/") == []
    assert deliver(queue, "p1").kind == OutcomeKind.DONE


def test_pausing_an_unknown_pipeline_is_refused() -> None:
    _, store, bell = make_queue()
    with pytest.raises(InvalidInput, match="unknown"):
        flow.pause(store, "nope", by="t", now=START)
    with pytest.raises(InvalidInput, match="unknown"):
        flow.resume(store, bell, "nope", by="test")
    assert store.list_blobs("paused/") == []


def test_over_its_rate_a_job_is_deferred_to_a_reserved_token_of_the_next_window() -> None:
    queue, store, _ = make_queue()
    for i in range(3):
        submit(queue, f"r{i}", concurrency_key="api", rate="2/s")
    kinds = [deliver(queue, f"r{i}").kind for i in range(3)]
    assert kinds == [OutcomeKind.DONE, OutcomeKind.DONE, OutcomeKind.SKIPPED]
    late = store.read("r2").record
    assert late["status"] == JobStatus.QUEUED and late["attempts"] == 0
    next_window = START.replace(microsecond=0) + timedelta(seconds=1)
    assert late["not_before"] == next_window.isoformat()
    assert late["rate_token"] == fp.token_name("api", next_window, 0)
    assert deliver(queue, "r2").kind == OutcomeKind.SKIPPED  # not due yet
    queue.clock.advance(1)  # type: ignore[attr-defined]
    assert deliver(queue, "r2").kind == OutcomeKind.DONE


def test_a_token_whose_window_ends_while_it_is_taken_is_taken_again_in_the_next() -> None:
    queue, store, _ = make_queue()
    submit(queue, "tick", concurrency_key="api", rate="2/s")
    put_blob = store.put_blob

    def put_then_tick(name: str, data: bytes, *, generation: int) -> int:
        written = put_blob(name, data, generation=generation)
        if name == fp.token_name("api", START.replace(microsecond=0), 0):
            queue.clock.advance(1)  # type: ignore[attr-defined]  # the second ends meanwhile
        return written

    store.put_blob = put_then_tick  # type: ignore[method-assign]
    assert deliver(queue, "tick").kind == OutcomeKind.DONE  # not deferred into the past
    now_window = START.replace(microsecond=0) + timedelta(seconds=1)
    assert store.read("tick").record["status"] == JobStatus.DONE
    assert fp.token_name("api", now_window, 0) in {b.name for b in store.list_blobs("rates/")}


def test_a_failed_or_cancelled_job_is_indexed_by_day_and_a_done_one_is_not() -> None:
    queue, store, _ = make_queue()
    submit(queue, "ok")
    submit(queue, "bad", payload={"fail_at": 0, "permanent": True})
    submit(queue, "stop")
    deliver(queue, "ok")
    deliver(queue, "bad")
    queue.cancel("stop", by="t")
    names = sorted(b.name for b in store.list_blobs("ended/"))
    assert names == [
        f"ended/cancelled/{fanout_slot('stop')}/20260726/stop",
        f"ended/failed/{fanout_slot('bad')}/20260726/bad",
    ]


def test_a_backlogged_drain_does_not_spin_on_held_jobs() -> None:
    store = MemoryStore()
    settings = Settings.from_env({}, stale_seconds=30.0)
    queue = Queue(store, Bell(), settings, clock=Clock(START))
    flow._PAUSE_CACHE.clear()
    register(Pipeline("flow-free", stages=[("noop", lambda ctx: None)]), replace=True)
    flow.pause(store, "demo", by="t", now=START)
    for i in range(3):
        submit(queue, f"held{i}")
    submit(queue, "x", "flow-free")
    gate = DrainGate()
    gate.note_backlog()
    lists = store.calls["list"]
    outcome = queue.handle_delivery("x", owner="me", slots=starved_slots(1), gate=gate)
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    assert store.calls["list"] - lists <= 4  # one drain listing (and the gates' own)
    assert {b.name for b in store.list_blobs("parked/")} == {
        f"parked/demo/held{i}" for i in range(3)
    }
    flow.resume(store, Bell(), "demo", by="test")


def test_the_sweep_rings_parked_jobs_of_a_resumed_pipeline_and_a_waiter_per_key() -> None:
    queue, store, _ = make_queue()
    submit(queue, "p1")
    store.put_blob("parked/demo/p1", b"", generation=0)  # a resume that stopped early
    submit(queue, "w1", concurrency_key="k", max_running=1)
    store.put_blob(fp.waiter_name("k", store.read("w1").record), b"", generation=0)
    bell = Bell()
    assert flow.sweep(store, bell) == {"parked": 1, "waiters": 1}
    assert sorted(bell.rung) == ["p1", "w1"]
    assert store.list_blobs("parked/") == [] and store.list_blobs("waiting-for/") == []


def test_a_requeued_holder_gives_its_place_back() -> None:
    queue, store, _ = make_queue()
    submit(
        queue, "a", payload={"fail_at": 0, "fail_attempts": 1}, concurrency_key="k", max_running=1
    )
    assert deliver(queue, "a").kind == OutcomeKind.REQUEUED
    assert free_places(store, "k")
    queue.clock.advance(3600)  # type: ignore[attr-defined]  # past its backoff
    assert deliver(queue, "a").kind == OutcomeKind.DONE


# ------------------------------------------------------------------ bulk


def test_bulk_selects_from_the_indexes_and_checks_each_record() -> None:
    queue, store, _ = make_queue()
    body = {
        "batch_id": "b1",
        "jobs": [
            {"pipeline": "demo", "id": "f1", "payload": {"fail_at": 0, "permanent": True}},
            {"pipeline": "demo", "id": "ok1"},
            {"pipeline": "demo", "id": "q1"},
        ],
    }
    queue.submit(parse_submission(body, queue.settings))
    submit(queue, "f2", payload={"fail_at": 0, "permanent": True})
    deliver(queue, "f1")
    deliver(queue, "ok1")
    deliver(queue, "f2")
    now = START + timedelta(minutes=1)
    by_batch = bulk.select(queue.ctx, bulk.Selector(batch="b1"), "retry", now)
    assert [r["id"] for r in by_batch] == ["f1"]
    by_status = bulk.select(
        queue.ctx,
        bulk.Selector(status=JobStatus.FAILED),
        "retry",
        now,
    )
    assert sorted(r["id"] for r in by_status) == ["f1", "f2"]
    cancel = bulk.select(queue.ctx, bulk.Selector(batch="b1"), "cancel", now)
    assert [r["id"] for r in cancel] == ["q1"]
    later = bulk.Selector(status=JobStatus.FAILED, since=START + timedelta(seconds=1))
    assert bulk.select(queue.ctx, later, "retry", now) == []  # ended before --since
    lists_before = store.calls["list"]
    bulk.select(
        queue.ctx,
        bulk.Selector(status=JobStatus.FAILED),
        "retry",
        now,
    )
    # per day of the last 7 (+today): one listing per fan-out slot and one of the old names
    assert store.calls["list"] - lists_before == 8 * (TIME_INDEX_FANOUT + 1)
    result = bulk.act(by_status, lambda i: queue.retry(i, by="t"), per_s=1e9, sleep=lambda s: None)
    assert sorted(result.acted) == ["f1", "f2"]
    again = bulk.select(
        queue.ctx,
        bulk.Selector(status=JobStatus.FAILED),
        "retry",
        now,
    )
    assert again == []  # the index entries went stale: the records decide


def test_bulk_refuses_a_status_the_action_cannot_move_and_an_empty_selector() -> None:
    with pytest.raises(InvalidInput, match="retry acts on failed or cancelled"):
        bulk.check(bulk.Selector(status=JobStatus.RUNNING), "retry")
    with pytest.raises(InvalidInput, match="name job ids"):
        bulk.check(bulk.Selector(), "cancel")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", START - timedelta(minutes=30)),
        ("24h", START - timedelta(hours=24)),
        ("7d", START - timedelta(days=7)),
        ("2026-07-25", datetime(2026, 7, 25, tzinfo=UTC)),
    ],
)
def test_since_reads_durations_and_times(text: str, expected: datetime) -> None:
    assert bulk.parse_since(text, START) == expected


@pytest.mark.parametrize("text", ["yesterday", "99999999999d", "0001-01-01T00:00+03:00"])
def test_a_bad_since_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="since"):
        bulk.parse_since(text, START)


def test_a_keyed_job_over_its_rate_gives_back_the_place_it_took() -> None:
    queue, store, _ = make_queue()
    submit(queue, "r0", concurrency_key="both", max_running=5, rate="1/s")
    submit(queue, "r1", concurrency_key="both", max_running=5, rate="1/s")
    assert deliver(queue, "r0").kind == OutcomeKind.DONE
    assert deliver(queue, "r1").kind == OutcomeKind.SKIPPED  # deferred by the rate
    assert free_places(store, "both")  # its place is not kept while it waits


def test_an_ended_entry_written_under_the_old_name_is_still_selected() -> None:
    """The ended index before the fan-out (ended/<status>/<day>/<id>): still read."""
    queue, store, _ = make_queue()
    submit(queue, "old-bad", payload={"fail_at": 0, "permanent": True})
    deliver(queue, "old-bad")
    record = store.read("old-bad").record
    store.delete_blob(str(fp.ended_name(record)))  # as an older version indexed it:
    store.put_blob("ended/failed/20260726/old-bad", b"", generation=0)
    now = START + timedelta(minutes=1)
    chosen = bulk.select(queue.ctx, bulk.Selector(status=JobStatus.FAILED), "retry", now)
    assert [r["id"] for r in chosen] == ["old-bad"]
