"""Records written before the vocabulary was typed still read, round-trip byte for
byte, and move on under today's code.

The files in records/ were written by the queue itself (submit, claim, stage
error, checkpoint, sweep rescue, cancel, retry, upload) before JobStatus, the
TypedDicts and OutcomeKind existed; the stored JSON must not have changed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import job_queue, records
from shared.jobs import JobRecord, JobStatus
from shared.stores.memory import MemoryStore

RECORDS = sorted((Path(__file__).parent / "records").glob("*.json"))
LATER = datetime(2027, 1, 1, tzinfo=UTC)


def test_there_are_fixtures_of_every_status() -> None:
    statuses = {records.decode(path.read_bytes())["status"] for path in RECORDS}
    assert statuses == set(JobStatus)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_an_old_record_reads_typed_and_round_trips(path: Path) -> None:
    data = path.read_bytes()
    record = records.decode(data)
    assert type(record["status"]) is JobStatus
    assert records.encode(record) == data
    assert json.loads(records.encode(record)) == json.loads(data)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_todays_code_moves_an_old_record_on(path: Path) -> None:
    store = MemoryStore()
    job_id = json.loads(path.read_bytes())["id"]
    store.put_raw(job_id, path.read_bytes())
    stored = store.read(job_id)
    job = stored.record
    if job["status"] in job_queue.PENDING_STATUSES:
        new: JobRecord = {**job, **job_queue.cancel_fields(job, LATER, by="test")}
    else:
        assert job_queue.stale_action(job, LATER, 30, 3) is None
        if job["status"] not in job_queue.RETRYABLE_STATUSES:
            return
        new = {**job, **job_queue.retry_fields(job, LATER, by="test", default_max_attempts=3)}
    written = store.update(new, stored.generation)
    again = store.read(job_id).record
    assert again == written.record
    assert again["history"][: len(job["history"])] == job["history"]
