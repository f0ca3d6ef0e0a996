"""shared.hints.index_board: the board that lets an idle sweep list only the pending index. Its
pure rules (a writer's note, the sweep's settling, when to check every index whole), and
the sweep on MemoryStore: idle runs list pending/ alone, a time index is listed only from
the hour it may hold, an index is taken off the board only once its lease has lapsed and a
listing found it empty, and an entry written without a note is found by the whole check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared import sweeper, timing
from shared.config import Settings
from shared.features import flow_policy as fp
from shared.features.table import context
from shared.hints import index_board
from shared.hints.index_board import LEASE_S, MARGIN_S, SLACK_S, Board, Entry
from shared.queue import parse_submission
from shared.shards import fanout_slot, fanout_slots
from shared.stores.memory import MemoryStore
from shared.submission.create import submit
from tests.unit.unit_support import Bell

NOW = datetime(2026, 12, 6, 12, 30, tzinfo=UTC)
LEASE = timedelta(seconds=LEASE_S)


def settings() -> Settings:
    return Settings.from_env({}, stale_seconds=30.0)


def sweep(store: MemoryStore, now: datetime, bell: Bell | None = None) -> sweeper.SweepResult:
    return sweeper.run_once(context(store, bell or Bell(), settings()), now)


def lists(store: MemoryStore, now: datetime) -> int:
    before = store.calls["list"]
    sweep(store, now)
    return store.calls["list"] - before


def post(store: MemoryStore, body: dict[str, Any], now: datetime) -> str:
    ctx = context(store, Bell(), Settings.from_env({}))
    return str(submit(ctx, parse_submission(body, settings()), now).jobs[0].job_id)


# --- the pure rules


def test_a_note_adds_an_index_renews_a_lease_past_its_half_and_lowers_an_hour() -> None:
    board = index_board.noted(Board(), "parked/", NOW)
    assert board is not None and board.entries["parked/"] == Entry(NOW + LEASE, None)
    assert board.made == NOW
    assert index_board.noted(board, "parked/", NOW + LEASE / 2 - timedelta(seconds=1)) is None
    half = NOW + LEASE / 2 + timedelta(seconds=1)
    renewed = index_board.noted(board, "parked/", half)
    assert renewed is not None and renewed.entries["parked/"].until == half + LEASE
    timed = index_board.noted(Board(), "scheduled/s1/", NOW, since="20261207T10")
    assert timed is not None
    assert index_board.noted(timed, "scheduled/s1/", NOW, since="20261208T00") is None  # later
    lowered = index_board.noted(timed, "scheduled/s1/", NOW, since="20261206T13")
    assert lowered is not None and lowered.entries["scheduled/s1/"].since == "20261206T13"


def test_a_time_index_may_hold_something_due_only_from_its_first_hour() -> None:
    board = Board({"scheduled/s0/": Entry(NOW, "20261206T13")}, NOW, NOW, 1)
    assert not board.may_hold("scheduled/s0/", before="20261206T13")  # now's hour: 12
    assert board.may_hold("scheduled/s0/", before="20261206T14")
    assert board.may_hold("scheduled/s0/") and not board.may_hold("scheduled/s1/")


def test_the_sweep_changes_an_entry_only_once_its_lease_and_the_slack_are_past() -> None:
    board = Board({"unique/": Entry(NOW, None), "scheduled/s2/": Entry(NOW, "20261206T12")})
    soon = NOW + timedelta(seconds=SLACK_S - 1)
    assert index_board.settled(board, "unique/", soon, None, True) is None  # writers may trust it
    late = NOW + timedelta(seconds=SLACK_S)
    dropped = index_board.settled(board, "unique/", late, None, True)
    assert dropped is not None and "unique/" not in dropped.entries
    raised = index_board.settled(board, "scheduled/s2/", late, "20261213T09", False)
    assert raised is not None and raised.entries["scheduled/s2/"].since == "20261213T09"
    assert index_board.settled(board, "scheduled/s2/", late, "20261206T12", False) is None
    assert index_board.settled(board, "parked/", late, None, True) is None  # not on it


def test_a_writer_stops_trusting_its_note_a_margin_before_the_sweep_may_drop_it() -> None:
    """The writer's trust ends MARGIN_S before the lease; the sweep acts SLACK_S after it:
    an entry written under a note is in every listing that may take the note away."""
    assert MARGIN_S + SLACK_S >= 300
    store = MemoryStore()
    index_board.note(store, "parked/", NOW)
    reads = store.calls["read"]
    index_board.note(store, "parked/", NOW + LEASE - timedelta(seconds=MARGIN_S + 1))
    assert store.calls["read"] == reads  # still trusted: no call at all
    index_board.note(store, "parked/", NOW + LEASE - timedelta(seconds=MARGIN_S))
    assert store.calls["read"] == reads + 1  # no longer: read (and renewed)
    assert index_board.read(store).entries["parked/"].until > NOW + LEASE


def test_the_whole_check_is_hourly_for_a_new_board_then_daily() -> None:
    assert Board().check_due(NOW)  # no board: check
    board = Board({}, NOW, NOW, 1)
    assert not board.check_due(NOW + timedelta(minutes=59))
    assert board.check_due(NOW + timedelta(hours=1))
    old = Board({}, NOW - timedelta(days=2), NOW, 1)
    assert not old.check_due(NOW + timedelta(hours=23))
    assert old.check_due(NOW + timedelta(days=1))


def test_a_board_that_cannot_be_read_counts_as_never_checked() -> None:
    board = index_board.decode(b"not json", 7)
    assert board.generation == 7 and board.check_due(NOW) and board.entries == {}
    text = index_board.encode(Board({"parked/": Entry(NOW, "x")}, NOW, NOW, 3))
    assert index_board.decode(text, 3) == Board({"parked/": Entry(NOW, "x")}, NOW, NOW, 3)


# --- the sweep


def test_an_idle_sweep_lists_the_pending_index_alone_after_its_first_check() -> None:
    store = MemoryStore()
    assert lists(store, NOW) == 1 + 6 + len(fanout_slots())  # the first: the whole check
    assert [lists(store, NOW + timedelta(minutes=m)) for m in (1, 2, 3)] == [1, 1, 1]
    assert lists(store, NOW + timedelta(hours=1)) > 1  # the board's first day: hourly checks


def test_a_delayed_job_a_week_ahead_costs_the_sweep_nothing_until_its_hour() -> None:
    store, bell = MemoryStore(), Bell()
    sweep(store, NOW)  # the board's first check
    job_id = post(store, {"pipeline": "demo", "delay_seconds": 7 * 86400}, NOW)
    assert lists(store, NOW + timedelta(minutes=1)) == 1  # its slot's hour is a week ahead
    due = NOW + timedelta(days=7, seconds=1)
    before = store.calls["list"]
    result = sweep(store, due, bell)
    # pending/ and its slot (the whole check of the board's second day comes at its hour)
    assert result.released == 1 and bell.rung == [job_id]
    assert store.calls["list"] - before <= 2 + 1 + 5 + len(fanout_slots())


def test_an_emptied_index_leaves_the_board_once_its_lease_lapsed_and_a_note_brings_it_back() -> (
    None
):
    store = MemoryStore()
    index_board.note(store, fp.PARKED_PREFIX, NOW)
    sweep(store, NOW)  # lists parked/ (empty: the note is still good)
    assert index_board.read(store).may_hold(fp.PARKED_PREFIX)
    lapsed = NOW + LEASE + timedelta(seconds=SLACK_S)
    sweep(store, lapsed)
    assert not index_board.read(store).may_hold(fp.PARKED_PREFIX)
    index_board.note(store, fp.PARKED_PREFIX, lapsed)  # a pipeline paused again
    assert index_board.read(store).may_hold(fp.PARKED_PREFIX)


def test_a_time_index_is_raised_to_its_next_hour_once_its_due_entries_are_gone() -> None:
    soon = "a-0"
    later = next(f"a-{i}" for i in range(1, 200) if fanout_slot(f"a-{i}") == fanout_slot(soon))
    key = f"{timing.SCHEDULED_PREFIX}{fanout_slot(soon)}/"
    store = MemoryStore()
    sweep(store, NOW)
    post(store, {"pipeline": "demo", "id": soon, "delay_seconds": 600}, NOW)
    post(store, {"pipeline": "demo", "id": later, "delay_seconds": 3 * 86400}, NOW)
    assert index_board.read(store).entries[key].since == timing.hour_bucket(NOW)
    lapsed = NOW + LEASE + timedelta(seconds=SLACK_S)  # the submit's note has lapsed
    assert sweep(store, lapsed).released == 1
    sweep(store, lapsed + timedelta(minutes=1))  # nothing due: the slot's next hour is found
    raised = timing.hour_bucket(NOW + timedelta(days=3))
    assert index_board.read(store).entries[key].since == raised
    assert lists(store, lapsed + timedelta(minutes=2)) == 1  # no more listing of the slot


def test_an_entry_written_without_a_note_is_found_by_the_whole_check() -> None:
    """A revision from before the board (or a hand) writes an entry and notes nothing: the
    next whole check puts its index on the board, and the sweep acts on it."""
    store = MemoryStore()
    sweep(store, NOW)
    store.put_blob(fp.parked_name("demo", "j-old"), b"", generation=0)  # as an old revision
    assert not index_board.read(store).may_hold(fp.PARKED_PREFIX)
    sweep(store, NOW + timedelta(hours=1))  # the board's first day: an hourly check
    assert index_board.read(store).may_hold(fp.PARKED_PREFIX)


def test_a_first_check_that_finds_entries_checks_every_run_for_an_upgrade_s_hour() -> None:
    """Entries before the board's first check: an upgrade in use, whose older revisions may
    still write without a note. Every run checks whole for UPGRADE_CHECK_S, then hourly."""
    store = MemoryStore()
    context(store, Bell(), settings())  # the features' prefixes
    store.put_blob(fp.parked_name("demo", "j-old"), b"", generation=0)  # before the board
    sweep(store, NOW)
    board = index_board.read(store)
    assert board.may_hold(fp.PARKED_PREFIX)
    end = NOW + timedelta(seconds=index_board.UPGRADE_CHECK_S)
    assert board.every_run_until == end
    whole = 1 + 5 + len(fanout_slots())
    assert lists(store, NOW + timedelta(minutes=1)) >= whole  # checked whole again
    assert lists(store, end - timedelta(minutes=1)) >= whole
    assert lists(store, end + timedelta(minutes=1)) < whole  # hourly from here
