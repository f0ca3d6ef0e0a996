"""Hostile records against the status read, claim (with its drain) and the sweep,
in process on the in-memory store, with the clock in the test's hands.

Each must answer, report or skip: never raise, never answer what JSON cannot
carry, and never pin a job. "Pinned" means a record that still owes work after
the watchdog and claims have had days and several rounds to move it; the only
other acceptable end is a record the sweep reports as corrupt (left for a
person, untouched).

The @example corpus holds the records that found the defects of issue 16.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fuzz_support import fuzz
from hypothesis import assume, example, given
from hypothesis import strategies as st
from strategies import base_record, hostile_record, is_quick, nest, odd_segment

from shared import job_queue, status, sweeper
from shared.config import Settings
from shared.drain import DrainGate
from shared.outcome import BUSY
from shared.runner import handle_delivery
from shared.slots import Slots
from shared.storage import CorruptRecord
from shared.storage_memory import MemoryStore

JOB = "fuzz-job"
BATCH = "fuzz-batch"
START = datetime(2026, 1, 2, tzinfo=UTC)
ROUNDS = 4
SETTINGS = Settings.from_env(
    {},
    stale_seconds=60.0,
    max_attempts=3,
    backoff_base_seconds=0.0,
    backoff_max_seconds=0.0,
    min_write_interval_seconds=0.0,
)


class Bell:
    def __init__(self) -> None:
        self.rung: list[str] = []

    def ring(self, job_id: str) -> None:
        self.rung.append(job_id)

    def ring_many(self, job_ids: Any) -> list[str]:
        self.rung.extend(job_ids)
        return []


def _text(record: dict[str, Any], **replace: str) -> bytes:
    """A record as JSON text with some fields replaced by raw JSON text."""
    fields = {k: json.dumps(v) for k, v in record.items()}
    fields.update(replace)
    return ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}").encode()


def _plain(body: Any) -> None:
    """The body must be JSON any client can parse: no NaN/Infinity, no Python objects."""
    json.dumps(body, allow_nan=False)


def _deliver(store: MemoryStore, bell: Bell, at: datetime) -> str:
    outcome = handle_delivery(
        JOB, store, bell, SETTINGS, now=lambda: at, slots=Slots(2), gate=DrainGate()
    )
    assert outcome.kind != BUSY
    _plain(outcome.to_json())
    return outcome.kind


INF_PAYLOAD = _text(base_record(JOB), payload='{"stages":1,"x":1e400}')
INF_ATTEMPTS = _text(base_record(JOB, "running"), attempts="1e400")
INF_UPDATED = _text(base_record(JOB, "running"), rescues="-1E+999")
DEEP_PAYLOAD = _text(base_record(JOB), payload=nest('{"stages":1}', 495)[:-1] + ',"stages":1}')
DEEP_STATE = _text(
    base_record(JOB, "running"),
    checkpoint='{"next_stage":0,"state":' + nest("0", 495) + "}",
)
HISTORY_NOT_A_LIST = _text(base_record(JOB, "done"), history='"not a list"')


@fuzz(examples=400)
@given(data=hostile_record(JOB), odd=st.none() | odd_segment)
@example(data=INF_PAYLOAD, odd=None)
@example(data=INF_ATTEMPTS, odd=None)
@example(data=INF_UPDATED, odd=None)
@example(data=DEEP_PAYLOAD, odd=None)
@example(data=DEEP_STATE, odd=None)
@example(data=HISTORY_NOT_A_LIST, odd="has space")
def test_a_hostile_record_is_answered_reported_or_skipped_never_pinned(
    data: bytes, odd: str | None
) -> None:
    assume(is_quick(data))
    store, bell = MemoryStore(), Bell()
    store.put_raw(JOB, data)
    store.add_pending(JOB)
    store.add_to_batch(BATCH, JOB)
    if odd is not None:  # a foreign object in the pending index and in the batch
        store.put_object(store.bucket_name, f"pending/{odd}", b"")
        store.put_object(store.bucket_name, f"batches/{BATCH}/{odd}", b"")

    view = status.job_view(store, bell, SETTINGS, JOB, START)
    assert view.status in (200, 409), view.body
    _plain(view.body)
    batch = status.batch_view(store, bell, SETTINGS, BATCH, START)
    assert batch.status in (200, 404), batch.body
    _plain(batch.body)

    at = START
    for _ in range(ROUNDS):
        _deliver(store, bell, at)
        at += timedelta(days=2)
        swept = sweeper.run_once(store, bell, SETTINGS, at)
        assert swept.errors == 0, swept.to_json()
        _plain(swept.to_json())

    try:
        record = store.read(JOB).record
    except CorruptRecord:
        assert JOB in sweeper.run_once(store, bell, SETTINGS, at).corrupt
        assert store.raw(store.bucket_name, f"jobs/{JOB}.json").data == data  # untouched
        return
    assert job_queue.is_terminal(record), f"pinned: {record.get('status')} after {ROUNDS} rounds"


def test_the_corpus_is_still_hostile() -> None:
    """The corpus stays meaningful: each example really carries what found a defect."""
    assert b"1e400" in INF_PAYLOAD and b'"attempts":1e400' in INF_ATTEMPTS
    assert DEEP_PAYLOAD.count(b'{"a":') == 495
    assert b'"history":"not a list"' in HISTORY_NOT_A_LIST
