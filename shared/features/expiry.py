"""Expiry: a job not started by its expires_at ends cancelled (error type Expired) and
never runs. Checked at claim time (a gate, so no attempt is spent) and by the sweep (so
an expired job with no doorbell left still ends). The rule is shared.timing.expired."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from shared import finish, job_queue, timing
from shared.errors import IllegalTransition, LostRace, NotFound
from shared.logs import get_logger
from shared.outcome import Outcome, OutcomeKind
from shared.seams import Settled

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Stored

log = get_logger(__name__)


def expire_if_due(ctx: Context, stored: Stored, now: datetime) -> Stored | None:
    """End an expired job (CAS); the terminal record, or None when it is not expired or
    someone else moved it first."""
    job = stored.record
    if not timing.expired(job, now):
        return None
    try:
        ended = ctx.store.update({**job, **job_queue.expire_fields(job, now)}, stored.generation)
    except (LostRace, NotFound, IllegalTransition):
        return None
    log.info("expired before it started; it will not run", job_id=job.get("id"))
    finish.after_terminal(ctx, ended.record)
    return ended


def gate(ctx: Context, stored: Stored, now: datetime) -> Outcome | None:
    """The claim gate: an expired job is ended instead of claimed."""
    if not timing.expired(stored.record, now):
        return None
    job_id = str(stored.record.get("id"))
    ended = expire_if_due(ctx, stored, now)
    detail = "expired" if ended is not None else "expired (ended by another)"
    return Outcome(job_id, OutcomeKind.SKIPPED, detail)


def sweep_check(ctx: Context, stored: Stored, now: datetime) -> Settled | None:
    """The sweep's check of a pending record: an expired one ends (counted as expired)."""
    if expire_if_due(ctx, stored, now) is None:
        return None
    return Settled("expired")
