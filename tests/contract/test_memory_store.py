"""MemoryStore's test-only helpers: planted objects and injected failures."""

from __future__ import annotations

import pytest

from shared.errors import LostRace, NotFound, Unavailable
from shared.storage import job_object, pending_object
from shared.stores.memory import MemoryStore
from tests.contract.contract_support import new_job


def test_injected_failure_before_a_write_changes_nothing() -> None:
    store = MemoryStore()
    created = store.create(new_job("j"))
    store.inject_failure("write", Unavailable("down"))
    with pytest.raises(Unavailable):
        store.update({**created.record, "owner": "me"}, created.generation)
    assert store.read("j") == created
    store.update({**created.record, "owner": "me"}, created.generation)  # only once


def test_injected_lost_answer_lands_the_write_first() -> None:
    store = MemoryStore()
    created = store.create(new_job("j"))
    store.inject_failure("write", Unavailable("answer lost"), after=True)
    with pytest.raises(Unavailable):
        store.update({**created.record, "owner": "me"}, created.generation)
    assert store.read("j").record["owner"] == "me"
    with pytest.raises(LostRace):
        store.update({**created.record, "owner": "again"}, created.generation)


def test_injected_failures_are_per_kind_and_counted() -> None:
    store = MemoryStore()
    store.inject_failure("read", Unavailable("x"), times=2)
    store.add_pending("p")
    for _ in range(2):
        with pytest.raises(Unavailable):
            store.read("p")
    with pytest.raises(NotFound):
        store.read("p")
    assert store.calls == {"write": 1, "read": 4}  # the miss looked at the old name too
    with pytest.raises(ValueError):
        store.inject_failure("explode", Unavailable("x"))


def test_plant_and_inspect_objects() -> None:
    store = MemoryStore()
    gen = store.put_object("uploads", "a.txt", b"hi", "text/plain")
    assert store.read_object("uploads", "a.txt") == (b"hi", "text/plain")
    raw = store.raw("uploads", "a.txt")
    assert raw is not None and raw.generation == gen
    store.add_pending("x")
    store.create(new_job("x"))
    assert store.names() == [job_object("x"), pending_object("x")]
    assert store.names("pending/") == [pending_object("x")]


def test_generations_only_increase() -> None:
    store = MemoryStore()
    created = store.create(new_job("g"))
    gens = [created.generation]
    for _ in range(5):
        store.add_pending(f"m{len(gens)}")
        gens.append(store.update(store.read("g").record, gens[-1]).generation)
    assert gens == sorted(set(gens))
