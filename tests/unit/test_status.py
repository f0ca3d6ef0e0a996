"""shared.status: job and batch views on MemoryStore, with the read-path watchdog."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import records
from shared.config import Settings
from shared.errors import (
    BatchNotFound,
    CorruptRecord,
    InvalidInput,
    JobNotFound,
    Unavailable,
)
from shared.features.table import context
from shared.jobs import MEMBER_MISSING, MEMBER_UNREADABLE, JobStatus
from shared.queue import parse_submission
from shared.status import read_batch, read_job, render_job
from shared.storage import job_object
from shared.stores.memory import MemoryStore
from shared.submission.create import submit
from tests.unit.unit_support import Bell

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SETTINGS = Settings.from_env({})


def run(store: MemoryStore, bell: Bell, body: Any) -> None:
    submit(context(store, bell, Settings.from_env({})), parse_submission(body, SETTINGS), NOW)


def set_status(store: MemoryStore, job_id: str, status: JobStatus, **fields: Any) -> None:
    stored = store.read(job_id)
    store.update({**stored.record, "status": status, **fields}, stored.generation)


# ------------------------------------------------------------------ one job


def test_a_job_view_shows_the_record_and_its_budget() -> None:
    store, bell = MemoryStore(), Bell()
    run(store, bell, {"pipeline": "demo", "id": "v1", "max_attempts": 4})
    view = read_job(context(store, bell, SETTINGS), "v1", NOW)
    assert view.watchdog is None and view.max_attempts == 4
    body = view.to_json()
    assert (body["id"], body["status"], body["attempts"], body["max_attempts"]) == (
        "v1",
        "queued",
        0,
        4,
    )
    assert body["history"][0]["event"] == "submitted" and body["outputs"] == []
    assert "payload" not in body and "write_id" not in body and "watchdog" not in body


def test_a_read_applies_the_watchdog_to_a_silent_owner() -> None:
    store, bell = MemoryStore(), Bell()
    run(store, bell, {"pipeline": "demo", "id": "lost"})
    old = (NOW - timedelta(hours=1)).isoformat()
    set_status(store, "lost", JobStatus.RUNNING, attempts=1, owner="gone", updated_at=old)
    view = read_job(context(store, bell, SETTINGS), "lost", NOW)
    assert view.watchdog == "requeue" and view.to_json()["watchdog"] == "requeue"
    assert view.record["status"] == JobStatus.QUEUED
    assert store.read("lost").record["status"] == JobStatus.QUEUED
    assert bell.rung == ["lost", "lost"]  # submitted, then re-rung by the read


def test_a_read_answers_even_when_the_watchdog_cannot_write() -> None:
    store, bell = MemoryStore(), Bell()
    run(store, bell, {"pipeline": "demo", "id": "stuck"})
    old = (NOW - timedelta(hours=1)).isoformat()
    set_status(store, "stuck", JobStatus.RUNNING, attempts=1, owner="gone", updated_at=old)
    store.inject_failure("write", Unavailable("503 from storage"))
    view = read_job(context(store, bell, SETTINGS), "stuck", NOW)
    assert view.watchdog is None and view.record["status"] == JobStatus.RUNNING


def test_a_bug_in_the_watchdog_is_not_hidden_by_a_read() -> None:
    store, bell = MemoryStore(), Bell()
    run(store, bell, {"pipeline": "demo", "id": "stuck"})
    old = (NOW - timedelta(hours=1)).isoformat()
    set_status(store, "stuck", JobStatus.RUNNING, attempts=1, owner="gone", updated_at=old)
    store.inject_failure("write", TypeError("a bug"))
    with pytest.raises(TypeError):
        read_job(context(store, bell, SETTINGS), "stuck", NOW)


def test_read_errors_name_what_went_wrong_and_touch_nothing() -> None:
    store, bell = MemoryStore(), Bell()
    store.put_raw("bad", b'{"schema": 1}')
    with pytest.raises(JobNotFound, match="no job 'nope'"):
        read_job(context(store, bell, SETTINGS), "nope", NOW)
    with pytest.raises(InvalidInput) as bad_id:
        read_job(context(store, bell, SETTINGS), "a..b", NOW)
    assert bad_id.value.what == "job id"
    with pytest.raises(CorruptRecord) as corrupt:
        read_job(context(store, bell, SETTINGS), "bad", NOW)
    assert corrupt.value.job_id == "bad"
    assert store.raw(store.bucket_name, job_object("bad")).data == b'{"schema": 1}'  # type: ignore[union-attr]


def test_render_tolerates_hand_edited_fields() -> None:
    record: Any = records.new_record("h1", "demo", {}, NOW)
    record.update(attempts="three", max_attempts="x", history="gone", result=["odd"])
    body = render_job(record, SETTINGS.max_attempts)
    assert body["max_attempts"] == SETTINGS.max_attempts and body["outputs"] == []


def test_render_lists_outputs_the_result_points_at() -> None:
    record = records.new_record("o1", "upload-digest", {"bucket": "b", "name": "n"}, NOW)
    record["result"] = {"report": "outputs/o1/1/report.json", "size": 3}
    assert render_job(record, 3)["outputs"] == ["outputs/o1/1/report.json"]


# ------------------------------------------------------------------ batches


def test_a_batch_view_counts_members_missing_and_unreadable_included() -> None:
    store, bell = MemoryStore(), Bell()
    run(
        store,
        bell,
        {"batch_id": "bv", "jobs": [{"pipeline": "demo", "id": f"b{i}"} for i in range(3)]},
    )
    set_status(store, "b0", JobStatus.DONE)
    store.add_to_batch("bv", "ghost")
    store.add_to_batch("bv", "mangled")
    store.put_raw("mangled", b"[]")
    view = read_batch(context(store, bell, SETTINGS), "bv", NOW)
    assert view.counts == {
        "done": 1,
        MEMBER_MISSING: 1,
        "queued": 2,
        MEMBER_UNREADABLE: 1,
    }
    body = view.to_json()
    assert body["total"] == 5 and body["done"] is False and body["truncated"] is False
    for i in (1, 2):
        set_status(store, f"b{i}", JobStatus.CANCELLED)
    assert read_batch(context(store, bell, SETTINGS), "bv", NOW).done is False  # ghost, mangled


def test_a_batch_is_done_when_every_member_is_terminal() -> None:
    store, bell = MemoryStore(), Bell()
    run(store, bell, {"batch_id": "fin", "jobs": [{"pipeline": "demo", "id": "f1"}]})
    set_status(store, "f1", JobStatus.FAILED)
    view = read_batch(context(store, bell, SETTINGS), "fin", NOW)
    assert view.done and view.to_json()["done"] is True
    assert view.members[0]["status"] == JobStatus.FAILED


def test_batch_read_errors() -> None:
    store, bell = MemoryStore(), Bell()
    with pytest.raises(BatchNotFound, match="no batch 'none'"):
        read_batch(context(store, bell, SETTINGS), "none", NOW)
    with pytest.raises(InvalidInput) as bad_id:
        read_batch(context(store, bell, SETTINGS), "x/y", NOW)
    assert bad_id.value.what == "batch id"
