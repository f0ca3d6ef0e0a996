"""shared.claim.drain: the backlog sign a push carries, the gate's rate limit and backlog
window, what counts as overdue, the push's time budget, and drains run through
handle_delivery on MemoryStore with an injected clock."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, records
from shared.claim.budget import PushBudget
from shared.claim.drain import (
    BACKLOG_LISTING,
    BACKLOG_WAIT_S,
    PUSH_GAP_S,
    Arrival,
    DrainGate,
    backlog_sign,
    candidates,
    drain,
    listing_window,
    overdue,
    random_start,
)
from shared.claim.shutdown import Shutdown
from shared.claim.slots import Slots
from shared.errors import NotFound, Unavailable
from shared.features import flow
from shared.hints.due_hint import hint_name
from shared.jobs import JobStatus
from shared.outcome import Outcome, OutcomeKind
from shared.recovery import mark_due
from shared.storage import PendingEntry, pending_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Clock, handle, pipeline, settings, starved_slots, submit


def wait_hint_moved(store: MemoryStore, generation: int, timeout_s: float = 10.0) -> None:
    """Until the default pool's due hint is past `generation` (0: until it exists): an
    announce is written on a thread of its own."""
    deadline = time.monotonic() + timeout_s
    while _hint_generation(store) == generation:
        assert time.monotonic() < deadline, "the due hint never moved"
        time.sleep(0.02)


def _hint_generation(store: MemoryStore) -> int:
    try:
        return store.read_blob(hint_name(None)).generation
    except NotFound:
        return 0


# --- the gate


def test_the_gate_lets_one_listing_through_per_interval() -> None:
    gate = DrainGate()
    assert gate.try_enter(10.0, now_s=100.0)
    assert not gate.try_enter(10.0, now_s=105.0)
    assert gate.try_enter(10.0, now_s=110.0)


def test_a_backlog_sign_opens_a_window_that_a_clear_or_time_closes() -> None:
    gate = DrainGate()
    assert not gate.backlogged(30.0, now_s=0.0)
    gate.note_backlog(now_s=100.0)
    assert gate.backlogged(30.0, now_s=129.0)
    assert not gate.backlogged(30.0, now_s=130.0)
    gate.note_backlog(now_s=200.0)
    gate.clear_backlog()
    assert not gate.backlogged(30.0, now_s=201.0)


# --- the sign a push carries


NOW = datetime(2026, 7, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("attempt", "waited_s", "sign"),
    [
        (None, None, None),  # a push without either field (no dead-letter policy)
        (1, 0.2, None),  # a first delivery, straight through
        (1, 9.3 + 10.0, None),  # the slowest cold start measured, plus a full pending hold
        (1, BACKLOG_WAIT_S, None),
        (1, BACKLOG_WAIT_S + 0.1, f"the doorbell waited {BACKLOG_WAIT_S + 0.1:.1f} s"),
        (2, 0.0, "delivery attempt 2"),  # refused (the platform's 429) or failed before
        (None, 45.0, "the doorbell waited 45.0 s"),  # held in Pub/Sub
        (1, -3.0, None),  # a publish time ahead of this clock says nothing
    ],
)
def test_backlog_sign(attempt: int | None, waited_s: float | None, sign: str | None) -> None:
    published = None if waited_s is None else NOW - timedelta(seconds=waited_s)
    assert backlog_sign(Arrival(attempt, published), NOW) == sign


# --- the time budget


def test_the_budget_counts_the_pending_allowance_and_the_elapsed_time() -> None:
    t = [100.0]
    budget = PushBudget(600, clock=lambda: t[0])
    assert budget.remaining() == 590 and budget.allows(590) and not budget.allows(590.1)
    t[0] += 500
    assert budget.remaining() == 90 and budget.allows(60) and not budget.allows(91)
    assert PushBudget(10, clock=lambda: 0.0).remaining() == 0  # the allowance ate it all


# --- one drain, called directly


def test_a_listing_outage_drains_nothing_and_does_not_raise() -> None:
    store = MemoryStore()
    store.inject_failure("list", Unavailable("503 from storage"))
    taken: list[str] = []

    def take(job_id: str, stored: Any) -> Outcome:
        taken.append(job_id)
        return Outcome(job_id, OutcomeKind.DONE)

    assert drain(store, settings(drain_max_jobs=3), Clock(), take, DrainGate()) == []
    assert taken == []


def test_a_bug_in_the_listing_is_not_swallowed() -> None:
    store = MemoryStore()
    store.inject_failure("list", TypeError("a bug"))
    with pytest.raises(TypeError):
        drain(store, settings(drain_max_jobs=3), Clock(), lambda *_: None, DrainGate())


def test_the_drain_skips_the_request_s_own_job_and_lost_races() -> None:
    store = MemoryStore()
    clock = Clock()
    own = submit(store, now=clock())
    other = submit(store, now=clock())
    clock.advance(60)
    seen: list[str] = []

    def take(job_id: str, stored: Any) -> Outcome:
        seen.append(job_id)
        return Outcome(job_id, OutcomeKind.RACED)

    outcomes = drain(store, settings(drain_max_jobs=3), clock, take, DrainGate(), skip=own)
    assert seen == [other] and outcomes == []  # a lost race is not reported as drained


# --- through handle_delivery


def test_drain_runs_overdue_jobs_in_the_same_slot_and_is_rate_limited() -> None:
    """The safety net: while freed slots wait for pushes, a freed slot takes a queued job
    overdue by age (a doorbell lost without a mark), once per drain interval."""
    store = MemoryStore()
    clock = Clock()
    lost_doorbell = submit(store, now=clock())
    clock.advance(60)  # its marker and record are a minute old now
    old = clock() - timedelta(seconds=60)
    fresh = submit(store, now=clock())
    trigger = submit(store, now=clock())
    s = settings(drain_max_jobs=3)
    gate = DrainGate()
    outcome = handle(trigger, store, s, clock, gate=gate, slots=starved_slots())
    assert outcome.kind == OutcomeKind.DONE
    assert [(d.job_id, d.kind) for d in outcome.drained] == [(lost_doorbell, OutcomeKind.DONE)]
    assert store.read(fresh).record["status"] == "queued"  # its doorbell is on the way
    another = submit(store, now=old)
    drained = handle(fresh, store, s, clock, gate=gate, slots=starved_slots()).drained
    assert drained == []  # gate: listed just now
    assert store.read(another).record["status"] == "queued"


def test_a_freed_slot_that_pushes_refill_lists_nothing_without_a_hint() -> None:
    """No mark announced, no backlog sign, pushes refilling freed slots at once: the freed
    slot reads the pool's due hint (absent) and lists nothing, though a job is overdue by
    age (its doorbell lost: the sweep rings it). Listing per freed slot was a class A
    operation per job (N on N record shards) for marks that are rare."""
    store = MemoryStore()
    clock = Clock()
    lost_doorbell = submit(store, now=clock())
    clock.advance(60)
    trigger = submit(store, now=clock())
    store.calls.clear()
    outcome = handle(trigger, store, settings(drain_max_jobs=3), clock, slots=_kept_up_slots())
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    assert store.calls["list"] == 0
    assert store.read(lost_doorbell).record["status"] == "queued"


def test_in_a_backlog_a_freed_slot_keeps_taking_due_jobs() -> None:
    """A push delivered before (deliveryAttempt 2: the platform refused it) says doorbells
    are held back: the freed slot takes every due job, beyond drain_max_jobs, however
    fresh (their doorbells are the ones waiting)."""
    store = MemoryStore()
    clock = Clock()
    waiting = [submit(store, now=clock()) for _ in range(5)]
    trigger = submit(store, now=clock())
    gate = DrainGate()
    s = settings(drain_max_jobs=3, max_concurrent=1)
    slots = starved_slots(1)  # and pushes leave freed slots free
    arrival = Arrival(2, clock())
    outcome = handle(trigger, store, s, clock, gate=gate, arrival=arrival, slots=slots)
    assert outcome.kind == OutcomeKind.DONE
    assert sorted(d.job_id for d in outcome.drained) == sorted(waiting)
    assert all(store.read(j).record["status"] == "done" for j in waiting)
    assert not gate.backlogged(s.stale_seconds)  # the index was empty at the end: cleared


def test_a_doorbell_that_waited_is_a_backlog_sign_and_a_fresh_one_is_not() -> None:
    store = MemoryStore()
    clock = Clock()
    waiting = submit(store, now=clock())
    s = settings(drain_max_jobs=3)
    gate = DrainGate()
    fresh = Arrival(1, clock() - timedelta(seconds=1))
    outcome = handle(submit(store, now=clock()), store, s, clock, gate=gate, arrival=fresh)
    assert outcome.drained == []  # a plain drain: `waiting` is not overdue
    assert store.read(waiting).record["status"] == "queued" and not gate.backlogged(30)
    held = Arrival(1, clock() - timedelta(seconds=BACKLOG_WAIT_S + 1))
    slots = starved_slots()
    outcome = handle(
        submit(store, now=clock()), store, s, clock, gate=gate, arrival=held, slots=slots
    )
    assert [d.job_id for d in outcome.drained] == [waiting]


def test_a_backlog_whose_pushes_fill_every_freed_slot_is_left_to_them() -> None:
    """Doorbells that waited, yet each freed slot is filled by a push at once: Pub/Sub
    is delivering the backlog. Taking its jobs from the index would only double them
    (each one's doorbell still comes), so the drain leaves them to their pushes."""
    store = MemoryStore()
    clock = Clock()
    waiting = [submit(store, now=clock()) for _ in range(3)]
    now = [0.0]
    slots = Slots(4, clock=lambda: now[0])
    freed = slots.try_acquire()
    assert freed is not None
    freed.release()
    now[0] = 0.01  # the next push came 10 ms after the slot freed
    gate = DrainGate()
    held = Arrival(1, clock() - timedelta(seconds=BACKLOG_WAIT_S + 1))
    s = settings(drain_max_jobs=3)
    outcome = handle(
        submit(store, now=clock()), store, s, clock, gate=gate, arrival=held, slots=slots
    )
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    assert gate.backlogged(30)  # the sign is kept: were pushes to stop, the drain goes on
    assert all(store.read(j).record["status"] == "queued" for j in waiting)
    pair = [slots.try_acquire(), slots.try_acquire()]  # two slots free; a push takes one,
    for slot in pair:  # and none comes for the other
        assert slot is not None
        slot.release()
    now[0] = 0.01 + PUSH_GAP_S + 1  # pushes stopped keeping up
    outcome = handle(submit(store, now=clock()), store, s, clock, gate=gate, slots=slots)
    assert sorted(d.job_id for d in outcome.drained) == sorted(waiting)


def _kept_up_slots() -> Slots:
    """Slots whose freed slot a push filled 10 ms later: pushes keep up."""
    now = [0.0]
    slots = Slots(4, clock=lambda: now[0])
    freed = slots.try_acquire()
    assert freed is not None
    freed.release()
    now[0] = 0.01
    return slots


def test_while_doorbells_are_held_back_an_old_queued_job_is_not_taken_as_lost() -> None:
    """The safety net takes a queued job whose doorbell is overdue by age. A push that
    waited says the doorbells are held back: there, every queued job is old, and taking
    them while pushes keep up only doubled them. Without the sign, the net takes them."""
    s = settings(drain_max_jobs=3)
    for signs in (True, False):
        store = MemoryStore()
        clock = Clock()
        old = [submit(store, now=clock()) for _ in range(3)]
        clock.advance(s.overdue_after_seconds + 1)  # overdue by age
        gate = DrainGate()
        if signs:
            gate.note_backlog()
        outcome = handle(
            submit(store, now=clock()), store, s, clock, gate=gate, slots=_kept_up_slots()
        )
        taken = sorted(d.job_id for d in outcome.drained)
        assert taken == []  # signs: they wait their turn; none: pushes keep up
        if not signs:  # the same while freed slots wait for pushes: the net takes them
            outcome = handle(
                submit(store, now=clock()), store, s, clock, gate=gate, slots=starved_slots()
            )
            assert sorted(d.job_id for d in outcome.drained) == sorted(old)


def test_a_full_page_turns_a_backlog_to_listing_from_random_points() -> None:
    """A first listing is from the first marker (one call); a page that comes back full
    says the index is larger, so a backlog's next listings start at random points, and
    two drains take different jobs from it (from the first marker, both took the same)."""
    store = MemoryStore()
    clock = Clock()
    for _ in range(BACKLOG_LISTING + 5):
        submit(store, now=clock())
    gate = DrainGate()
    assert gate.index_fits
    s = settings(drain_max_jobs=1, max_concurrent=1)
    handle(submit(store, now=clock()), store, s, clock, gate=gate, slots=starved_slots(1))
    assert not gate.index_fits  # the page of BACKLOG_LISTING was full
    gate.note_backlog()
    store.calls.clear()
    outcome = handle(submit(store, now=clock()), store, s, clock, gate=gate, slots=starved_slots(1))
    drained = [d.job_id for d in outcome.drained]
    assert len(drained) == BACKLOG_LISTING + 5 and not store.list_pending()
    assert drained != sorted(drained, key=pending_object)  # not taken in name order
    assert store.calls["list"] <= 2 * (len(drained) + 1)  # a window is one or two calls
    assert gate.index_fits  # its tail was listed whole: plain listings from there on


def test_the_push_gap_is_how_long_freed_slots_wait_for_pushes() -> None:
    now = [100.0]
    slots = Slots(2, clock=lambda: now[0])
    assert slots.push_gap() == 0.0  # never-used slots are no gap (a cold start)
    a, b = slots.try_acquire(), slots.try_acquire()
    assert a is not None and b is not None
    a.release()
    now[0] = 103.0
    assert slots.push_gap() == 3.0  # a slot free for 3 s
    c = slots.try_acquire()
    assert c is not None and slots.push_gap() == 0.0  # every slot busy: pushes caught up
    one = Slots(1, clock=lambda: now[0])
    first = one.try_acquire()
    assert first is not None
    first.release()
    now[0] = 105.0
    again = one.try_acquire()  # the push came 2 s after the slot freed
    assert again is not None and one.push_gap() == 2.0  # one slot: what its push found


def test_the_in_app_429_is_no_backlog_sign() -> None:
    """Only a direct caller meets the slot guard; Cloud Run never does, so it says nothing
    about doorbells waiting."""
    store = MemoryStore()
    gate = DrainGate()
    slots = Slots(1)
    with slots.try_acquire():
        outcome = handle(submit(store), store, settings(drain_max_jobs=3), gate=gate, slots=slots)
    assert outcome.kind == OutcomeKind.BUSY and not gate.backlogged(30)


def test_a_drained_job_starts_only_if_it_fits_in_the_push_budget() -> None:
    store = MemoryStore()
    clock = Clock()
    for _ in range(3):
        submit(store, now=clock())
    gate = DrainGate()
    gate.note_backlog()
    taken: list[str] = []

    def take(job_id: str, stored: Any) -> Outcome:
        taken.append(job_id)
        t[0] += 30  # each job takes 30 s
        store.remove_pending(job_id)
        return Outcome(job_id, OutcomeKind.DONE)

    t = [0.0]
    budget = PushBudget(100, clock=lambda: t[0])  # 90 s usable
    s = settings(drain_max_jobs=3, drain_job_seconds=30)
    assert len(drain(store, s, clock, take, gate, budget=budget)) == 3  # at 0, 30 and 60 s
    for _ in range(3):
        submit(store, now=clock())
    t[0], taken[:] = 0.0, []
    budget = PushBudget(100, clock=lambda: t[0])
    s = settings(drain_max_jobs=3, drain_job_seconds=31)
    assert len(drain(store, s, clock, take, gate, budget=budget)) == 2  # not at 60 s: 30 left
    # through handle_delivery: a push deadline of 10 s leaves no room for any drained job
    outcome = handle(
        submit(store, now=clock()),
        store,
        settings(drain_max_jobs=3, push_deadline_seconds=10, drain_job_seconds=0.001),
        clock,
        arrival=Arrival(3, clock()),
    )
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []


def test_nothing_is_drained_once_the_instance_is_shutting_down() -> None:
    store = MemoryStore()
    clock = Clock()
    submit(store, now=clock())
    clock.advance(60)  # overdue
    gate = DrainGate()
    gate.note_backlog()
    shutdown = Shutdown(hand_back_wait_s=60)
    shutdown.begin("test")

    def take(job_id: str, stored: Any) -> Outcome:
        raise AssertionError("took a job while shutting down")

    assert drain(store, settings(drain_max_jobs=3), clock, take, gate, shutdown=shutdown) == []


def test_drain_takes_at_most_its_budget() -> None:
    store = MemoryStore()
    clock = Clock()
    for _ in range(4):
        submit(store, now=clock())
    clock.advance(60)
    trigger = submit(store, now=clock())
    outcome = handle(trigger, store, settings(drain_max_jobs=2), clock, slots=starved_slots())
    assert len(outcome.drained) == 2
    assert all(d.kind == OutcomeKind.DONE for d in outcome.drained)


def test_drain_reads_no_record_whose_marker_is_too_young_to_be_overdue() -> None:
    store = MemoryStore()
    clock = Clock()
    for _ in range(3):
        submit(store, now=clock())
    trigger = submit(store, now=clock())
    store.calls.clear()
    flow._PAUSE_CACHE.clear()  # the process's pause flag cache: read once, whatever ran before
    s = settings(drain_max_jobs=3)
    outcome = handle(trigger, store, s, clock, slots=starved_slots())
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []
    # the trigger's own record, its pipeline's pause flag, and its parent mark (workflows:
    # the after-terminal hook reads workflows/parents/<id>, absent for a job without
    # children, and lists nothing)
    assert store.calls["read"] == 3
    assert store.calls["list"] == 1  # the safety net's pending listing


def test_overdue_policy() -> None:
    s = settings()
    now = datetime.now(UTC)
    rec = records.new_record("a", "demo", {}, now - timedelta(seconds=20))
    assert overdue(rec, now, s)  # queued and due for more than stale_s / 2
    assert not overdue({**rec, "updated_at": job_queue.format_time(now)}, now, s)
    running = {**rec, **job_queue.claim_fields(rec, "o", now - timedelta(seconds=20))}
    assert not overdue(running, now, s)  # running and fresh
    assert overdue(running, now + timedelta(seconds=15), s)
    assert not overdue({**rec, "status": JobStatus.DONE}, now, s)


def test_a_drain_error_does_not_fail_the_request() -> None:
    class Flaky(MemoryStore):
        def read(self, job_id: str) -> Any:
            if job_id == "broken-job":
                raise Unavailable("storage hiccup")
            return super().read(job_id)

    store = Flaky()
    clock = Clock()
    store.add_pending("broken-job")
    trigger = submit(store, now=clock())
    outcome = handle(trigger, store, settings(drain_max_jobs=3), clock)
    assert outcome.kind == OutcomeKind.DONE and outcome.drained == []


# --- a job marked due (a hand-back, a rescue): the freed slot's own business


def test_a_freed_slot_takes_a_job_marked_due_however_young_and_whatever_the_gate() -> None:
    """A handed-back job's doorbell may pend, back off or be lost: the marker says it is
    due, so the next freed slot takes it though the safety net listed a moment ago and
    the marker is too young to be overdue by age."""
    read: list[str] = []

    class Reads(MemoryStore):
        def read(self, job_id: str) -> Any:
            read.append(job_id)
            return super().read(job_id)

    store = Reads()
    clock = Clock()
    handed = submit(store, now=clock())
    young = submit(store, now=clock())
    s = settings(drain_max_jobs=3)
    gate = DrainGate()
    assert gate.try_enter(s.drain_interval_seconds)  # another slot's safety net just listed
    mark_due(store, handed, clock())  # marked and announced (shared.hints.due_hint)
    wait_hint_moved(store, 0)  # the announce is written on a thread of its own
    trigger = submit(store, now=clock())
    outcome = handle(trigger, store, s, clock, gate=gate)
    assert [(d.job_id, d.kind) for d in outcome.drained] == [(handed, OutcomeKind.DONE)]
    assert read == [trigger, handed]  # no record but the marked one was read for the drain
    assert store.read(young).record["status"] == "queued"  # not marked: its doorbell comes


def test_marked_candidates_come_first_oldest_due_first_and_not_yet_due_ones_never() -> None:
    s = settings(drain_max_jobs=1)
    now = NOW
    old = now - timedelta(seconds=s.overdue_after_seconds + 1)
    entries = [
        PendingEntry("aged", old),
        PendingEntry("later", old, now - timedelta(seconds=1)),
        PendingEntry("young", now),
        PendingEntry("earlier", now, now - timedelta(seconds=3)),
        PendingEntry("future", old, now + timedelta(seconds=5)),  # a retry's backoff
    ]
    assert candidates(entries, now, s, backlogged=False, aged=False) == [
        ("earlier", True),
        ("later", True),
    ]
    assert candidates(entries, now, s, backlogged=False, aged=True, skip="later") == [
        ("earlier", True),
        ("aged", False),
        ("future", False),  # overdue by age is the record's to say (it is read)
    ]
    backlog = candidates(entries, now, s, backlogged=True, aged=True)
    assert backlog[:2] == [("earlier", True), ("later", True)]
    assert sorted(backlog[2:]) == [("aged", False), ("future", False), ("young", False)]


def test_the_watchdog_s_requeue_marks_the_marker_due_and_a_freed_slot_takes_it() -> None:
    """A rescued job (its owner went silent) is sent back due like a handed-back one:
    its marker says so, and the next freed slot takes it whatever its doorbell does."""
    from shared import job_queue as jq
    from shared.features.table import context
    from shared.recovery import recover
    from tests.unit.unit_support import Bell

    store = MemoryStore()
    clock = Clock()
    silent = submit(store, now=clock())
    stored = store.read(silent)
    claimed = {**stored.record, **jq.claim_fields(stored.record, "gone", clock())}
    store.update(claimed, stored.generation)
    clock.advance(60)  # twice the stale time: the owner went silent
    s = settings(drain_max_jobs=3)
    done = recover(context(store, Bell(), s), store.read(silent), clock())
    assert done.rescued and store.read(silent).record["status"] == "queued"
    assert {e.job_id: e.due for e in store.list_pending()} == {silent: clock()}
    gate = DrainGate()
    assert gate.try_enter(s.drain_interval_seconds)  # the safety net is shut
    outcome = handle(submit(store, now=clock()), store, s, clock, gate=gate)
    assert [(d.job_id, d.kind) for d in outcome.drained] == [(silent, OutcomeKind.DONE)]


def test_a_marked_job_found_taken_is_not_read_again_by_this_process_until_marked_anew() -> None:
    read: list[str] = []

    class Reads(MemoryStore):
        def read(self, job_id: str) -> Any:
            read.append(job_id)
            return super().read(job_id)

    store = Reads()
    clock = Clock()
    taken = submit(store, now=clock())
    mark_due(store, taken, clock())
    wait_hint_moved(store, 0)
    stored = store.read(taken)
    claimed = {**stored.record, **job_queue.claim_fields(stored.record, "elsewhere", clock())}
    store.update(claimed, stored.generation)  # another slot took it first: running, fresh
    s = settings(drain_max_jobs=3)
    gate = DrainGate(hint_read_s=0.0)  # reads the due hint at every freed slot
    assert gate.try_enter(s.drain_interval_seconds)  # only the marked path reads
    for _ in range(2):
        trigger = submit(store, now=clock())
        read.clear()
        assert handle(trigger, store, s, clock, gate=gate).drained == []
        assert read.count(taken) == (1 if _ == 0 else 0)
    announced = store.read_blob(hint_name(None)).generation
    mark_due(store, taken, clock() + timedelta(seconds=1))  # handed back again: a new mark
    wait_hint_moved(store, announced)  # a second announce within a second trails it
    clock.advance(2)
    read.clear()
    handle(submit(store, now=clock()), store, s, clock, gate=gate)
    assert read.count(taken) == 1


# --- a backlog's listing window


def _markers(store: MemoryStore, ids: list[str], pool: str | None = None) -> list[str]:
    for job_id in ids:
        store.add_pending(job_id, pool=pool)
    return sorted(e.key for e in store.list_pending(pool=pool))


@pytest.mark.parametrize("pool", [None, "heavy"])
def test_a_window_lists_from_its_start_and_wraps_round_to_the_first_markers(
    pool: str | None,
) -> None:
    store = MemoryStore("b")
    keys = _markers(store, [f"job-{i}" for i in range(40)], pool)
    start = random_start(pool)
    assert start.startswith("heavy/" if pool else "") and len(start.rpartition("/")[2]) == 2
    middle = keys[25]
    window, whole = listing_window(store, pool, middle, limit=30)
    got = [e.key for e in window]
    assert got == keys[25:] + keys[:15]  # from the start, then round from the first
    assert not whole  # 10 markers before the start were not listed
    window, whole = listing_window(store, pool, middle, limit=100)
    assert sorted(e.key for e in window) == keys and whole
    window, whole = listing_window(store, pool, keys[0], limit=40)
    assert [e.key for e in window] == keys and not whole  # a full page: more may follow


def test_a_window_of_one_pool_never_lists_another_pools_markers() -> None:
    store = MemoryStore("b")
    _markers(store, ["light-1", "light-2"])
    heavy = _markers(store, ["heavy-1", "heavy-2", "heavy-3"], "heavy")
    window, whole = listing_window(store, "heavy", random_start("heavy"))
    assert sorted(e.key for e in window) == heavy and whole


def test_a_slot_freed_while_another_runs_a_marked_job_takes_the_next_marked_one() -> None:
    """Two jobs handed back: the first freed slot takes one and runs it to its end; a slot
    that frees meanwhile must take the other, though the due hint has not moved since the
    first slot's listing (it said more than one mark)."""
    store, clock = MemoryStore(), Clock()
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow_once(ctx: Any) -> None:
        ran.append(ctx.job_id)
        if len(ran) == 1:
            started.set()
            release.wait(10)

    name = pipeline([("slow", slow_once)])
    handed = [submit(store, name, now=clock()) for _ in range(2)]
    for job_id in handed:
        mark_due(store, job_id, clock())
    wait_hint_moved(store, 0)
    gate, s = DrainGate(), settings(drain_max_jobs=3)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(handle, submit(store, now=clock()), store, s, clock, gate=gate)
        assert started.wait(5)  # the first freed slot runs one handed-back job
        second = handle(submit(store, now=clock()), store, s, clock, gate=gate)
        assert [d.job_id for d in second.drained] == [ran[1]]  # the other, at once
        release.set()
        drained = [d.job_id for d in first.result(10).drained + second.drained]
    assert sorted(drained) == sorted(handed) and sorted(ran) == sorted(handed)


def test_the_safety_net_waits_until_a_slot_has_idled_as_long_as_a_job_must_be_overdue() -> None:
    """A slot free for a few seconds (the end of a batch, pushes trickling) is no reason
    to list for lost doorbells: the net lists once a slot has waited for pushes as long as
    a job must be overdue before it is taken (Settings.overdue_after_seconds)."""
    s = settings(drain_max_jobs=3)
    for gap_s, taken in ((PUSH_GAP_S + 1, False), (s.overdue_after_seconds, True)):
        store, clock = MemoryStore(), Clock()
        lost = submit(store, now=clock())
        clock.advance(60)
        store.calls.clear()
        slots = starved_slots(gap_s=gap_s)
        outcome = handle(submit(store, now=clock()), store, s, clock, slots=slots)
        assert [d.job_id for d in outcome.drained] == ([lost] if taken else [])
        assert (store.calls["list"] > 0) == taken  # no listing at all before
