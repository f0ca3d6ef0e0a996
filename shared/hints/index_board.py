"""Which feature indexes may hold entries: the board the sweep reads so that an idle run
lists nothing but the pending index.

Every sweep run used to list each feature's index whether it was ever used: the delayed
jobs' hour index in each of its fan-out slots and under the old names, unique keys,
parked jobs, a key's waiters and the workflows' open markers, nine class A listings a run
on an empty queue (about $2 a month at one run a minute,
https://cloud.google.com/storage/pricing). Now one small object, ``hints/indexes``,
says which of them may hold anything, and for a time index the earliest hour it may
hold; the sweep reads it (one class B read) and lists an index only when it may hold
something due.

The rules that keep it safe (no entry is ever left unlisted):

- a writer notes an index (``note``) before it writes an entry there, and trusts what
  it noted for a lease: until LEASE_S after the note, less MARGIN_S (it renews the lease,
  one write, once past half of it, and lowers a time index's hour when it writes an
  earlier one). Writers keep what they read per process, so a busy index costs about
  two board writes a lease, not one a job;
- the sweep takes an index off the board (or raises a time index's earliest hour) only
  after it listed the index empty (or found its next hour) past the lease's end plus
  SLACK_S: by then no writer trusts the old entry, and everything written under it was
  in that listing (writes take far less than MARGIN_S + SLACK_S), while any later
  write renewed the board, which changes its generation and fails the sweep's
  generation-matched write;
- what the board cannot know (entries written by a revision from before it, or by
  hand) the sweep finds by listing every watched index once, limit 1, when the board is
  missing or its last such check is old: hourly for a day after the board was made,
  then daily. When the first such check finds entries, the deployment may be an upgrade
  in use, whose older revisions may still write for a while without a note (a request
  runs up to claim's timeout): every run checks whole for UPGRADE_CHECK_S.

The board is one object written rarely (under Cloud Storage's one write a second per
object, https://cloud.google.com/storage/quotas), always generation-matched.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.errors import AlreadyExists, LostRace, NotFound, StorageError, Unavailable
from shared.logs import get_logger
from shared.storage import BlobInfo, Store

log = get_logger(__name__)

BOARD = "hints/indexes"
LEASE_S = 3600.0
"""How long a note lasts: a writer renews it once past half of it."""
MARGIN_S = 300.0
"""A writer stops trusting a note this long before its lease ends."""
SLACK_S = 60.0
"""The sweep changes an entry only this long after its lease ended (clock skew)."""
CHECK_EARLY_S = 3600.0
CHECK_EVERY_S = 86400.0
"""How often the sweep lists every watched index for entries the board never heard of:
hourly for the first day of a board, then daily."""
UPGRADE_CHECK_S = 3600.0
"""After an upgrade in use (the first check found entries): a whole check every run this
long, while the older revisions finish (claim's request timeout is 1,800 s)."""
WRITE_ATTEMPTS = 8


@dataclass(frozen=True)
class Entry:
    """One index on the board: until when writers may trust it, and for a time index the
    earliest hour segment it may hold (None: any)."""

    until: datetime
    since: str | None = None


@dataclass(frozen=True)
class Board:
    """The board as read: its entries by index prefix, when it was made and last
    checked whole, and the generation that fences its next write (0: no board yet)."""

    entries: Mapping[str, Entry] = field(default_factory=dict)
    made: datetime | None = None
    checked: datetime | None = None
    generation: int = 0
    every_run_until: datetime | None = None
    """An upgrade in use: every run checks whole until then (UPGRADE_CHECK_S)."""

    def may_hold(self, key: str, before: str | None = None) -> bool:
        """Whether the index under `key` may hold an entry (with `before`, a time index's
        end: one whose hour segment sorts before it)."""
        entry = self.entries.get(key)
        if entry is None:
            return False
        return before is None or entry.since is None or entry.since < before

    def check_due(self, now: datetime) -> bool:
        """Whether the sweep should list every watched index this run (see the module)."""
        if self.generation == 0 or self.checked is None or self.made is None:
            return True
        if self.every_run_until is not None and now < self.every_run_until:
            return True
        every = CHECK_EARLY_S if now - self.made < timedelta(days=1) else CHECK_EVERY_S
        return (now - self.checked).total_seconds() >= every


# --------------------------------------------------------------------------- the codec


def _time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def decode(data: bytes, generation: int) -> Board:
    """The board from its JSON; what cannot be read counts as missing (the sweep's
    full check rebuilds it: never less listed, only more)."""
    try:
        raw = json.loads(data)
    except ValueError:
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    entries: dict[str, Entry] = {}
    for key, value in (raw.get("indexes") or {}).items():
        until = _time(value.get("until")) if isinstance(value, dict) else None
        if isinstance(key, str) and until is not None:
            since = value.get("since")
            entries[key] = Entry(until, since if isinstance(since, str) else None)
    made, checked = _time(raw.get("made")), _time(raw.get("checked"))
    if made is None:  # unreadable: the sweep checks every index and writes it anew
        checked = None
    return Board(entries, made, checked, generation, _time(raw.get("every_run_until")))


def encode(board: Board) -> bytes:
    body: dict[str, Any] = {
        "made": board.made.isoformat() if board.made else None,
        "checked": board.checked.isoformat() if board.checked else None,
        "every_run_until": (board.every_run_until.isoformat() if board.every_run_until else None),
        "indexes": {
            k: {"until": e.until.isoformat(), **({"since": e.since} if e.since else {})}
            for k, e in sorted(board.entries.items())
        },
    }
    return json.dumps(body, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- the rules


def noted(board: Board, key: str, now: datetime, since: str | None = None) -> Board | None:
    """The board after a writer's note of `key` (with `since`: the hour of the entry it
    writes in a time index), or None when the board already covers it for long enough."""
    entry = board.entries.get(key)
    if (
        entry is not None
        and (entry.until - now).total_seconds() >= LEASE_S / 2
        and (since is None or entry.since is None or entry.since <= since)
    ):
        return None
    until = max(entry.until if entry else now, now + timedelta(seconds=LEASE_S))
    if entry is None or since is None:
        first = since if entry is None else entry.since
    else:
        first = None if entry.since is None else min(entry.since, since)
    return _with(board, key, Entry(until, first), now)


def _with(board: Board, key: str, entry: Entry | None, now: datetime) -> Board:
    entries = dict(board.entries)
    if entry is None:
        entries.pop(key, None)
    else:
        entries[key] = entry
    return replace(board, entries=entries, made=board.made or now)


def settled(board: Board, key: str, now: datetime, since: str | None, empty: bool) -> Board | None:
    """The board after the sweep listed `key` and found it `empty` (else its first
    entry's hour `since`), or None when it may not change it yet (the lease runs) or
    nothing changes."""
    entry = board.entries.get(key)
    if entry is None or (now - entry.until).total_seconds() < SLACK_S:
        return None
    if empty:
        return _with(board, key, None, now)
    if since is None or since == entry.since:
        return None
    return _with(board, key, Entry(entry.until, since), now)


def checked(board: Board, found: Mapping[str, str | None], now: datetime) -> Board:
    """The board after a full check: every index found holding an entry is on it (its
    lease at least until now; a time index from its first entry's hour at the latest).
    A first check that finds entries starts an upgrade's window (a new deployment whose
    first entries came before its first sweep pays it too: an hour of checks)."""
    out = board
    if board.checked is None and found:
        out = replace(out, every_run_until=now + timedelta(seconds=UPGRADE_CHECK_S))
    for key, since in found.items():
        entry = out.entries.get(key)
        if entry is None:
            out = _with(out, key, Entry(now, since), now)
        elif entry.since is not None and (since is None or since < entry.since):
            out = _with(out, key, Entry(entry.until, since), now)
    return replace(out, made=out.made or now, checked=now)


# --------------------------------------------------------------------------- the I/O


def read(store: Store) -> Board:
    """The board as stored (an empty one with generation 0 when there is none)."""
    try:
        blob = store.read_blob(BOARD)
    except NotFound:
        return Board()
    return decode(blob.data, blob.generation)


def change(
    store: Store, step: Callable[[Board], Board | None], board: Board | None = None
) -> Board:
    """Apply `step` to the board (`board`, as just read, or read now) and write it,
    generation-matched, reading it again on a lost race; the board as it stands after
    (unchanged when `step` says None)."""
    for _ in range(WRITE_ATTEMPTS):
        board = board if board is not None else read(store)
        new = step(board)
        if new is None:
            return board
        try:
            generation = store.put_blob(BOARD, encode(new), generation=board.generation)
        except (LostRace, AlreadyExists):
            board = None  # someone else wrote it meanwhile: read it again
            continue
        return replace(new, generation=generation)
    raise Unavailable(f"{BOARD}: still changing after {WRITE_ATTEMPTS} attempts")


class _Notes:
    """What this process noted, per store and index: until when it trusts the note, and
    the earliest hour it covers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trusted: dict[tuple[int, str], tuple[datetime, str | None]] = {}

    def covered(self, store: Store, key: str, now: datetime, since: str | None) -> bool:
        with self._lock:
            known = self._trusted.get((id(store), key))
        if known is None or now >= known[0]:
            return False
        return since is None or known[1] is None or known[1] <= since

    def keep(self, store: Store, key: str, entry: Entry) -> None:
        with self._lock:
            if len(self._trusted) > 1024:
                self._trusted.clear()
            trust = entry.until - timedelta(seconds=MARGIN_S)
            self._trusted[(id(store), key)] = (trust, entry.since)


_NOTES = _Notes()


def note(store: Store, key: str, now: datetime | None = None, *, since: str | None = None) -> None:
    """Before writing an entry under `key` (with `since`: the hour segment of a time
    index's entry): make sure the board lists the index. Free while this process's last
    note covers it; else a read, and a write when the board needs one. Raises
    StorageError when the board cannot be read or written: the entry must not be
    written then (the caller fails, its client retries)."""
    now = now or datetime.now(UTC)
    if _NOTES.covered(store, key, now, since):
        return
    board = change(store, lambda b: noted(b, key, now, since))
    entry = board.entries.get(key)
    if entry is not None:
        _NOTES.keep(store, key, entry)


# --------------------------------------------------------------------------- the sweep


def full_check(
    store: Store, board: Board, watched: Iterable[str], now: datetime
) -> tuple[Board, int]:
    """List every watched index once (limit 1; an index with watched sub-indexes up to the
    first of them) and put on the board each one found holding an entry; the board after,
    and the listings made."""
    keys = sorted(set(watched))
    found: dict[str, str | None] = {}
    for key in keys:
        name = first_entry(store, key, keys)
        if name is not None:
            found[key] = hour_of(key, name)
    return change(store, lambda b: checked(b, found, now), board), len(keys)


def first_entry(store: Store, key: str, keys: Iterable[str]) -> str | None:
    """The first name under `key` outside its watched sub-indexes (None: none)."""
    inner = sorted(k for k in keys if k != key and k.startswith(key))
    end = inner[0] if inner else None
    listed = store.list_blobs(key, end_before=end, limit=1)
    return listed[0].name if listed else None


def hour_of(key: str, name: str) -> str | None:
    """The segment right after `key` in an entry's name (a time index's hour)."""
    rest = name[len(key) :]
    return rest.split("/", 1)[0] if "/" in rest else None


class Observed:
    """What one sweep run's passes saw of their indexes (they may run on two threads):
    for each index listed, whether it was empty, else its first entry's hour."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: dict[str, tuple[bool, str | None]] = {}

    def listed(self, key: str, names: list[str]) -> None:
        """A pass listed `key` from its start and got these names (first first)."""
        with self._lock:
            self.seen[key] = (not names, hour_of(key, names[0]) if names else None)


def settle(store: Store, board: Board, observed: Observed, now: datetime) -> int:
    """After a run: take off the board the indexes it listed empty, and raise the hours
    of those it found starting later, once their lease ended (one write, or none);
    the number of entries changed."""
    seen = dict(observed.seen)
    if not any(settled(board, k, now, s, e) is not None for k, (e, s) in seen.items()):
        return 0
    changed = [0]

    def step(current: Board) -> Board | None:
        out, changed[0] = current, 0
        for key, (empty, since) in seen.items():
            new = settled(out, key, now, since, empty)
            if new is not None:
                out, changed[0] = new, changed[0] + 1
        return out if changed[0] else None

    try:
        change(store, step, board)
    except StorageError as exc:  # the next run tries again; the board only lists more
        log.warning("could not settle the index board", error=str(exc))
        return 0
    return changed[0]


_RUNS: dict[int, tuple[Board, Observed]] = {}
_RUNS_LOCK = threading.Lock()


def current(store: Store) -> tuple[Board, Observed] | None:
    """The board of the sweep run under way on `store` in this process and what its
    passes observed (the sweeper sets it: `sweeping`), None outside a run."""
    with _RUNS_LOCK:
        return _RUNS.get(id(store))


def sweep_list(store: Store, key: str, limit: int) -> list[BlobInfo]:
    """A sweep pass's listing of the index `key` from its start: no call while the run's
    board says it holds nothing, and what it found told to the board. Outside a sweep run
    (no board): the plain listing."""
    run = current(store)
    if run is not None and not run[0].may_hold(key):
        return []
    listed = store.list_blobs(key, limit=limit)
    if run is not None:
        run[1].listed(key, [info.name for info in listed[:1]])
    return listed


class sweeping:
    """Within a sweep run on `store`: current(store) answers its board and observations
    (a pass may run on another thread than the sweeper's)."""

    def __init__(self, store: Store, board: Board, observed: Observed) -> None:
        self._key = id(store)
        self._value = (board, observed)

    def __enter__(self) -> sweeping:
        with _RUNS_LOCK:
            _RUNS[self._key] = self._value
        return self

    def __exit__(self, *exc: object) -> None:
        with _RUNS_LOCK:
            _RUNS.pop(self._key, None)
