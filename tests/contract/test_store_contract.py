"""The storage seam's contract, proved against MemoryStore and GcsStore alike."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared import records
from shared.errors import AlreadyExists, CorruptRecord, LostRace, NotFound
from shared.storage import RecordStat, Stored, job_object, legacy_job_object, pending_object
from tests.contract.contract_support import Harness, new_job, shards

# --- records ---------------------------------------------------------------------------


def test_create_then_read_round_trips_with_a_write_id(store):
    job = new_job()
    created = store.create(job)
    assert created.generation > 0
    assert created.record == {**job, "write_id": created.record["write_id"]}
    assert len(created.record["write_id"]) == 32
    assert "write_id" not in job  # the caller's dict is not touched
    assert store.read(job["id"]) == created


def test_create_is_create_only(harness: Harness):
    store = harness.store
    job = new_job()
    first = store.create(job)
    before = harness.raw(job_object(job["id"]))
    with pytest.raises(AlreadyExists):
        store.create({**job, "payload": {"other": True}})
    assert harness.raw(job_object(job["id"])) == before
    assert store.read(job["id"]) == first


def test_update_with_current_generation_advances_it(store):
    created = store.create(new_job())
    updated = store.update({**created.record, "status": "running"}, created.generation)
    assert updated.generation > created.generation
    assert updated.record["write_id"] != created.record["write_id"]
    assert store.read(created.record["id"]) == updated
    assert updated.record["status"] == "running"


def test_generation_is_the_records_without_reading_its_body(store):
    created = store.create(new_job())
    job_id = created.record["id"]
    reads, stats = store.calls["read"], store.calls["stat"]
    assert store.generation(job_id) == created.generation
    updated = store.update({**created.record, "status": "running"}, created.generation)
    assert store.generation(job_id) == updated.generation != created.generation
    assert store.calls["read"] == reads and store.calls["stat"] - stats == 2  # metadata only
    with pytest.raises(NotFound):
        store.generation("no-such-record")


def test_stat_carries_the_status_written_with_the_record(store):
    created = store.create(new_job())
    job_id = created.record["id"]
    assert store.stat(job_id) == RecordStat(created.generation, created.record["status"])
    done = store.update({**created.record, "status": "done"}, created.generation)
    reads = store.calls["read"]
    assert store.stat(job_id) == RecordStat(done.generation, "done")
    assert store.calls["read"] == reads  # from the object's metadata, not its body


def test_batch_markers_list_from_a_start(store):
    for job_id in ("m-1", "m-2", "m-3"):
        store.add_to_batch("paged", job_id)
    assert store.list_batch("paged", start_at="m-2") == ["m-2", "m-3"]
    assert store.list_batch("paged", limit=1, start_at="m-2") == ["m-2"]


def test_update_with_a_stale_generation_loses_and_changes_nothing(store):
    created = store.create(new_job())
    winner = store.update({**created.record, "status": "running", "owner": "a"}, created.generation)
    with pytest.raises(LostRace):
        store.update({**created.record, "status": "running", "owner": "b"}, created.generation)
    assert store.read(created.record["id"]) == winner


def test_update_of_a_missing_record_loses(store):
    with pytest.raises(LostRace):
        store.update(new_job(), 12345)
    with pytest.raises(NotFound):
        store.read("never-created")


def test_concurrent_updates_from_one_generation_have_exactly_one_winner(store):
    created = store.create(new_job())
    results: list[object] = []
    barrier = threading.Barrier(6)

    def contend(owner: str) -> None:
        barrier.wait()
        try:
            results.append(store.update({**created.record, "owner": owner}, created.generation))
        except LostRace as exc:
            results.append(exc)

    threads = [threading.Thread(target=contend, args=(f"o{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wins = [r for r in results if isinstance(r, Stored)]
    assert len(wins) == 1 and len(results) == 6
    assert store.read(created.record["id"]) == wins[0]


def test_a_fenced_writer_stays_fenced_after_the_winner_moves_on(store):
    created = store.create(new_job())
    gen = created.generation
    for i in range(3):
        gen = store.update({**created.record, "attempts": i + 1}, gen).generation
    with pytest.raises(LostRace):
        store.update({**created.record, "status": "done"}, created.generation)
    assert store.read(created.record["id"]).record["attempts"] == 3


@pytest.mark.parametrize(
    "data",
    [
        b"not json at all",
        b'{"schema": 1, "id": "x"',
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'{"schema": 99, "id": "corrupt-1", "pipeline": "demo", "status": "queued", "payload": {}}',
        b'{"schema": 1, "id": "someone-else", "pipeline": "demo", "status": "queued",'
        b' "payload": {}}',
    ],
)
def test_corrupt_bytes_raise_and_are_left_in_place(harness: Harness, data: bytes):
    store = harness.store
    harness.put_raw("corrupt-1", data)
    with pytest.raises(CorruptRecord) as info:
        store.read("corrupt-1")
    assert info.value.job_id == "corrupt-1" and info.value.reason
    with pytest.raises(AlreadyExists):
        store.create(new_job("corrupt-1"))
    assert harness.raw(job_object("corrupt-1")) == data


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".hidden", "a" * 129, "x..y"])
def test_bad_ids_are_refused_before_any_call(harness: Harness, bad: str):
    store = harness.store
    with pytest.raises(records.InvalidInput):
        store.read(bad)
    with pytest.raises(records.InvalidInput):
        store.add_pending(bad)
    with pytest.raises(records.InvalidInput):
        store.add_to_batch(bad, "ok")
    with pytest.raises((records.InvalidInput, records.InvalidRecord)):
        store.create({**new_job(), "id": bad})
    assert sum(store.calls.values()) == 0
    assert store.list_jobs() == [] and store.list_pending() == []


def test_an_invalid_record_is_never_written(harness: Harness):
    store = harness.store
    created = store.create(new_job())
    with pytest.raises(records.InvalidRecord):
        store.update({**created.record, "status": "exploded"}, created.generation)
    with pytest.raises(records.InvalidRecord):
        store.create({**new_job(), "payload": "not an object"})
    assert store.read(created.record["id"]) == created
    assert store.list_jobs() == [created.record["id"]]


# --- pending index ---------------------------------------------------------------------


def test_pending_listing_can_start_at_a_key(store):
    for job_id in ("a-1", "b-1", "b-2", "c-1"):
        store.add_pending(job_id)
    entries = store.list_pending()
    keys = [e.key for e in entries]
    assert keys == sorted(keys)
    assert sorted(e.job_id for e in entries) == ["a-1", "b-1", "b-2", "c-1"]
    assert store.list_pending(start_at=keys[1]) == entries[1:]
    assert store.list_pending(limit=2, start_at=keys[2]) == entries[2:]
    assert store.list_pending(start_at="g") == []  # past every hex segment


def test_pending_markers_are_idempotent_and_listed_with_creation_time(store):
    store.add_pending("job-b")
    store.add_pending("job-a")
    store.add_pending("job-b")
    entries = store.list_pending()
    assert sorted(e.job_id for e in entries) == ["job-a", "job-b"]
    assert all(isinstance(e.created, datetime) and e.created.tzinfo for e in entries)
    store.remove_pending("job-b")
    store.remove_pending("job-b")
    store.remove_pending("never-there")
    assert [e.job_id for e in store.list_pending()] == ["job-a"]


@pytest.mark.parametrize("pool", [None, "heavy"])
def test_a_marker_under_its_old_name_is_listed_marked_and_removed(
    harness: Harness, pool: str | None
):
    """A marker an earlier reclaim wrote (pending/[<pool>/]<id>) is still the job's: the
    sweep and the drain find it, a hand-back marks it due, the finish removes it."""
    store = harness.store
    old = pending_object("order-0010", pool, legacy=True)
    harness.put_job_object("order-0010", old)
    store.add_pending("order-0011", pool=pool)
    assert harness.raw(pending_object("order-0011", pool)) == b""  # new markers: hashed
    listing = {e.job_id: e for e in store.list_pending(pool=pool)}
    assert listing["order-0010"].legacy and not listing["order-0011"].legacy
    assert f"pending/{listing['order-0010'].key}" == old
    due = datetime(2026, 12, 2, 0, 30, tzinfo=UTC)
    store.calls.clear()
    store.mark_due("order-0010", due, pool=pool)
    assert store.calls == {"write": 2}  # the new name missed, then the old one
    assert {e.job_id: e.due for e in store.list_pending(pool=pool)}["order-0010"] == due
    store.remove_pending("order-0010", pool=pool)
    assert harness.raw(old) is None
    assert [e.job_id for e in store.list_pending(pool=pool)] == ["order-0011"]
    store.calls.clear()
    store.remove_pending("order-0011", pool=pool)
    assert store.calls == {"delete": 1}  # a marker of today's layout: one call


def test_a_marker_marked_due_is_listed_with_its_due_time_until_removed(store):
    """mark_due is what lets a freed claim slot find a handed-back job in the listing,
    without a read, whatever became of its doorbell (shared.claim.drain)."""
    due = datetime(2026, 12, 2, 0, 30, 15, 250000, tzinfo=UTC)
    store.add_pending("job-a")
    store.add_pending("job-b")
    store.calls.clear()
    store.mark_due("job-b", due)
    store.mark_due("gone", due)  # no marker (the job finished): nothing to mark, no error
    assert store.calls == {"write": 3}  # "gone" looked for under its old name too
    listed = {e.job_id: e.due for e in store.list_pending()}
    assert listed == {"job-a": None, "job-b": due}
    store.mark_due("job-b", due + timedelta(seconds=5))  # marked again: the later time
    assert {e.job_id: e.due for e in store.list_pending()}["job-b"] == due + timedelta(seconds=5)
    store.remove_pending("job-b")
    store.add_pending("job-b")  # a new marker of the same name starts unmarked
    assert {e.job_id: e.due for e in store.list_pending()} == {"job-a": None, "job-b": None}
    assert [e.job_id for e in store.list_pending()] == ["job-a", "job-b"]


def test_a_marker_is_listed_with_its_pipeline_marked_due_or_not(store):
    """The pipeline rides on the marker's creation (no extra call), so the sweep's gauges
    count a marker it does not read (shared.sweep_plan); a due mark keeps it."""
    store.calls.clear()
    store.add_pending("job-a", pipeline="demo")
    store.add_pending("job-b", pool="light", pipeline="webhook")
    store.add_pending("job-c")  # a marker from before: no pipeline
    assert store.calls == {"write": 3}
    store.mark_due("job-a", datetime(2026, 12, 2, tzinfo=UTC))
    listed = {e.job_id: (e.pool, e.pipeline) for e in store.list_pending()}
    assert listed == {"job-a": (None, "demo"), "job-b": ("light", "webhook"), "job-c": (None, None)}
    assert {e.job_id: e.due is not None for e in store.list_pending()} == {
        "job-a": True,
        "job-b": False,
        "job-c": False,
    }


def test_a_due_mark_carries_the_re_ring_count_and_a_later_mark_can_clear_it(store):
    """The sweep re-rings a waiting job less often each time, and reads its marker after
    the others (shared.sweep_plan); a hand-back or a rescue (rerings 0) clears the count
    by removing the key, keeping the pipeline."""
    due = datetime(2026, 12, 2, tzinfo=UTC)
    store.add_pending("job-a", pipeline="demo")
    store.add_pending("job-b")
    store.mark_due("job-a", due, rerings=3)
    assert {e.job_id: e.rerings for e in store.list_pending()} == {"job-a": 3, "job-b": 0}
    store.mark_due("job-a", due + timedelta(seconds=1))
    [a, _b] = store.list_pending()
    assert (a.rerings, a.due, a.pipeline) == (0, due + timedelta(seconds=1), "demo")


def test_list_pending_honours_limit_and_never_lists_jobs(store):
    for i in range(5):
        store.add_pending(f"p{i}")
    store.create(new_job("not-pending"))
    store.calls.clear()
    in_order = sorted((f"p{i}" for i in range(5)), key=pending_object)  # hash order
    assert [e.job_id for e in store.list_pending(limit=3)] == in_order[:3]
    assert len(store.list_pending()) == 5
    assert store.calls == {"list": 2 * shards(store)}
    with pytest.raises(ValueError):
        store.list_pending(limit=0)


def test_each_pool_lists_only_its_own_markers_and_every_pool_is_listed_whole(store):
    """Pools (shared.pools): a pool's markers live in pending/<pool>/; the default pool's
    are the top-level ones, those written before pools included (a delimited listing on
    GCS); the sweep's listing has them all, each with its folder, in name order."""
    due = datetime(2026, 12, 2, 0, 30, tzinfo=UTC)
    store.add_pending("old-1")
    store.add_pending("h-1", pool="heavy")
    store.add_pending("h-2", pool="heavy")
    store.add_pending("d-1", pool="default")
    store.mark_due("h-2", due, pool="heavy")
    store.calls.clear()
    assert sorted(e.job_id for e in store.list_pending(pool="default")) == ["d-1", "old-1"]
    heavy = {e.job_id: e.due for e in store.list_pending(pool="heavy")}
    assert heavy == {"h-1": None, "h-2": due}
    assert store.list_pending(pool="light") == []
    assert store.calls == {"list": 3 * shards(store)}
    every = store.list_pending()
    keys = sorted([_key("d-1"), _key("h-1", "heavy"), _key("h-2", "heavy"), _key("old-1")])
    assert [e.key for e in every] == keys
    assert {e.job_id: e.pool for e in every} == {
        "d-1": None,
        "h-1": "heavy",
        "h-2": "heavy",
        "old-1": None,
    }
    assert [e.key for e in store.list_pending(start_at=keys[1])] == keys[1:]
    store.remove_pending("h-1", pool="heavy")
    store.remove_pending("old-1")
    assert [e.key for e in store.list_pending()] == sorted([_key("d-1"), _key("h-2", "heavy")])


def _key(job_id: str, pool: str | None = None) -> str:
    """A marker's key (its name under pending/)."""
    return pending_object(job_id, pool).removeprefix("pending/")


# --- batches and the operator's listing ------------------------------------------------


def test_batch_membership(store):
    for job_id in ("j3", "j1", "j2", "j1"):
        store.add_to_batch("batch-a", job_id)
    store.add_to_batch("batch-ab", "other")
    assert store.list_batch("batch-a") == ["j1", "j2", "j3"]
    assert store.list_batch("batch-a", limit=2) == ["j1", "j2"]
    assert store.list_batch("batch-ab") == ["other"]
    assert store.list_batch("empty") == []


def test_list_jobs_lists_records_only(store):
    ids = sorted(store.create(new_job()).record["id"] for _ in range(3))
    store.add_pending("marker-only")
    store.add_to_batch("b", ids[0])
    assert store.list_jobs() == ids
    assert store.list_jobs(limit=2) == ids[:2]


# --- records under their old names (jobs/<id>.json) ------------------------------------


def _plant_old(harness: Harness, job_id: str, **fields: object) -> tuple[dict, int]:
    record = {**new_job(job_id, **fields), "write_id": "0" * 32}
    return record, harness.put_legacy(job_id, records.encode(record))


def test_a_record_under_its_old_name_is_read_stated_updated_in_place_and_listed(
    harness: Harness,
):
    store = harness.store
    record, generation = _plant_old(harness, "order-0001")
    assert store.read("order-0001") == Stored(record, generation)
    assert store.stat("order-0001").generation == generation
    updated = store.update({**record, "status": "running"}, generation)
    assert updated.generation != generation
    stored = harness.raw(legacy_job_object("order-0001"))
    assert stored is not None and records.decode(stored)["status"] == "running"  # in place
    assert harness.raw(job_object("order-0001")) is None  # never split between two names
    assert store.read("order-0001") == updated
    with pytest.raises(LostRace):
        store.update({**record, "status": "done"}, generation)  # CAS on the old name too
    store.create(new_job("order-0002"))
    assert store.list_jobs() == ["order-0001", "order-0002"]


def test_a_create_of_an_id_whose_record_has_its_old_name_is_refused(harness: Harness):
    record, generation = _plant_old(harness, "order-0003")
    with pytest.raises(AlreadyExists):
        harness.store.create(new_job("order-0003", payload={"other": 1}))
    assert harness.raw(job_object("order-0003")) is None  # no second record
    assert harness.store.read("order-0003") == Stored(record, generation)


def test_a_create_of_a_fresh_id_makes_one_call(store):
    store.create(new_job(), fresh_id=True)  # a random id: no old name to look at
    assert store.calls == {"write": 1}


def test_an_update_without_a_read_finds_the_old_name(harness: Harness):
    """A process that never read the record (another instance did) still updates it
    where it is: the CAS on the new name misses, and the old name holds it."""
    record, generation = _plant_old(harness, "order-0004")
    updated = harness.store.update({**record, "status": "running"}, generation)
    assert harness.raw(job_object("order-0004")) is None
    assert harness.store.read("order-0004") == updated


def test_a_corrupt_record_under_its_old_name_is_reported_and_left_alone(harness: Harness):
    harness.put_legacy("order-0005", b"{not json")
    with pytest.raises(CorruptRecord):
        harness.store.read("order-0005")
    assert harness.raw(legacy_job_object("order-0005")) == b"{not json"


# --- outputs and uploaded objects ------------------------------------------------------


def test_outputs_are_create_only_per_attempt(harness: Harness):
    store = harness.store
    name = store.write_output("job-1", 1, "result.json", b'{"a":1}', "application/json")
    assert name == "outputs/job-1/1/result.json"
    assert store.write_output("job-1", 1, "result.json", b'{"a":1}', "application/json") == name
    with pytest.raises(AlreadyExists):
        store.write_output("job-1", 1, "result.json", b'{"a":2}', "application/json")
    assert harness.raw(name) == b'{"a":1}'
    other = store.write_output("job-1", 2, "result.json", b'{"a":2}', "application/json")
    assert other == "outputs/job-1/2/result.json"
    assert store.read_object(harness.bucket_name, name) == (b'{"a":1}', "application/json")
    nested = store.write_output("job-1", 1, "thumbs/small.png", b"\x89PNG", "image/png")
    assert store.read_object(harness.bucket_name, nested) == (b"\x89PNG", "image/png")


def test_an_output_stream_is_created_at_commit_only_and_create_only(harness: Harness):
    """ctx.outputs.open's stream: more than one chunk (a resumable upload's), nothing
    visible before commit, the object created once, a second one of that name refused."""
    store = harness.store
    piece = bytes(range(256)) * 4096  # 1 MiB
    sink = store.open_output("job-2", 1, "big/data.bin", "application/octet-stream")
    for _ in range(9):  # past one OUTPUT_CHUNK_BYTES (8 MiB): two chunks go out
        sink.write(piece)
    assert harness.raw("outputs/job-2/1/big/data.bin") is None  # not before the commit
    assert sink.commit() == "outputs/job-2/1/big/data.bin"
    stored = harness.raw("outputs/job-2/1/big/data.bin")
    assert stored is not None and len(stored) == 9 * len(piece) and stored[:256] == piece[:256]
    again = store.open_output("job-2", 1, "big/data.bin", "application/octet-stream")
    again.write(b"other bytes")
    with pytest.raises(AlreadyExists):
        again.commit()
    assert harness.raw("outputs/job-2/1/big/data.bin") == stored


def test_an_aborted_output_stream_leaves_nothing(harness: Harness):
    sink = harness.store.open_output("job-3", 1, "part.txt", "text/plain")
    sink.write(b"half of it")
    sink.abort()
    assert harness.raw("outputs/job-3/1/part.txt") is None
    assert harness.store.list_outputs("job-3") == []


def test_outputs_are_listed_with_sizes_and_read_back_as_streams(harness: Harness):
    store = harness.store
    store.write_output("job-4", 1, "a.txt", b"one", "text/plain")
    store.write_output("job-4", 2, "dir/b.json", b'{"b": 2}', "application/json")
    store.write_output("job-40", 1, "not-mine.txt", b"x", "text/plain")  # a prefix of it
    listed = store.list_outputs("job-4")
    assert [(o.name, o.size, o.content_type) for o in listed] == [
        ("outputs/job-4/1/a.txt", 3, "text/plain"),
        ("outputs/job-4/2/dir/b.json", 8, "application/json"),
    ]
    stream, info = store.read_output("job-4", "outputs/job-4/2/dir/b.json")
    with stream:
        assert stream.read() == b'{"b": 2}'
    assert (info.size, info.content_type) == (8, "application/json")
    with pytest.raises(NotFound):
        store.read_output("job-4", "outputs/job-4/1/missing.txt")
    with pytest.raises(NotFound):  # another job's output, asked as this job's
        store.read_output("job-4", "outputs/job-40/1/not-mine.txt")
    # fake-gcs-server checks no signature and memory serves nothing: the caller streams
    assert store.output_url("job-4", "outputs/job-4/1/a.txt", 60) is None


@pytest.mark.parametrize("bad", ["", "/abs", "a//b", "../up", "a/./b", "a/..", "x\ny"])
def test_unsafe_output_names_are_refused(harness: Harness, bad: str):
    with pytest.raises(records.InvalidInput):
        harness.store.write_output("job-1", 1, bad, b"x", "text/plain")
    with pytest.raises(records.InvalidInput):
        harness.store.write_output("job-1", -1, "ok", b"x", "text/plain")
    assert harness.store.calls["write"] == 0


def test_read_object_reads_other_buckets(harness: Harness):
    harness.put_object(harness.other_bucket, "in/photo.jpg", b"\xff\xd8jpeg", "image/jpeg")
    data, content_type = harness.store.read_object(harness.other_bucket, "in/photo.jpg")
    assert (data, content_type) == (b"\xff\xd8jpeg", "image/jpeg")
    with pytest.raises(NotFound):
        harness.store.read_object(harness.other_bucket, "in/missing.jpg")


def test_read_object_at_a_generation_reads_exactly_that_version(harness: Harness):
    first = harness.put_object(harness.other_bucket, "in/a.txt", b"one", "text/plain")
    second = harness.put_object(harness.other_bucket, "in/a.txt", b"two", "text/plain")
    assert isinstance(first, int) and isinstance(second, int) and second != first
    assert harness.store.read_object(harness.other_bucket, "in/a.txt", second)[0] == b"two"
    with pytest.raises(NotFound):  # overwritten, and this bucket keeps no old versions
        harness.store.read_object(harness.other_bucket, "in/a.txt", first)


# --- call counting ---------------------------------------------------------------------


def test_calls_count_logical_operations(store):
    created = store.create(new_job("counted"))
    store.read("counted")
    store.update(created.record, created.generation)
    store.add_pending("counted")
    store.list_pending()
    store.remove_pending("counted")
    # the stat: the create looks for a record under the id's old name (legacy_names)
    assert store.calls == {"write": 3, "read": 1, "stat": 1, "list": shards(store), "delete": 1}
