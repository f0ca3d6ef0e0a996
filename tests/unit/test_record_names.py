"""Names that spread load: jobs/<h>/<id>.json and pending/<h>~<id>, beside the old
jobs/<id>.json and pending/<id> (pure)."""

from __future__ import annotations

import hashlib
from collections import Counter
from itertools import pairwise

import pytest

from shared.errors import InvalidInput, NotFound
from shared.shards import NAME_HASH_CHARS, name_hash, shard_of
from shared.storage import (
    PendingEntry,
    job_object,
    legacy_job_object,
    pending_key,
    pending_object,
    record_ids,
    record_name_id,
)
from shared.stores.memory import MemoryStore
from tests.contract.contract_support import new_job

SEQUENTIAL = [f"order-{i:05d}" for i in range(4096)]


def test_the_hash_segment_is_two_hex_characters_of_the_ids_sha256() -> None:
    digest = hashlib.sha256(b"order-00001").hexdigest()
    assert name_hash("order-00001") == digest[32 : 32 + NAME_HASH_CHARS]
    assert job_object("order-00001") == f"jobs/{digest[32:34]}/order-00001.json"
    assert legacy_job_object("order-00001") == "jobs/order-00001.json"


def test_consecutive_ids_land_in_distant_key_ranges() -> None:
    names = [job_object(j) for j in SEQUENTIAL]
    spread = Counter(n.split("/")[1] for n in names)
    assert len(spread) == 256  # every range of jobs/ gets some
    assert max(spread.values()) < 2 * len(SEQUENTIAL) / 256  # and none gets a run of them
    neighbours = sum(a.split("/")[1] == b.split("/")[1] for a, b in pairwise(names))
    assert neighbours < len(names) / 64  # consecutive ids rarely share a range


def test_the_segment_spreads_within_each_shard() -> None:
    for shard in range(2):
        mine = [j for j in SEQUENTIAL if shard_of(j, 2) == shard]
        assert len({name_hash(j) for j in mine}) == 256


@pytest.mark.parametrize("job_id", ["a", "order-1234", "x" * 128, "A.b_c-d"])
def test_both_layouts_name_the_same_id(job_id: str) -> None:
    assert record_name_id(job_object(job_id)) == job_id
    assert record_name_id(legacy_job_object(job_id)) == job_id


@pytest.mark.parametrize(
    "name",
    [
        "jobs/.json",
        "jobs/a.txt",
        "pending/a",
        "jobs/00/a.json",  # a segment that is not the id's hash: not a record of ours
        "jobs/a/b/c.json",
        "jobs/" + name_hash("a") + "/.json",
    ],
)
def test_other_names_are_not_records(name: str) -> None:
    assert name != job_object("a") and record_name_id(name) is None


def test_record_ids_merges_both_layouts_in_id_order() -> None:
    names = [job_object("b"), legacy_job_object("c"), job_object("a"), "jobs/x.txt"]
    assert record_ids(names) == ["a", "b", "c"]
    assert record_ids(names, 2) == ["a", "b"]
    assert record_ids([job_object("a"), legacy_job_object("a")]) == ["a"]


def test_a_bad_id_names_nothing() -> None:
    for bad in ("", "../x", "a/b"):
        with pytest.raises(InvalidInput):
            job_object(bad)
        with pytest.raises(InvalidInput):
            legacy_job_object(bad)


def test_without_legacy_names_old_records_are_not_looked_for() -> None:
    store = MemoryStore(legacy_names=False)
    store.put_raw("old-1", b"{}", legacy=True)
    store.create(new_job("new-1"))
    assert store.calls == {"write": 1}  # the create looked at no old name
    assert store.list_jobs() == ["new-1", "old-1"]  # a listing still shows what is there
    with pytest.raises(NotFound):
        store.read("old-1")


def test_a_submit_read_that_missed_spares_the_create_a_second_look() -> None:
    store = MemoryStore()
    with pytest.raises(NotFound):
        store.read("fresh-1")  # the new name, then the old one
    store.create(new_job("fresh-1"))
    assert store.calls == {"read": 2, "write": 1}
    store.read("fresh-1")
    assert store.calls["read"] == 3  # found under its name: no look at the old one


def test_a_create_of_a_freshly_drawn_id_does_not_look_at_old_names() -> None:
    store = MemoryStore()
    store.create(new_job(), fresh_id=True)
    assert store.calls == {"write": 1}
    store.create(new_job("user-1"))
    assert store.calls == {"write": 2, "stat": 1}  # a chosen id: its old name is looked at


# --- pending markers: pending/[<pool>/]<h>~<id>, and the old pending/[<pool>/]<id> ------


def test_a_marker_name_carries_the_records_hash_segment() -> None:
    h = name_hash("order-00001")
    assert pending_object("order-00001") == f"pending/{h}~order-00001"
    assert pending_object("order-00001", "heavy") == f"pending/heavy/{h}~order-00001"
    assert pending_object("order-00001", legacy=True) == "pending/order-00001"
    assert pending_object("order-00001", "heavy", legacy=True) == "pending/heavy/order-00001"


def test_consecutive_ids_put_their_markers_in_distant_key_ranges() -> None:
    names = [pending_object(j) for j in SEQUENTIAL]
    spread = Counter(n[len("pending/") :].split("~")[0] for n in names)
    assert len(spread) == 256
    neighbours = sum(a[:10] == b[:10] for a, b in pairwise(names))
    assert neighbours < len(names) / 64


@pytest.mark.parametrize("pool", [None, "heavy"])
@pytest.mark.parametrize("job_id", ["a", "order-1234", "x" * 128, "A.b_c-d"])
def test_both_marker_layouts_name_the_same_job(job_id: str, pool: str | None) -> None:
    assert pending_key(pending_object(job_id, pool)) == (pool, job_id, False)
    assert pending_key(pending_object(job_id, pool, legacy=True)) == (pool, job_id, True)
    for legacy in (False, True):
        entry = PendingEntry(job_id, None, pool=pool, legacy=legacy)
        assert f"pending/{entry.key}" == pending_object(job_id, pool, legacy=legacy)


@pytest.mark.parametrize(
    "name", ["pending/", "pending/00~a", "pending/~a", "pending/a~", "jobs/a", "pending/a/b/c"]
)
def test_other_names_are_not_markers(name: str) -> None:
    assert pending_key(name) is None
