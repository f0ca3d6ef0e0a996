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

if TYPE_CHECKING:
    from shared.doorbell import Ringer
    from shared.gates import GateContext
    from shared.storage import Store, Stored

log = get_logger(__name__)


def expire_if_due(
    store: Store, doorbell: Ringer | None, stored: Stored, now: datetime
) -> Stored | None:
    """End an expired job (CAS); the terminal record, or None when it is not expired or
    someone else moved it first."""
    job = stored.record
    if not timing.expired(dict(job), now):
        return None
    try:
        ended = store.update({**job, **job_queue.expire_fields(job, now)}, stored.generation)
    except (LostRace, NotFound, IllegalTransition):
        return None
    log.info("expired before it started; it will not run", job_id=job.get("id"))
    finish.after_terminal(store, doorbell, ended.record)
    return ended


def gate(ctx: GateContext) -> Outcome | None:
    """The claim gate: an expired job is ended instead of claimed."""
    if not timing.expired(dict(ctx.stored.record), ctx.now):
        return None
    job_id = str(ctx.stored.record.get("id"))
    ended = expire_if_due(ctx.store, ctx.doorbell, ctx.stored, ctx.now)
    detail = "expired" if ended is not None else "expired (ended by another)"
    return Outcome(job_id, OutcomeKind.SKIPPED, detail)
