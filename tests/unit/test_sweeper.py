"""Sweep and recovery decisions on MemoryStore: rescue, re-ring, fail, index repair,
corrupt records left alone, bounds, and CAS safety when two actors race."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, records, sweeper
from shared.config import Settings
from shared.errors import Unavailable
from shared.features.table import context
from shared.recovery import recover
from shared.shards import TIME_INDEX_FANOUT
from shared.storage import job_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell


def settings(**kw: Any) -> Settings:
    return Settings.from_env({}, **{"stale_seconds": 30.0, **kw})


NOW = datetime.now(UTC)
LONG_AGO = NOW - timedelta(seconds=300)


def submit(store: MemoryStore, *, at: datetime = LONG_AGO, **fields: Any) -> str:
    job_id = records.new_job_id()
    store.add_pending(job_id)
    store.create({**records.new_record(job_id, "demo", {}, at), **fields})
    return job_id


def claim(store: MemoryStore, job_id: str, at: datetime = LONG_AGO, owner: str = "gone") -> None:
    stored = store.read(job_id)
    store.update(
        {**stored.record, **job_queue.claim_fields(stored.record, owner, at)}, stored.generation
    )


def sweep(store: MemoryStore, bell: Bell | None = None, **kw: Any) -> sweeper.SweepResult:
    s = settings(**kw.pop("s", {}))
    return sweeper.run_once(context(store, bell or Bell(), s), kw.pop("now", NOW), **kw)


def pending(store: MemoryStore) -> list[str]:
    return [e.job_id for e in store.list_pending()]


def test_stale_running_job_is_rescued_and_rung() -> None:
    store = MemoryStore()
    job_id = submit(store)
    claim(store, job_id)
    bell = Bell()
    result = sweep(store, bell)
    assert (result.examined, result.rescued, result.requeued, result.rung) == (1, 1, 0, 1)
    job = store.read(job_id).record
    assert job["status"] == "queued" and job["owner"] is None and job["rescues"] == 1
    assert job["history"][-1]["event"] == "rescued"
    assert bell.rung == [job_id] and pending(store) == [job_id]


def test_queued_job_with_a_lost_doorbell_is_rung_again() -> None:
    store = MemoryStore()
    job_id = submit(store)
    bell = Bell()
    result = sweep(store, bell)
    assert (result.requeued, result.rescued, result.rung) == (1, 0, 1)
    job = store.read(job_id).record
    assert job["status"] == "queued" and job["rescues"] == 0
    assert job_queue.parse_time(job["updated_at"]) == NOW
    assert bell.rung == [job_id]


def test_healthy_jobs_are_left_alone() -> None:
    store = MemoryStore()
    fresh_queued = submit(store, at=NOW)
    fresh_running = submit(store, at=NOW)
    claim(store, fresh_running, at=NOW, owner="alive")
    # due later than the retry window (90 s): nothing to ring ahead yet (test_retry_on_time)
    backing_off = submit(store, not_before=job_queue.format_time(NOW + timedelta(seconds=120)))
    gens = {j: store.read(j).generation for j in (fresh_queued, fresh_running, backing_off)}
    bell = Bell()
    result = sweep(store, bell)
    assert result.examined == 3 and bell.rung == []
    assert (result.requeued, result.rescued, result.failed, result.repaired) == (0, 0, 0, 0)
    assert result.rung_ahead == 0
    assert {j: store.read(j).generation for j in gens} == gens


def test_exhausted_stale_job_fails_with_its_history() -> None:
    store = MemoryStore()
    job_id = submit(store, max_attempts=1)
    claim(store, job_id)
    result = sweep(store)
    assert result.failed == 1
    job = store.read(job_id).record
    assert job["status"] == "failed" and job["attempts"] == 1
    assert job["error"]["type"] == "AttemptsExhausted" and "1 of 1" in job["error"]["message"]
    assert [e["event"] for e in job["history"]] == ["submitted", "claimed", "failed"]
    assert pending(store) == []


def test_terminal_record_with_a_marker_is_repaired() -> None:
    store = MemoryStore()
    job_id = submit(store, status="done", result={})
    gen = store.read(job_id).generation
    result = sweep(store)
    assert result.repaired == 1 and pending(store) == []
    assert store.read(job_id).generation == gen


def test_marker_without_record_is_removed_only_after_the_grace() -> None:
    store = MemoryStore()
    store.add_pending("in-flight")
    result = sweep(store, now=datetime.now(UTC))
    assert result.repaired == 0 and pending(store) == ["in-flight"]
    result = sweep(store, now=datetime.now(UTC) + timedelta(seconds=61))
    assert result.repaired == 1 and pending(store) == []


def test_corrupt_and_hand_edited_records_do_not_crash_the_sweep() -> None:
    store = MemoryStore()
    store.add_pending("corrupt-1")
    gen = store.put_raw("corrupt-1", b"\xff not json")
    store.add_pending("wrong-schema")
    store.put_raw("wrong-schema", json.dumps({"schema": 99, "id": "wrong-schema"}).encode())
    garbage_attempts = submit(store, attempts="lots")
    future = submit(store)
    claim(store, future)
    stored = store.read(future)
    store.update({**stored.record, "updated_at": "2999-01-01T00:00:00+00:00"}, stored.generation)
    healthy = submit(store)
    result = sweep(store)
    assert sorted(result.corrupt) == ["corrupt-1", "wrong-schema"]
    assert result.errors == 0 and result.examined == 5
    raw = store.raw(store.bucket_name, job_object("corrupt-1"))
    assert raw is not None and raw.generation == gen and raw.data == b"\xff not json"
    assert {"corrupt-1", "wrong-schema"} <= set(pending(store))  # reported again next time
    assert store.read(garbage_attempts).record["status"] == "failed"
    assert store.read(future).record["status"] == "queued"  # a future date cannot pin it
    assert store.read(healthy).record["status"] == "queued"


def test_sweep_is_bounded_by_jobs_and_time() -> None:
    store = MemoryStore()
    for _ in range(5):
        submit(store)
    result = sweep(store, s={"sweep_max_jobs": 2})
    assert result.examined == 2 and result.truncated
    ticks = iter(range(0, 1000, 10))
    result = sweep(store, s={"sweep_max_seconds": 15}, monotonic=lambda: float(next(ticks)))
    assert result.examined == 1 and result.truncated


def test_sweep_costs_one_listing_and_never_lists_history() -> None:
    store = MemoryStore()
    for _ in range(3):
        submit(store, at=NOW)
    done = submit(store, at=NOW, status="done", result={})
    store.remove_pending(done)
    before = dict(store.calls)
    sweep(store)
    # the first run checks the features' indexes whole for the index board
    # (shared.hints.index_board: the scheduled/ fan-out slots and the names before them;
    # unique/; flow control's parked/ and waiting-for/; the workflows' open markers; the
    # waits' repair objects), limit 1 each: all empty
    assert store.calls["list"] - before.get("list", 0) == 1 + 6 + TIME_INDEX_FANOUT
    before = dict(store.calls)
    sweep(store)
    # from then on: pending/ alone, whatever the history holds; the three records and the
    # board
    assert store.calls["list"] - before.get("list", 0) == 1
    assert store.calls["read"] - before.get("read", 0) == 3 + 1


def test_a_failed_ring_is_counted_and_retried_next_time() -> None:
    store = MemoryStore()
    job_id = submit(store)
    result = sweep(store, Bell(fail=True))
    assert result.requeued == 1 and result.rung == 0
    later = NOW + timedelta(seconds=31)
    bell = Bell()
    assert sweep(store, bell, now=later).rung == 1 and bell.rung == [job_id]


def test_a_backlog_waiting_past_the_stale_time_is_re_rung_less_often_each_time() -> None:
    """Stale 30 s: re-rung at once (stale since LONG_AGO), then past 60 s, then past 120 s;
    a sweep in between rings nothing and writes nothing. The marker carries the count."""
    store = MemoryStore()
    job_id = submit(store)
    rings = []
    for offset in (0, 31, 61, 100, 182, 250, 302):
        bell = Bell()
        sweep(store, bell, now=NOW + timedelta(seconds=offset))
        rings += [offset] * len(bell.rung)
    assert rings == [0, 61, 182]
    assert job_queue.rerings(store.read(job_id).record) == 3
    assert [e.rerings for e in store.list_pending()] == [3]


def test_recover_losing_the_race_returns_the_fresh_record() -> None:
    store = MemoryStore()
    job_id = submit(store)
    claim(store, job_id)
    seen = store.read(job_id)
    assert sweep(store).rescued == 1  # another sweep acted first
    bell = Bell()
    done = recover(context(store, bell, settings()), seen, NOW)
    action, fresh = done.action, done.stored
    assert action is None and fresh.record["status"] == "queued"
    assert fresh.generation == store.read(job_id).generation and bell.rung == []
    assert store.read(job_id).record["rescues"] == 1


def test_recover_leaves_a_terminal_marker_unless_asked() -> None:
    store = MemoryStore()
    job_id = submit(store, status="failed")
    deletes = store.calls["delete"]
    action = recover(context(store, Bell(), settings()), store.read(job_id), NOW).action
    assert action is None and store.calls["delete"] == deletes and pending(store) == [job_id]
    recover(context(store, Bell(), settings()), store.read(job_id), NOW, clean_marker=True)
    assert pending(store) == []


def test_per_entry_errors_are_counted_not_raised() -> None:
    class Flaky(MemoryStore):
        def read(self, job_id: str) -> Any:
            if job_id == "boom":
                raise Unavailable("network down")
            return super().read(job_id)

    store = Flaky()
    store.add_pending("boom")
    other = submit(store)
    result = sweep(store)
    assert result.errors == 1 and result.requeued == 1
    assert store.read(other).record["status"] == "queued"
    assert json.dumps(result.to_json())


def test_a_bug_is_not_counted_as_a_per_entry_error() -> None:
    class Buggy(MemoryStore):
        def read(self, job_id: str) -> Any:
            if job_id == "boom":
                raise TypeError("a bug, not an outage")
            return super().read(job_id)

    store = Buggy()
    store.add_pending("boom")
    with pytest.raises(TypeError):
        sweep(store)


class _ReadLog(MemoryStore):
    """A MemoryStore that remembers which records were read, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.read_ids: list[str] = []

    def read(self, job_id: str) -> Any:
        self.read_ids.append(job_id)
        return super().read(job_id)


def _backlog(store: MemoryStore, later: datetime, deep: str) -> list[str]:
    """48 queued jobs whose doorbells are fresh at `later` (marked due then), and one,
    `deep` (last in name order), queued long before with its doorbell lost."""
    ids = [f"{c}{n}" for c in "0123456789abcdef" for n in range(3)]
    for job_id in ids:
        store.add_pending(job_id, pipeline="demo")
        store.create(records.new_record(job_id, "demo", {}, later))
        store.mark_due(job_id, later)
    store.add_pending(deep, pipeline="demo")
    store.create(records.new_record(deep, "demo", {}, NOW))
    return ids


def test_a_lost_doorbell_deep_in_a_backlog_larger_than_one_run_is_rung_by_the_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = _ReadLog()
    later = datetime.now(UTC) + timedelta(seconds=120)  # the sweep's clock: deep is stale
    _backlog(store, later, deep="zz-deep")
    bell = Bell()
    capsys.readouterr()
    result = sweeper.run_once(context(store, bell, settings(sweep_max_jobs=10)), later)
    assert bell.rung == ["zz-deep"] and result.requeued == 1
    assert store.read_ids[0] == "zz-deep"  # what may need action is read first
    assert (result.listed, result.examined, result.unread, result.truncated) == (49, 1, 48, True)
    assert store.read_ids == ["zz-deep"]  # the fresh markers need nothing: left unread
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    demo = next(e for e in lines if e.get("metric") == "queue" and e["pipeline"] == "demo")
    assert (demo["queued"], demo["unread"]) == (49, 48)  # the whole backlog, every run


def test_an_index_within_the_read_budget_is_one_listing_and_every_record_read() -> None:
    store = _ReadLog()
    for job_id in ("a", "b", "c"):
        store.add_pending(job_id)
    store.calls.clear()
    result = sweeper.run_once(context(store, Bell(), settings(sweep_max_jobs=3)), NOW)
    assert sorted(store.read_ids) == ["a", "b", "c"] and not result.truncated
    assert store.calls["list"] == 7 + TIME_INDEX_FANOUT  # the pending index, the passes
