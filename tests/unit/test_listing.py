"""shared.listing: by batch, by the pending index, or over the history; unreadable
records are reported beside the listing."""

from __future__ import annotations

from datetime import UTC, datetime

from shared import listing, records
from shared.config import Settings
from shared.jobs import JobStatus
from shared.seams import Context
from shared.storage import pending_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell

NOW = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def _ctx(store: MemoryStore) -> Context:
    return Context(store, Bell(), Settings.from_env({}))


def make_job(store: MemoryStore, job_id: str, status: JobStatus, batch: str | None) -> None:
    stored = store.create(records.new_record(job_id, "demo", {}, NOW, batch_id=batch))
    store.update({**stored.record, "status": status}, stored.generation)
    if status in (JobStatus.QUEUED, JobStatus.RUNNING):
        store.add_pending(job_id)
    if batch is not None:
        store.add_to_batch(batch, job_id)


def test_list_uses_the_batch_the_pending_index_or_history() -> None:
    store = MemoryStore()
    statuses = [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.DONE, JobStatus.FAILED]
    for i, status in enumerate(statuses):
        make_job(store, f"j{i}", status, "b1" if i % 2 == 0 else None)
    store.put_raw("bad", b"{not json")
    store.add_to_batch("b1", "bad")
    store.add_to_batch("b1", "gone")

    in_batch = listing.list_jobs(_ctx(store), status=None, batch="b1", limit=None)
    assert sorted(r["id"] for r in in_batch.records) == ["j0", "j2"]
    assert list(in_batch.corrupt) == ["bad"]
    assert in_batch.missing == ["gone"]

    store.calls.clear()
    running = listing.list_jobs(_ctx(store), status=JobStatus.RUNNING, batch=None, limit=None)
    assert [r["id"] for r in running.records] == ["j1"]
    assert store.calls["read"] == 2  # only the pending ones were read

    failed = listing.list_jobs(_ctx(store), status=JobStatus.FAILED, batch=None, limit=None)
    assert [r["id"] for r in failed.records] == ["j3"]
    assert len(listing.list_jobs(_ctx(store), status=None, batch=None, limit=2).records) == 2


def test_read_many_keeps_the_order_and_sets_the_unreadable_apart() -> None:
    store = MemoryStore()
    for job_id in ("c", "a", "b"):
        make_job(store, job_id, JobStatus.QUEUED, None)
    store.put_raw("bad", b"\x00")
    got = listing.read_many(store, ["c", "gone", "a", "bad", "b"])
    assert [r["id"] for r in got.records] == ["c", "a", "b"]
    assert got.missing == ["gone"] and list(got.corrupt) == ["bad"] and got.scanned == 5
    assert listing.read_many(store, []).records == []


def test_pending_ids_are_the_index_in_name_order() -> None:
    store = MemoryStore()
    for job_id in ("b", "a", "c"):
        store.add_pending(job_id)
    in_order = sorted("abc", key=lambda j: pending_object(j))  # by hash segment
    assert listing.pending_ids(store) == in_order
    assert listing.pending_ids(store, limit=1) == in_order[:1]


def test_a_foreign_name_in_an_index_is_reported_beside_the_listing() -> None:
    """An object under pending/ or batches/<id>/ whose name is no job id (a hand edit)
    is reported with the unreadable records, never fatal to the listing (issue 16)."""
    store = MemoryStore()
    make_job(store, "j0", JobStatus.QUEUED, "b1")
    for name in ("pending/not an id", "batches/b1/..", "batches/b1/a b"):
        store.put_object(store.bucket_name, name, b"")
    queued = listing.list_jobs(_ctx(store), status=JobStatus.QUEUED, batch=None, limit=None)
    assert [r["id"] for r in queued.records] == ["j0"] and list(queued.corrupt) == ["not an id"]
    in_batch = listing.list_jobs(_ctx(store), status=None, batch="b1", limit=None)
    assert [r["id"] for r in in_batch.records] == ["j0"]
    assert sorted(in_batch.corrupt) == ["..", "a b"]
    many = listing.read_many(store, ["j0", "not an id"])
    assert [r["id"] for r in many.records] == ["j0"] and list(many.corrupt) == ["not an id"]
