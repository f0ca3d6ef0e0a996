"""The generic index-object calls (put_blob, read_blob, delete_blob, list_blobs), proved
against MemoryStore and GcsStore on fake-gcs-server alike."""

from __future__ import annotations

import pytest

from shared import storage
from shared.errors import AlreadyExists, InvalidInput, LostRace, NotFound

PREFIX = "idx-test/"


@pytest.fixture(autouse=True)
def _registered_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "INDEX_PREFIXES", (*storage.INDEX_PREFIXES, PREFIX))


def test_create_only_then_read(store):
    gen = store.put_blob(PREFIX + "a/1", b"one", generation=0)
    assert gen > 0
    blob = store.read_blob(PREFIX + "a/1")
    assert (blob.data, blob.generation) == (b"one", gen)


def test_create_only_with_the_same_bytes_is_idempotent_and_other_bytes_conflict(store):
    gen = store.put_blob(PREFIX + "k", b"x", generation=0)
    assert store.put_blob(PREFIX + "k", b"x", generation=0) == gen
    with pytest.raises(AlreadyExists):
        store.put_blob(PREFIX + "k", b"y", generation=0)
    assert store.read_blob(PREFIX + "k").data == b"x"


def test_compare_and_swap_advances_and_a_stale_generation_loses(store):
    first = store.put_blob(PREFIX + "c", b"1", generation=0)
    second = store.put_blob(PREFIX + "c", b"2", generation=first)
    assert second > first
    with pytest.raises(LostRace):
        store.put_blob(PREFIX + "c", b"3", generation=first)
    assert store.read_blob(PREFIX + "c").data == b"2"
    with pytest.raises(LostRace):
        store.put_blob(PREFIX + "missing", b"3", generation=first)


def test_read_of_an_absent_name_is_not_found_and_delete_of_one_is_fine(store):
    with pytest.raises(NotFound):
        store.read_blob(PREFIX + "nothing")
    store.delete_blob(PREFIX + "nothing")
    store.put_blob(PREFIX + "d", b"", generation=0)
    store.delete_blob(PREFIX + "d")
    with pytest.raises(NotFound):
        store.read_blob(PREFIX + "d")


def test_list_is_lexicographic_within_bounds_and_limited(store):
    for name in ("b/2", "a/1", "b/1", "c/1"):
        store.put_blob(PREFIX + name, b"", generation=0)
    names = [i.name for i in store.list_blobs(PREFIX)]
    assert names == [PREFIX + n for n in ("a/1", "b/1", "b/2", "c/1")]
    window = store.list_blobs(PREFIX, start_at=PREFIX + "b/", end_before=PREFIX + "c/")
    assert [i.name for i in window] == [PREFIX + "b/1", PREFIX + "b/2"]
    assert all(i.generation > 0 for i in window)
    assert [i.name for i in store.list_blobs(PREFIX + "b/", limit=1)] == [PREFIX + "b/1"]


def test_calls_are_counted(store):
    before = sum(store.calls.values())
    store.put_blob(PREFIX + "n", b"", generation=0)
    store.read_blob(PREFIX + "n")
    store.list_blobs(PREFIX)
    store.delete_blob(PREFIX + "n")
    assert sum(store.calls.values()) - before == 4


@pytest.mark.parametrize(
    "name",
    [
        "jobs/x.json",
        "outputs/x/1/a",
        "pending/x",
        "idx-test/../jobs/x",
        "idx-test/a b",
        "",
        7,
        "/idx-test/a",
    ],
)
def test_names_outside_the_registered_prefixes_are_refused(store, name):
    with pytest.raises(InvalidInput):
        store.put_blob(name, b"", generation=0)
    with pytest.raises(InvalidInput):
        store.read_blob(name)
    with pytest.raises(InvalidInput):
        store.delete_blob(name)


def test_bad_generations_are_programming_errors(store):
    with pytest.raises(ValueError):
        store.put_blob(PREFIX + "g", b"", generation=-1)
    with pytest.raises(ValueError):
        store.put_blob(PREFIX + "g", b"", generation=True)
