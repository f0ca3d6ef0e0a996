"""The waiting read's pure parts on the in-memory store: it polls only metadata, backs
off, answers on the first change past `after`, and refuses a bad wait or after."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared import records
from shared.errors import InvalidInput, JobNotFound
from shared.http import waiting
from shared.stores.memory import MemoryStore


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self.on_sleep = lambda: None

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.on_sleep()

    def monotonic(self) -> float:
        return self.now


def stored_job(store: MemoryStore) -> int:
    record = records.new_record("w1", "demo", {}, datetime(2026, 7, 26, tzinfo=UTC))
    return store.create(record).generation


def test_a_quiet_wait_backs_off_to_the_cap_and_reads_no_body() -> None:
    store, t = MemoryStore(), FakeTime()
    generation = stored_job(store)
    reads, stats = store.calls["read"], store.calls["stat"]
    got = waiting.wait_for_change(store, "w1", 20.0, sleep=t.sleep, monotonic=t.monotonic)
    assert got.changed is False and got.generation == generation
    assert t.slept[:5] == [0.25, 0.5, 1.0, 2.0, 4.0] and max(t.slept) == waiting.POLL_MAX_S
    assert sum(t.slept) == pytest.approx(20.0)
    assert store.calls["read"] == reads and store.calls["stat"] - stats == got.polls


def test_it_answers_on_the_first_change_past_after() -> None:
    store, t = MemoryStore(), FakeTime()
    generation = stored_job(store)

    def write_once() -> None:
        if len(t.slept) == 3:
            current = store.read("w1")
            store.update({**current.record, "stage": "s1"}, current.generation)

    t.on_sleep = write_once
    got = waiting.wait_for_change(
        store, "w1", 50.0, after=generation, sleep=t.sleep, monotonic=t.monotonic
    )
    assert got.changed and got.generation != generation and got.polls == 4
    stale = waiting.wait_for_change(store, "w1", 50.0, after=1, sleep=t.sleep)
    assert stale.changed and stale.polls == 1  # already past what the caller saw


def test_a_missing_job_and_bad_parameters_are_refused() -> None:
    with pytest.raises(JobNotFound):
        waiting.wait_for_change(MemoryStore(), "nope", 1.0, sleep=lambda _s: None)
    assert waiting.parse_wait(None) == 0.0 and waiting.parse_wait("2.5") == 2.5
    assert waiting.parse_after("17") == 17 and waiting.parse_after(None) is None
    for bad in ("", "-1", "61", "nan", "inf", "x"):
        with pytest.raises(InvalidInput):
            waiting.parse_wait(bad)
    for bad in ("", "0", "-3", "1.5", "9" * 21):
        with pytest.raises(InvalidInput):
            waiting.parse_after(bad)


def finish(store: MemoryStore) -> None:
    current = store.read("w1")
    store.update({**current.record, "status": "done"}, current.generation)


def test_until_ended_sees_writes_without_answering_and_ends_on_the_status() -> None:
    store, t = MemoryStore(), FakeTime()
    stored_job(store)
    reads = store.calls["read"]

    def heartbeat_then_finish() -> None:
        if len(t.slept) < 6:  # a running job's writes: seen, not answered
            current = store.read("w1")
            store.update({**current.record, "stage": f"s{len(t.slept)}"}, current.generation)
        elif len(t.slept) == 6:
            finish(store)

    t.on_sleep = heartbeat_then_finish
    got = waiting.wait_for_end(store, "w1", 60.0, sleep=t.sleep, monotonic=t.monotonic)
    assert got.ended and got.polls == 7
    assert t.slept == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # backs off to POLL_MAX_ENDED_S
    assert store.calls["read"] - reads == 6  # the test's own reads: the wait read no body


def test_until_ended_reads_the_body_of_a_record_written_without_status_metadata() -> None:
    store, t = MemoryStore(), FakeTime()
    done = records.new_record("w1", "demo", {}, datetime(2026, 7, 26, tzinfo=UTC))
    store.put_raw("w1", records.encode({**done, "status": "done"}))  # no metadata
    reads = store.calls["read"]
    got = waiting.wait_for_end(store, "w1", 10.0, sleep=t.sleep, monotonic=t.monotonic)
    assert got.ended and got.polls == 1 and store.calls["read"] == reads + 1


def test_until_ended_times_out_on_a_running_job_and_refuses_bad_values() -> None:
    store, t = MemoryStore(), FakeTime()
    stored_job(store)
    got = waiting.wait_for_end(store, "w1", 20.0, sleep=t.sleep, monotonic=t.monotonic)
    assert not got.ended and not got.changed and sum(t.slept) == pytest.approx(20.0)
    assert waiting.parse_until(None) == "changed" and waiting.parse_until("ended") == "ended"
    for bad in ("", "done", "ENDED"):
        with pytest.raises(InvalidInput):
            waiting.parse_until(bad)
    with pytest.raises(JobNotFound):
        waiting.wait_for_end(MemoryStore(), "nope", 1.0, sleep=lambda _s: None)
