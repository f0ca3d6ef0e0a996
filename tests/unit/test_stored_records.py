"""Records written by earlier code still read, and round-trip byte for byte.

The files in records/ were written by the queue itself (submit, claim, stage
error, checkpoint, sweep rescue, cancel, retry, upload) before the vocabulary
was typed; nothing about the stored JSON may change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import job_queue, records

RECORDS = sorted((Path(__file__).parent / "records").glob("*.json"))


def test_there_are_fixtures_of_every_status() -> None:
    statuses = {records.decode(path.read_bytes())["status"] for path in RECORDS}
    assert statuses == set(job_queue.STATES)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_an_old_record_reads_and_round_trips(path: Path) -> None:
    data = path.read_bytes()
    record = records.decode(data)
    assert records.encode(record) == data
