"""Which pending markers one sweep run reads: the pure policy of shared.sweeper.

The sweep lists the WHOLE pending index every run (a list call returns up to 1,000
names, so 10,000 pending jobs cost 10 class A calls per run, not per job) and reads a
record only when its marker says the job may need action. A marker's mark is the later
of when it was created (the submit, a release, a retry: the record is written after
it) and its ``due`` metadata (a rescue, a re-ring, a hand-back: written with the same
time as the record's updated_at). Every write of a pending record moves its updated_at
(or its not_before) forward from there, and shared.job_queue.stale_action acts on a
record only once that reference is older than its pool's stale time; so a marker marked
less than the shortest stale time ago (minus a slack for the clocks: the marker's
creation is Cloud Storage's, the rest the writers') belongs to a job that needs nothing
yet, and its read is skipped. A marker that cannot be dated is always read.

When the index is small (READ_WHOLE_MAX, within the read budget Settings.sweep_max_jobs)
every record is read (exact gauges). When it is not, the run reads only the markers
that may need action, the longest-marked first, up to the budget, and those
without their pipeline (the gauges cannot place them unread); the others are counted
from the listing. It used to fill the rest of the budget with the oldest of them: in a
backlog that lasts, that read the budget every run (1,000 records a minute) whatever
needed doing, a read per job per run for nothing the sweep acts on. A lost doorbell
(a queued job whose record went stale) is therefore rung by the first run after its
job can be stale, wherever it is in the index, whenever the markers that may need
action fit in the budget; past that,
they are taken longest-marked first, and each one handled gets a fresh mark (it goes to
the back), so every one is read within ceil(may-need-action / budget) runs. Markers whose
queued job the sweep has re-rung in a row (a backlog that waits past the stale time:
its doorbells are still in Pub/Sub, and each re-ring waits twice as long as the last)
are read after those re-rung fewer times, so they never hold a new lost doorbell back. Skipping a
read never loses a job: a skipped marker only grows older until it is read. A marker whose
due mark lies within the next Settings.retry_wait_seconds (a retry backing off longer than
that: its marker is marked due at its not_before) is read too, so that the sweep rings it
ahead of time (shared.claim.due_wait).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from shared.config import Settings
from shared.storage import PendingEntry

MARK_SLACK_MAX_S = 5.0
"""Allowance between Cloud Storage's clock (a marker's creation) and the writers' (the
record's updated_at, a due mark), taken off the stale time; at most a quarter of it.
Google's clocks are synchronised far tighter; a larger skew only delays a rescue by
the excess (the marker keeps ageing), it never loses one."""


READ_WHOLE_MAX = 100
"""An index of at most this many markers (and within the budget) is read whole every
run: exact gauges, and a crash's leftovers repaired by the next run, for at most 100
reads a run. A larger one is read as past the budget (only what may need action): a
1,000-marker index read whole was up to 1,000 reads a run for nothing the sweep acts on
(bench/big_backlog.py: a 4,000-job batch's first minute)."""


@dataclass(frozen=True)
class Plan:
    """One run's markers: those it reads, in this order, and those it leaves unread
    (counted in the gauges from the listing alone)."""

    read: list[PendingEntry]
    unread: list[PendingEntry]


def quiet_seconds(settings: Settings) -> float:
    """How long after its mark a marker's job cannot need the sweep: the shortest stale
    time of any pool, less the clock slack."""
    stale = settings.stale_seconds
    pools = settings.pools
    for name in pools.names:
        own = pools.get(name).stale_seconds
        if own is not None:
            stale = min(stale, own)
    return stale - min(MARK_SLACK_MAX_S, stale / 4)


def marked_at(entry: PendingEntry) -> datetime | None:
    """The later of the marker's creation and its due mark (None: cannot be dated)."""
    times = [_utc(t) for t in (entry.created, entry.due) if t is not None]
    return max(times) if times else None


def may_need_action(
    entry: PendingEntry, now: datetime, quiet_s: float, ahead_s: float = 0.0
) -> bool:
    """Whether the job's record may need the sweep: marked quiet_s ago or more, or undated,
    or marked due within the next ahead_s (a retry the sweep rings ahead of its backoff:
    shared.claim.due_wait)."""
    mark = marked_at(entry)
    if mark is None:
        return True
    age = (_utc(now) - mark).total_seconds()
    return age >= quiet_s or (entry.due is not None and -ahead_s <= age < 0)


def plan(entries: Sequence[PendingEntry], now: datetime, settings: Settings, limit: int) -> Plan:
    """What one run reads of the whole listing (see the module doc); `limit` is its
    read budget."""
    if len(entries) <= min(limit, READ_WHOLE_MAX):
        return Plan(list(entries), [])  # a small index: every record, in name order
    quiet = quiet_seconds(settings)
    act: list[PendingEntry] = []
    rest: list[PendingEntry] = []
    for entry in entries:
        ahead = settings.retry_wait_seconds
        (act if may_need_action(entry, now, quiet, ahead) else rest).append(entry)
    # the jobs re-rung fewest times in a row first (a backlog's re-rung jobs wait longer
    # each time: shared.job_queue.RERING_DOUBLINGS_MAX), each group longest-marked first
    act.sort(key=lambda e: (e.rerings, _stamp(marked_at(e)), e.key))
    unplaced = sorted((e for e in rest if e.pipeline is None), key=lambda e: _stamp(e.created))
    order = act + unplaced
    return Plan(order[:limit], order[limit:] + [e for e in rest if e.pipeline is not None])


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _stamp(t: datetime | None) -> float:
    return float("-inf") if t is None else _utc(t).timestamp()
