"""What the stores share: counting their calls, and where a job's record and marker are
looked for (the names of today and, while legacy_names, of before)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from shared.errors import AlreadyExists, NotFound
from shared.storage import (
    _BLOB_NAME,
    _RESERVED,
    RecordStat,
    Stored,
    job_object,
    legacy_job_object,
    pending_object,
)

_T = TypeVar("_T")


class CallCounter:
    """A thread-safe ``calls`` Counter: logical API calls by kind, for the benchmarks."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._calls_lock:
            self.calls[kind] += 1

    def share_counter(self, owner: CallCounter) -> None:
        """Count into owner's counter from now on (the shards of one sharded store)."""
        self.calls, self._calls_lock = owner.calls, owner._calls_lock


_ABSENT_MEMO_MAX = 100_000
"""Ids a store remembers as absent at their old record name (a few MB at most)."""
_ABSENT_MEMO_S = 60.0
"""How long that holds: a submit's existence read and its create are a moment apart; an
earlier reclaim still running beside this one (a rollout) may write an old name later."""


class StoreBase(CallCounter):
    """What both stores share beyond counting: the index prefixes they were handed, and
    where a job's record is looked for (its name now, and its old name while
    legacy_names: RECLAIM_LEGACY_NAMES, docs/capacity.md "Names that spread load")."""

    def __init__(self, *, legacy_names: bool = True) -> None:
        super().__init__()
        self.index_prefixes: frozenset[str] = frozenset()
        self.legacy_names = legacy_names
        self._at_old_name: set[str] = set()  # ids whose record this store found at its old name
        # id -> when this store saw it absent at its old name: only an earlier reclaim
        # writes old names, so a submit's read that missed spares its create a second look
        self._not_at_old_name: dict[str, float] = {}

    # records, by name: the stores' own primitives (NotFound when there is no object)

    def _read_name(self, job_id: str, name: str) -> Stored:
        raise NotImplementedError

    def _stat_name(self, job_id: str, name: str) -> RecordStat:
        raise NotImplementedError

    def _record_names(self, job_id: str) -> tuple[str, ...]:
        """The names a job's record may have, the likelier first: an old record is found at
        its old name at the cost of one more read, a new one at no extra cost."""
        new = job_object(job_id)
        if not self.legacy_names or self._absent_at_old_name(job_id):
            return (new,)
        old = legacy_job_object(job_id)
        return (old, new) if job_id in self._at_old_name else (new, old)

    def _found_at(self, job_id: str, name: str) -> None:
        """Remember which name holds a record, so its updates go there (CAS in place). One
        found at its new name has none at its old (a create refuses an id the old name
        holds), so a CAS on it that loses does not look there: it lost to a writer of the
        same name (bench/big_backlog.py: a 404 read after about every lost CAS)."""
        if name == legacy_job_object(job_id):
            self._at_old_name.add(job_id)
        else:
            self._missed_old_name(job_id)

    def _missed_old_name(self, job_id: str) -> None:
        self._at_old_name.discard(job_id)
        if len(self._not_at_old_name) >= _ABSENT_MEMO_MAX:
            self._not_at_old_name.clear()  # a bound on memory; a cleared id costs one more look
        self._not_at_old_name[job_id] = time.monotonic()

    def _absent_at_old_name(self, job_id: str) -> bool:
        seen = self._not_at_old_name.get(job_id)
        return seen is not None and time.monotonic() - seen < _ABSENT_MEMO_S

    def _marker_names(self, job_id: str, pool: str | None) -> tuple[str, ...]:
        """The names a job's pending marker may have: its name, then (while legacy_names)
        the one from before the hash segment. A marker is removed or marked at the first
        that holds one, so a job of a new layout costs one call as before."""
        new = pending_object(job_id, pool)
        return (new, pending_object(job_id, pool, legacy=True)) if self.legacy_names else (new,)

    def _first(
        self, job_id: str, fetch: Callable[[str, str], _T], names: tuple[str, ...] | None = None
    ) -> tuple[str, _T]:
        """(name, fetch(job_id, name)) of the first of names (default: every name the record
        may have) that holds the record; NotFound if none."""
        for name in self._record_names(job_id) if names is None else names:
            try:
                found = fetch(job_id, name)
            except NotFound:
                if name == legacy_job_object(job_id):
                    self._missed_old_name(job_id)
                continue
            self._found_at(job_id, name)
            return name, found
        raise NotFound(f"no record {job_id}")

    def read(self, job_id: str) -> Stored:
        return self._first(job_id, self._read_name)[1]

    def generation(self, job_id: str) -> int:
        return self.stat(job_id).generation

    def stat(self, job_id: str) -> RecordStat:
        """The record's generation and status from its metadata alone: what a waiting
        status read polls. NotFound when there is no record."""
        return self._first(job_id, self._stat_name)[1]

    def _name_to_write(self, job_id: str) -> str:
        """Where an update writes: where the record was last found (an old record stays at
        its old name, so a running job is never split between two names)."""
        return self._record_names(job_id)[0]

    def _elsewhere(self, job_id: str, tried: str) -> str | None:
        """After a CAS at `tried` lost: the record's other name when a record is there (this
        process had not read it), else None. One read, only on a lost CAS."""
        others = tuple(n for n in self._record_names(job_id) if n != tried)
        try:
            return self._first(job_id, self._stat_name, others)[0] if others else None
        except NotFound:
            return None

    def _refuse_old_record(self, job_id: str) -> None:
        """Before a create: AlreadyExists when the id's record has its old name, so a
        replayed submit finds its job instead of making a second record. One read per
        create, while legacy_names."""
        if not self.legacy_names or self._absent_at_old_name(job_id):
            return
        try:
            self._stat_name(job_id, legacy_job_object(job_id))
        except NotFound:
            self._missed_old_name(job_id)
            return
        self._at_old_name.add(job_id)
        raise AlreadyExists(f"record {job_id} already exists")

    def allow_index_prefixes(self, prefixes: Iterable[str]) -> None:
        """Serve index objects under these prefixes too (the features' own, handed in with
        the table); a prefix that could reach a record, a marker or an output is a bug."""
        new = frozenset(prefixes)
        for p in new:
            if (
                not p.endswith("/")
                or p.startswith(_RESERVED)
                or not all(
                    _BLOB_NAME.fullmatch(s) and s not in (".", "..") for s in p[:-1].split("/")
                )
            ):
                raise ValueError(f"index prefix {p!r} is not a safe top-level prefix")
        with self._calls_lock:
            self.index_prefixes = self.index_prefixes | new
