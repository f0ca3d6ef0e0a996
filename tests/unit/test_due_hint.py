"""shared.hints.due_hint: a freed slot lists the pending index only when the pool's due
hint moved since its process last listed; whoever marks a job due moves it (on a thread,
at most once a second per process, the last one trailing)."""

from __future__ import annotations

import threading
import time
from typing import Any

from shared.errors import NotFound, Unavailable
from shared.hints.due_hint import DueHint, announce, hint_name
from shared.stores.memory import MemoryStore


def generation(store: MemoryStore, pool: str | None = None) -> int:
    try:
        return store.read_blob(hint_name(pool)).generation
    except NotFound:
        return 0


def wait_past(store: MemoryStore, seen: int, pool: str | None = None) -> int:
    deadline = time.monotonic() + 10
    while (now := generation(store, pool)) == seen:
        assert time.monotonic() < deadline, "the hint never moved"
        time.sleep(0.02)
    return now


def test_no_hint_means_nothing_was_announced_and_a_new_one_moves_once_per_listing() -> None:
    store = MemoryStore()
    hint = DueHint(read_s=0.0)
    assert not hint.moved(store, None)  # never announced: nothing marked, no listing
    announce(store, None)
    wait_past(store, 0)
    assert hint.moved(store, None)
    assert hint.moved(store, None)  # still: no listing followed yet
    hint.listed()
    assert not hint.moved(store, None)


def test_a_process_reads_the_hint_at_most_once_per_interval() -> None:
    store = MemoryStore()
    hint = DueHint(read_s=1.0)
    assert not hint.moved(store, None, now_s=100.0)
    announce(store, None)
    wait_past(store, 0)
    reads = store.calls["read"]
    assert not hint.moved(store, None, now_s=100.5)  # the read of 100.0 still stands
    assert store.calls["read"] == reads  # no call at all
    assert hint.moved(store, None, now_s=101.0)


def test_an_unreadable_hint_counts_as_moved_and_pools_have_their_own() -> None:
    store = MemoryStore()
    hint = DueHint(read_s=0.0)
    store.inject_failure("read", Unavailable("outage"))
    assert hint.moved(store, None)  # the listing is the safe side
    announce(store, "light")
    wait_past(store, 0, "light")
    assert not hint.moved(store, None) and generation(store, None) == 0


def test_announces_within_a_second_trail_one_write_after_the_first() -> None:
    store = MemoryStore()
    announce(store, None)
    first = wait_past(store, 0)
    announce(store, None)  # within the second: a trailing write, not a second one now
    announce(store, None)
    assert wait_past(store, first) > first  # the burst's last mark is announced


def test_a_slot_that_frees_while_another_reads_the_hint_waits_for_its_answer() -> None:
    """Two slots of one process free at once: the first reads the hint; the second, within
    the read interval, waits for that read rather than take "not read yet" for "moved" (it
    listed the pending index for nothing: a listing a process, one per shard) or for "not
    moved" (two jobs handed back, and it would idle beside the second)."""
    reading, answered = threading.Event(), threading.Event()

    class SlowRead(MemoryStore):
        def read_blob(self, name: str) -> Any:
            reading.set()
            answered.wait(5)
            return super().read_blob(name)

    for announced in (False, True):
        store = SlowRead()
        if announced:
            store.put_blob(hint_name(None), b"x", generation=0)
        hint, seen = DueHint(read_s=1.0), list[bool]()
        reading.clear()
        answered.clear()

        def free_a_slot(
            at: float, hint: DueHint = hint, store: Any = store, seen: list[bool] = seen
        ) -> None:
            seen.append(hint.moved(store, None, now_s=at))

        first = threading.Thread(target=free_a_slot, args=(100.0,))
        first.start()
        assert reading.wait(5)
        second = threading.Thread(target=free_a_slot, args=(100.1,))
        second.start()
        answered.set()
        first.join(5)
        second.join(5)
        assert seen == [announced, announced]
