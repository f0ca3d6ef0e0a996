"""Delayed jobs, expiry, unique keys and attempt timeouts on MemoryStore, through submit,
the sweep, the claim gate and the runner (the I/O around shared.timing)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import sweeper, timing
from shared.config import Settings
from shared.errors import InvalidSubmission
from shared.features import table as features
from shared.features import uniqueness
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.queue import parse_submission
from shared.stores.memory import MemoryStore
from shared.submission.create import submit
from tests.unit.unit_support import Bell, Clock, events, handle, pipeline, settings

NOW = datetime.now(UTC).replace(microsecond=0)


def post(store: MemoryStore, bell: Bell, body: dict[str, Any], now: datetime = NOW) -> Any:
    return submit(
        context(store, bell, Settings.from_env({})), parse_submission(body, settings()), now
    ).jobs[0]


def scheduled(store: MemoryStore) -> list[str]:
    return [b.name for b in store.list_blobs(timing.SCHEDULED_PREFIX)]


def test_a_delayed_job_waits_outside_pending_and_the_sweep_releases_it_when_due() -> None:
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "delay_seconds": 7200})
    assert store.list_pending() == [] and bell.rung == []
    assert scheduled(store) == [timing.scheduled_name(job.job_id, NOW + timedelta(hours=2))]
    early = sweeper.run_once(context(store, bell, settings()), NOW + timedelta(minutes=119))
    assert early.released == 0 and bell.rung == []
    assert handle(job.job_id, store, settings(), Clock(NOW)).kind == OutcomeKind.SKIPPED
    due = sweeper.run_once(context(store, bell, settings()), NOW + timedelta(hours=2, seconds=1))
    assert due.released == 1 and bell.rung == [job.job_id]
    assert [e.job_id for e in store.list_pending()] == [job.job_id] and scheduled(store) == []
    later = Clock(NOW + timedelta(hours=2, seconds=2))
    assert handle(job.job_id, store, settings(), later).kind == OutcomeKind.DONE


def test_a_run_at_in_the_past_runs_now() -> None:
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "run_at": "2020-01-01T00:00:00Z"})
    assert bell.rung == [job.job_id] and scheduled(store) == []


def test_expiry_past_run_at_is_refused_before_any_write() -> None:
    store = MemoryStore()
    body = {"pipeline": "demo", "delay_seconds": 600, "expires_at": NOW.isoformat()}
    with pytest.raises(InvalidSubmission, match="could never run"):
        post(store, Bell(), body)
    assert store.list_pending() == [] and scheduled(store) == [] and not store.calls["write"]


def test_an_expired_job_is_ended_at_claim_without_an_attempt() -> None:
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "ttl_seconds": 60})
    out = handle(job.job_id, store, settings(), Clock(NOW + timedelta(seconds=61)))
    record = store.read(job.job_id).record
    assert out.kind == OutcomeKind.SKIPPED and out.detail == "expired"
    assert record["status"] == "cancelled" and record["attempts"] == 0
    assert record["error"]["type"] == "Expired" and store.list_pending() == []  # type: ignore[index]


def test_the_sweep_ends_an_expired_job() -> None:
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "ttl_seconds": 60})
    result = sweeper.run_once(context(store, bell, settings()), NOW + timedelta(seconds=61))
    assert result.expired == 1 and store.read(job.job_id).record["status"] == "cancelled"


def test_a_second_submit_with_the_key_returns_the_first_job_until_it_ends() -> None:
    store, bell = MemoryStore(), Bell()
    first = post(store, bell, {"pipeline": "demo", "unique_key": "invoice-7"})
    dup = post(store, bell, {"pipeline": "demo", "unique_key": "invoice-7"})
    assert dup.duplicate_of == first.job_id and not dup.created and dup.job_id == first.job_id
    assert dup.to_json()["duplicate_of"] == first.job_id and len(store.list_pending()) == 1
    assert handle(first.job_id, store, settings(), Clock(NOW)).kind == OutcomeKind.DONE
    third = post(store, bell, {"pipeline": "demo", "unique_key": "invoice-7"})
    assert third.created and third.job_id != first.job_id


def test_a_window_holds_past_the_end_of_the_job_then_lets_go() -> None:
    store, bell = MemoryStore(), Bell()
    body = {"pipeline": "demo", "unique_key": "k", "unique_for_seconds": 60}
    first = post(store, bell, body)
    handle(first.job_id, store, settings(), Clock(NOW))
    assert post(store, bell, body, NOW + timedelta(seconds=30)).duplicate_of == first.job_id
    assert post(store, bell, body, NOW + timedelta(seconds=61)).created


def test_racing_submits_with_one_key_create_one_job() -> None:
    store, bell = MemoryStore(), Bell()
    start = threading.Barrier(8)
    out: list[Any] = []

    def go() -> None:
        start.wait()
        out.append(post(store, bell, {"pipeline": "demo", "unique_key": "race"}))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o.created for o in out) == 1 and len({o.job_id for o in out}) == 1
    assert len(store.list_pending()) == 1


def test_a_leaked_key_is_taken_over_after_the_grace_and_repaired_by_the_sweep() -> None:
    store = MemoryStore()
    ctx = context(store, Bell(), settings())  # the store serves the table's index prefixes
    lock = timing.lock_data("never-written", "k", None, NOW)  # crash between lock and record
    store.put_blob(timing.unique_lock_name("k"), uniqueness._encode(lock), generation=0)
    assert post(store, Bell(), {"pipeline": "demo", "unique_key": "k"}).duplicate_of
    late = NOW + timedelta(seconds=uniqueness.GRACE_S + 1)
    assert post(store, Bell(), {"pipeline": "demo", "unique_key": "k"}, late).created
    leaked = timing.lock_data("never-written", "other", None, NOW)
    store.put_blob(timing.unique_lock_name("other"), uniqueness._encode(leaked), generation=0)
    assert sweeper.run_once(ctx, late).unique_released == 1
    assert [b.name for b in store.list_blobs(timing.UNIQUE_PREFIX)] == [
        timing.unique_lock_name("k")
    ]


def test_the_release_hook_is_registered_and_idempotent() -> None:
    assert uniqueness.release_on_terminal in features.TIME.terminal_hooks
    store = MemoryStore()
    job = post(store, Bell(), {"pipeline": "demo", "unique_key": "k"})
    record = store.read(job.job_id).record
    ctx = context(store, Bell(), settings())
    uniqueness.release_on_terminal(ctx, record)
    uniqueness.release_on_terminal(ctx, record)
    assert store.list_blobs(timing.UNIQUE_PREFIX) == []


def test_a_stage_that_never_checks_is_bounded_and_its_zombie_commits_nothing() -> None:
    released = threading.Event()

    def sleepy(ctx: StageContext) -> None:
        released.wait(5)  # never calls check()
        ctx.outputs.write("late.txt", "zombie")

    name = pipeline([("sleepy", sleepy), ("after", lambda ctx: None)])
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": name, "timeout_seconds": 1, "max_attempts": 2})
    runner = threading.Thread(target=handle, args=(job.job_id, store, settings(), None, bell))
    runner.start()
    deadline = time.monotonic() + 10
    while (store.read(job.job_id).record.get("error") or {}).get("type") != "TimedOut":
        assert time.monotonic() < deadline, "the timeout did not bound the stage"
        time.sleep(0.05)
    record = store.read(job.job_id).record
    assert record["status"] == "queued" and record["error"]["type"] == "TimedOut"  # type: ignore[index]
    assert "timed out" in record["history"][-1]["error"]["message"]
    generation = store.read(job.job_id).generation
    released.set()
    runner.join(10)
    assert store.read(job.job_id).generation == generation  # the zombie wrote nothing
    assert not [k for k in store._objects if k[1].startswith("outputs/")]  # no late output
    assert events(store, job.job_id)[-1] == "requeued"


def test_a_marker_in_an_earlier_hour_than_its_run_at_is_moved_not_kept_forever() -> None:
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "delay_seconds": 3 * 3600})
    stale = timing.scheduled_name(job.job_id, NOW)  # as a crashed first submit left it
    store.put_blob(stale, b"", generation=0)
    result = sweeper.run_once(context(store, bell, settings()), NOW + timedelta(minutes=1))
    assert result.repaired == 1 and bell.rung == []
    assert scheduled(store) == [timing.scheduled_name(job.job_id, NOW + timedelta(hours=3))]


def test_a_timed_out_attempt_gives_back_its_concurrency_place() -> None:
    """A timeout ends the attempt as a stage error does: the place goes back at once (not
    only when the staleness rule frees it) and the key's waiters can start."""
    from shared.features.flow_policy import place_name

    released = threading.Event()
    name = pipeline([("sleepy", lambda ctx: released.wait(5))])
    store, bell = MemoryStore(), Bell()
    body = {"pipeline": name, "timeout_seconds": 1, "max_attempts": 2}
    job = post(store, bell, {**body, "concurrency_key": "k", "max_running": 1})
    runner = threading.Thread(target=handle, args=(job.job_id, store, settings(), None, bell))
    runner.start()
    deadline = time.monotonic() + 10
    while store.read(job.job_id).record["status"] != "running":
        assert time.monotonic() < deadline, "never claimed"
        time.sleep(0.02)
    assert store.read_blob(place_name("k", 0)).data != b""  # held while it runs
    while (store.read(job.job_id).record.get("error") or {}).get("type") != "TimedOut":
        assert time.monotonic() < deadline, "the timeout did not bound the stage"
        time.sleep(0.05)
    assert store.read_blob(place_name("k", 0)).data == b""  # given back by the timeout
    released.set()
    runner.join(10)


def test_a_delayed_job_indexed_under_the_old_name_is_still_released() -> None:
    """The hour index before the fan-out (scheduled/<hour>/<id>): still read and released."""
    store, bell = MemoryStore(), Bell()
    job = post(store, bell, {"pipeline": "demo", "delay_seconds": 7200})
    run_at = NOW + timedelta(hours=2)
    store.delete_blob(timing.scheduled_name(job.job_id, run_at))  # as an older version
    store.put_blob(timing.legacy_scheduled_name(job.job_id, run_at), b"", generation=0)
    due = sweeper.run_once(context(store, bell, settings()), run_at + timedelta(seconds=1))
    assert due.released == 1 and bell.rung == [job.job_id] and scheduled(store) == []
    later = Clock(run_at + timedelta(seconds=2))
    assert handle(job.job_id, store, settings(), later).kind == OutcomeKind.DONE
