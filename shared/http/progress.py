"""A batch's progress counted from markers, never by reading every member.

One listing of the batch's markers (batches/<b>/) gives its members; the pending index
(pending/), time's delayed jobs (scheduled/) and flow control's ended index
(ended/<status>/<day>/, from the day before its first member was created) say which of them still
owe work and which failed or were cancelled; the rest are done. Each index is a hint
written before the record changes and removed after (README, "How it works"), so a
member both pending and ended counts as pending (a retried job), one both delayed and
ended counts as ended (a delayed job cancelled), and the counts may lag
a job's record by one write; GET /batches/<id> reads every record when exact states
matter. Cost: a few list calls per 1,000 members and per day since the batch began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import job_queue, records
from shared.bulk import DEFAULT_SINCE
from shared.errors import BatchNotFound, ReclaimError
from shared.jobs import JobStatus
from shared.status import BATCH_LIST_LIMIT

if TYPE_CHECKING:
    from shared.seams import Context

_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class Progress:
    """Members by what the indexes say: still pending, failed, cancelled, done."""

    batch_id: str
    total: int
    pending: int
    failed: int
    cancelled: int
    truncated: bool

    @property
    def done(self) -> int:
        return self.total - self.pending - self.failed - self.cancelled

    def to_json(self) -> dict[str, Any]:
        ended = self.total - self.pending
        return {
            "batch_id": self.batch_id,
            "total": self.total,
            "pending": self.pending,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "finished": self.pending == 0,
            "fraction": round(ended / self.total, 4) if self.total else 1.0,
            "truncated": self.truncated,
        }


def progress(ctx: Context, batch_id: str, now: datetime) -> Progress:
    """The batch's counts from its markers and the indexes; BatchNotFound without markers."""
    records.validate_batch_id(batch_id)
    members = set(ctx.store.list_batch(batch_id, limit=BATCH_LIST_LIMIT))
    if not members:
        raise BatchNotFound(batch_id)
    pending = members & {e.job_id for e in ctx.store.list_pending()}
    since = _began(ctx, members, now)
    ended: dict[JobStatus, set[str]] = {}
    for status in _ENDED:
        found: set[str] = set()
        for indexed in ctx.indexed():
            found |= set(indexed(ctx, (status,), since, now))
        ended[status] = (members & found) - pending  # pending again: a retried job
    for indexed in ctx.indexed():  # time's delayed jobs, unless they ended (cancelled)
        delayed = set(indexed(ctx, (JobStatus.QUEUED,), since, now))
        pending |= (members & delayed) - ended[JobStatus.FAILED] - ended[JobStatus.CANCELLED]
    cancelled = ended[JobStatus.CANCELLED] - ended[JobStatus.FAILED]
    return Progress(
        batch_id,
        total=len(members),
        pending=len(pending),
        failed=len(ended[JobStatus.FAILED]),
        cancelled=len(cancelled),
        truncated=len(members) >= BATCH_LIST_LIMIT,
    )


def _began(ctx: Context, members: set[str], now: datetime) -> datetime:
    """A day before the first member's (by name) creation: no member ended before the
    batch began, and a batch is most often one request. One read; `now` minus the bulk
    default when that record cannot be read."""
    first = min(members)
    try:
        created = job_queue.parse_time(ctx.store.read(first).record.get("created_at"))
    except ReclaimError:
        created = None
    return (created or now - DEFAULT_SINCE) - timedelta(days=1)
