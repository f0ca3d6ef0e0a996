"""Concurrent submits of one id with different batches (issue 16, defect 3): the
loser's 409 must write nothing, even when both passed the existence check before
either created the record. First with the interleaving forced (in memory, a
barrier in front of the record create), then racing for real over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from shared import status
from shared.config import Settings
from shared.errors import BatchNotFound, Conflict
from shared.features.table import context
from shared.queue import parse_submission
from shared.storage import Stored
from shared.stores.memory import MemoryStore
from shared.submission import create as submission
from tests.fuzz.fuzz_support import Functions, functions
from tests.unit.unit_support import Bell

SETTINGS = Settings.from_env({})
NOW = datetime(2026, 1, 2, tzinfo=UTC)


class MeetBeforeCreate(MemoryStore):
    """Both submits reach the record create before either creates: the race's worst order."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=10)

    def create(self, record: dict[str, Any], *, fresh_id: bool = False) -> Stored:
        self.barrier.wait()
        return super().create(record, fresh_id=fresh_id)


def _submit(store: MemoryStore, batch: str) -> int:
    """The HTTP status POST /jobs would answer (shared.http.edge maps Conflict to 409)."""
    body = {"pipeline": "demo", "id": "same-id", "batch_id": batch}
    parsed = parse_submission(body, SETTINGS)
    try:
        return (
            202
            if submission.submit(context(store, Bell(), Settings.from_env({})), parsed, NOW).created
            else 200
        )
    except Conflict:
        return 409


def _batch_members(store: MemoryStore, batch: str) -> list[str] | None:
    """The ids GET /batches/<batch> lists; None for its 404."""
    try:
        view = status.read_batch(context(store, Bell(), SETTINGS), batch, NOW)
    except BatchNotFound:
        return None
    return [str(m["id"]) for m in view.members]


def test_the_loser_of_a_forced_race_leaves_no_batch_marker() -> None:
    store = MeetBeforeCreate(parties=2)
    with ThreadPoolExecutor(2) as pool:
        answers = dict(
            zip(
                ("b-one", "b-two"),
                pool.map(lambda b: _submit(store, b), ("b-one", "b-two")),
                strict=True,
            )
        )
    assert sorted(answers.values()) == [202, 409]
    winner = next(b for b, code in answers.items() if code == 202)
    loser = next(b for b, code in answers.items() if code == 409)
    assert store.names("batches/") == [f"batches/{winner}/same-id"]
    assert store.read("same-id").record["batch_id"] == winner
    assert _batch_members(store, loser) is None


def test_a_batch_view_lists_only_jobs_whose_record_names_the_batch() -> None:
    """A stray marker (left by a crash, or by an older version) is not membership."""
    store = MemoryStore()
    assert _submit(store, "b-real") == 202
    store.add_to_batch("b-stray", "same-id")
    assert _batch_members(store, "b-stray") is None
    store.add_to_batch("b-stray", "other")  # a marker without a record: shown as missing
    assert _batch_members(store, "b-stray") == ["other"]


@pytest.fixture(scope="module")
def submit_fn(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, log_dir: Path
) -> Iterator[Functions]:
    with functions(
        emulator_env, gcs_client, publisher, log_dir, (("submit", "submit"),), {"THREADS": "8"}
    ) as fns:
        yield fns


@pytest.mark.parametrize("round_", range(3))
def test_racing_submits_over_http_leave_only_the_winners_marker(
    submit_fn: Functions, round_: int
) -> None:
    url = submit_fn.urls["submit"]
    job_id = f"race-{round_}"
    batches = [f"race-{round_}-b{i}" for i in range(6)]
    start = threading.Barrier(len(batches))

    def post(batch: str) -> int:
        start.wait()
        body = {"pipeline": "demo", "id": job_id, "batch_id": batch}
        return requests.post(f"{url}/jobs", json=body, timeout=30).status_code

    with ThreadPoolExecutor(len(batches)) as pool:
        codes = dict(zip(batches, pool.map(post, batches), strict=True))
    assert sorted(codes.values()) == [202] + [409] * (len(batches) - 1), codes
    winner = next(b for b, code in codes.items() if code == 202)
    assert submit_fn.names(f"batches/race-{round_}-") == {f"batches/{winner}/{job_id}"}
    for batch, code in codes.items():
        view = requests.get(f"{url}/batches/{batch}", timeout=10)
        assert view.status_code == (200 if code == 202 else 404), (batch, view.text)


def test_a_replay_restores_a_batch_marker_a_crash_left_out() -> None:
    """The marker now follows the record: a crash between the two is repaired by the
    client's retry (same id, same content), which answers 200 and re-adds it."""
    store = MemoryStore()
    assert _submit(store, "b-crash") == 202
    store._objects.pop((store.bucket_name, "batches/b-crash/same-id"))
    assert _batch_members(store, "b-crash") is None
    assert _submit(store, "b-crash") == 200
    assert store.names("batches/") == ["batches/b-crash/same-id"]
