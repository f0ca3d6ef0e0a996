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

import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import assume, example, given
from hypothesis import strategies as st

from shared import job_queue, status, sweeper
from shared.claim.drain import DrainGate
from shared.claim.runner import handle_delivery
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import BatchNotFound, CorruptRecord
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.storage import job_object
from shared.stores.memory import MemoryStore
from tests.fuzz.fuzz_support import fuzz
from tests.fuzz.strategies import (
    base_record,
    hostile_record,
    is_quick,
    nest,
    odd_segment,
    record_text,
)
from tests.unit.unit_support import Bell

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


def _plain(body: Any) -> None:
    """The body must be JSON any client can parse: no NaN/Infinity, no Python objects."""
    json.dumps(body, allow_nan=False)


def _deliver(store: MemoryStore, bell: Bell, at: datetime) -> str:
    ctx = context(store, bell, SETTINGS, lambda: at)
    outcome = handle_delivery(ctx, JOB, slots=Slots(2), gate=DrainGate())
    assert outcome.kind != OutcomeKind.BUSY
    _plain(outcome.to_json())
    return outcome.kind


INF_PAYLOAD = record_text(base_record(JOB), payload='{"stages":1,"x":1e400}')
INF_ATTEMPTS = record_text(base_record(JOB, "running"), attempts="1e400")
INF_UPDATED = record_text(base_record(JOB, "running"), rescues="-1E+999")
DEEP_PAYLOAD = record_text(
    base_record(JOB), payload=nest('{"stages":1}', 495)[:-1] + ',"stages":1}'
)
DEEP_STATE = record_text(
    base_record(JOB, "running"),
    checkpoint='{"next_stage":0,"state":' + nest("0", 495) + "}",
)
HISTORY_NOT_A_LIST = record_text(base_record(JOB, "done"), history='"not a list"')
# stale and running: the watchdog requeues it and rings with the record's trace
TRACE_NOT_A_STRING = record_text(base_record(JOB, "running"), traceparent='{"x":1e300}')


@fuzz(examples=400)
@given(data=hostile_record(JOB), odd=st.none() | odd_segment)
@example(data=INF_PAYLOAD, odd=None)
@example(data=INF_ATTEMPTS, odd=None)
@example(data=INF_UPDATED, odd=None)
@example(data=DEEP_PAYLOAD, odd=None)
@example(data=DEEP_STATE, odd=None)
@example(data=HISTORY_NOT_A_LIST, odd="has space")
@example(data=TRACE_NOT_A_STRING, odd=None)
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

    with contextlib.suppress(CorruptRecord):  # the HTTP API's 409; anything else fails
        _plain(status.read_job(context(store, bell, SETTINGS), JOB, START).to_json())
    with contextlib.suppress(BatchNotFound):  # the HTTP API's 404 (no record names it)
        _plain(status.read_batch(context(store, bell, SETTINGS), BATCH, START).to_json())

    at = START
    for _ in range(ROUNDS):
        _deliver(store, bell, at)
        at += timedelta(days=2)
        swept = sweeper.run_once(context(store, bell, SETTINGS), at)
        assert swept.errors == 0, swept.to_json()
        _plain(swept.to_json())

    try:
        record = store.read(JOB).record
    except CorruptRecord:
        assert JOB in sweeper.run_once(context(store, bell, SETTINGS), at).corrupt
        assert store.raw(store.bucket_name, job_object(JOB)).data == data  # untouched
        return
    assert job_queue.is_terminal(record), f"pinned: {record.get('status')} after {ROUNDS} rounds"


def test_the_corpus_is_still_hostile() -> None:
    """The corpus stays meaningful: each example really carries what found a defect."""
    assert b"1e400" in INF_PAYLOAD and b'"attempts":1e400' in INF_ATTEMPTS
    assert DEEP_PAYLOAD.count(b'{"a":') == 495
    assert b'"history":"not a list"' in HISTORY_NOT_A_LIST
