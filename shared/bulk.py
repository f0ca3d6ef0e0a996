"""Bulk retry and cancel: select jobs from the cheapest index, then act, paced.

Cost is O(matching jobs), never a walk of jobs/: the candidates come from job ids given,
a batch's markers (batches/<b>/), the pending index (queued, running) or the features'
own indexes (Feature.indexed): flow control's ended index (ended/<status>/<YYYYMMDD>/<id>:
failed and cancelled jobs by day, written by a finish hook before the pending marker
goes, so a crash leaves it to the sweep's repeat of the hooks) and time's delayed jobs.
An index is only a hint: each candidate's record is read and the filters are
checked on it, so an entry that went stale (a retried job) selects nothing. Acting is a
policy transition with a CAS (shared.control); a job that changed meanwhile is skipped.
Re-running the same command continues where an interrupted one stopped: the jobs it
already moved no longer match.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import job_queue
from shared.errors import (
    CorruptRecord,
    IllegalTransition,
    InvalidInput,
    LostRace,
    NotFound,
    SelectionGrew,
)
from shared.features import flow_policy as fp
from shared.jobs import JobRecord, JobStatus

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store

ACTS_ON: dict[str, tuple[JobStatus, ...]] = {
    "retry": (JobStatus.FAILED, JobStatus.CANCELLED),
    "cancel": job_queue.CANCELLABLE_STATUSES,  # queued, running, and waiting children
}
DEFAULT_SINCE = timedelta(days=7)
"""How far back the ended index is read when neither --since nor --batch bounds it."""
_READERS = 8


@dataclass(frozen=True)
class Selector:
    """Which jobs: ids, or a batch, and/or a status, a pipeline, a time (all must hold)."""

    job_ids: tuple[str, ...] = ()
    batch: str | None = None
    status: JobStatus | None = None
    pipeline: str | None = None
    since: datetime | None = None

    @property
    def is_bulk(self) -> bool:
        return bool(self.batch or self.status or self.pipeline or self.since) or (
            len(self.job_ids) > 1
        )


@dataclass
class BulkResult:
    """What an act did: the jobs moved, the ones that changed meanwhile, the errors."""

    acted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def parse_since(text: str, now: datetime) -> datetime:
    """'24h', '7d', '30m' before now, or an ISO date/time (UTC if no zone)."""
    units = {"m": 60, "h": 3600, "d": 86400}
    body = text.strip()
    try:
        if body[:-1].isdigit() and body[-1:] in units:
            return now - timedelta(seconds=int(body[:-1]) * units[body[-1]])
        at = datetime.fromisoformat(body)
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except OverflowError:  # 99999999d, or an offset that leaves the years 1 to 9999
        raise InvalidInput(
            f"--since {text!r} reaches outside the years 1 to 9999", "since"
        ) from None
    except ValueError:
        raise InvalidInput(
            f"--since {text!r} is neither a duration (30m, 24h, 7d) nor an ISO time", "since"
        ) from None


def check(selector: Selector, action: str) -> None:
    """InvalidInput when the selector cannot mean anything for this action."""
    allowed = ACTS_ON[action]
    if selector.status is not None and selector.status not in allowed:
        raise InvalidInput(
            f"{action} acts on {' or '.join(allowed)} jobs, not {selector.status}", "status"
        )
    if not (selector.job_ids or selector.is_bulk):
        raise InvalidInput("name job ids, or --batch, --status, --pipeline or --since", "jobs")


def select(ctx: Context, selector: Selector, action: str, now: datetime) -> list[JobRecord]:
    """The records the action would move, oldest first."""
    check(selector, action)
    ids = sorted(set(candidates(ctx, selector, action, now)))
    records = [r for r in _read_all(ctx.store, ids) if r is not None]
    chosen = [r for r in records if matches(r, selector, action)]
    return sorted(chosen, key=lambda r: (str(r.get("updated_at")), str(r.get("id"))))


def candidates(ctx: Context, selector: Selector, action: str, now: datetime) -> Iterable[str]:
    """Job ids from the narrowest index the selector allows."""
    if selector.job_ids:
        return selector.job_ids
    if selector.batch is not None:
        return ctx.store.list_batch(selector.batch)
    statuses = (selector.status,) if selector.status is not None else ACTS_ON[action]
    ids: list[str] = []
    since = selector.since or now - DEFAULT_SINCE
    for indexed in ctx.indexed():  # failed and cancelled by day, delayed jobs
        ids += indexed(ctx, statuses, since, now)
    if any(s in job_queue.CANCELLABLE_STATUSES for s in statuses):
        ids += [entry.job_id for entry in ctx.store.list_pending()]
    return ids


def matches(record: JobRecord, selector: Selector, action: str) -> bool:
    status = record.get("status")
    if status not in ACTS_ON[action]:
        return False
    if selector.status is not None and status != selector.status:
        return False
    if selector.pipeline is not None and record.get("pipeline") != selector.pipeline:
        return False
    if selector.batch is not None and record.get("batch_id") != selector.batch:
        return False
    if selector.since is not None:
        field_name = "updated_at" if status in fp.ENDED_STATUSES else "created_at"
        at = job_queue.parse_time(record.get(field_name))
        if at is None or at < selector.since:
            return False
    return True


def act(
    records: list[JobRecord],
    one: Callable[[str], object],
    *,
    per_s: float,
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BulkResult:
    """Apply `one` (a retry or a cancel) to each job, at most `per_s` a second."""
    result = BulkResult()
    for n, record in enumerate(records, 1):
        job_id = str(record.get("id"))
        try:
            one(job_id)
        except (IllegalTransition, NotFound):
            result.skipped.append(job_id)  # changed meanwhile: nothing to do any more
        except (LostRace, CorruptRecord) as exc:
            result.errors[job_id] = str(exc)
        else:
            result.acted.append(job_id)
        if progress is not None:
            progress(n, len(records))
        if n < len(records):
            sleep(1.0 / per_s)
    return result


def _read_all(store: Store, ids: list[str]) -> list[JobRecord | None]:
    def read(job_id: str) -> JobRecord | None:
        try:
            return store.read(job_id).record
        except (NotFound, CorruptRecord, InvalidInput):
            return None

    if len(ids) <= 1:
        return [read(i) for i in ids]
    with ThreadPoolExecutor(max_workers=min(_READERS, len(ids))) as pool:
        return list(pool.map(read, ids))


def count_token(action: str, selector: Selector, count: int) -> str:
    """The token a count answers and an act must bring back: it ties the act to the count
    a person saw for this action and selection (not a secret: a receipt)."""
    shown = [
        action,
        selector.batch,
        selector.status,
        selector.pipeline,
        selector.since.isoformat() if selector.since else None,
        count,
    ]
    digest = hashlib.sha256(json.dumps(shown).encode()).hexdigest()[:16]
    return f"{count}-{digest}"


def confirmed_count(token: str, action: str, selector: Selector) -> int:
    """The count a token confirms for this action and selection; InvalidInput when it was
    given for another one (or made up)."""
    head, _, _digest = token.partition("-")
    if not head.isdigit() or len(head) > 9 or count_token(action, selector, int(head)) != token:
        raise InvalidInput(
            "confirm is not the token a count of this selection answered; count again",
            "confirm",
        )
    return int(head)


# --------------------------------------------------------- a count and its confirmation
# What the admin routes (POST /bulk/<action>) and the dashboard's bulk page share: the
# selection a body names, its count with a token, and acting on a confirmed count.

BULK_MAX_PER_REQUEST = 100
"""Jobs one bulk request moves (at BULK_PACE a second, well within submit's timeout);
`remaining` says when to count and confirm again."""
BULK_PACE = 20.0
BODY_KEYS = {
    "batch": 128,
    "status": 20,
    "pipeline": 128,
    "since": 64,
    "confirm": 40,
    "reason": 500,
}
"""The keys a bulk body may hold (string values), each with its longest value."""
SHOWN = 20
"""Ids a count shows."""


@dataclass
class BulkCount:
    """A count: the selection, the records it matches now, and the token confirming it."""

    action: str
    selector: Selector
    chosen: list[JobRecord]
    token: str

    @property
    def ids(self) -> list[str]:
        return [str(r.get("id")) for r in self.chosen]

    def to_json(self) -> dict[str, Any]:
        ids = self.ids
        return {
            "action": self.action,
            "matching": len(ids),
            "jobs": ids[:SHOWN],
            "confirm": self.token,
        }


def count(ctx: Context, action: str, body: dict[str, Any]) -> BulkCount:
    """Select the jobs `body` names (the CLI's selection: batch, status, pipeline, since)
    for `action` (one of ACTS_ON), as a count a person confirms; InvalidInput."""
    if action not in ACTS_ON:
        raise InvalidInput(f"no bulk action {action[:40]!r}; try cancel or retry", "action")
    check_keys(body, BODY_KEYS)
    now = ctx.clock()
    selector = _selector(body, now)
    check(selector, action)
    chosen = select(ctx, selector, action, now)
    return BulkCount(action, selector, chosen, count_token(action, selector, len(chosen)))


def confirm(
    ctx: Context, counted: BulkCount, token: object, *, by: str, reason: str | None
) -> dict[str, Any]:
    """Act on a fresh count of the selection `token` was given for: InvalidInput when the
    token is not that count's, SelectionGrew when more jobs match now than were counted."""
    from shared import control

    if not isinstance(token, str):
        raise InvalidInput("confirm must be the token a count answered", "confirm")
    action, ids = counted.action, counted.ids
    confirmed = confirmed_count(token, action, counted.selector)
    if len(ids) > confirmed:
        raise SelectionGrew(
            f"{len(ids)} jobs match now, {confirmed} were counted; count again and confirm"
        )
    now_acting = counted.chosen[:BULK_MAX_PER_REQUEST]
    if action == "retry":
        result = act(now_acting, lambda i: control.retry(ctx, i, by=by), per_s=BULK_PACE)
    else:
        result = act(
            now_acting,
            lambda i: control.cancel(ctx, i, by=by, reason=reason),
            per_s=BULK_PACE,
        )
    return {
        "action": action,
        "matching": len(ids),
        "acted": result.acted,
        "skipped": result.skipped,
        "errors": result.errors,
        "remaining": len(ids) - len(now_acting),
    }


def check_keys(body: dict[str, Any], allowed: dict[str, int]) -> None:
    """Only the allowed keys, each a string no longer than its limit (null: absent): a bulk
    body, or the body of one job's action."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidInput(f"unknown keys {', '.join(k[:40] for k in unknown[:5])}", "request")
    for key, longest in allowed.items():
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= longest):
            raise InvalidInput(f"{key} must be a string of 1 to {longest} characters", key)


def _selector(body: dict[str, Any], now: datetime) -> Selector:
    raw_status = body.get("status")
    try:
        job_status = JobStatus(raw_status) if raw_status else None
    except ValueError:
        raise InvalidInput(
            f"status {str(raw_status)[:40]!r} is not a job status", "status"
        ) from None
    return Selector(
        batch=body.get("batch") or None,
        status=job_status,
        pipeline=body.get("pipeline") or None,
        since=parse_since(body["since"], now) if body.get("since") else None,
    )
