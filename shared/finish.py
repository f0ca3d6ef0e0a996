"""What follows a job's terminal write, wherever that write happens.

A job ends in the runner (done, failed), in the watchdog (out of attempts), by an operator
(cancel) or, after a crash between the terminal write and what follows it, in the sweep's
repair. All of them call `after_terminal`, so features that act when a job ends (batch
callbacks, released dependencies, freed concurrency places, unique keys) hook in once.

The rule that makes it crash-proof: the hooks run BEFORE the pending marker is removed, and
the marker goes only if every hook succeeded. A process killed in between leaves a terminal
record with its marker; the sweep finds it and calls `after_terminal` again. So every hook
must be idempotent (create-only writes, deterministic names) and cheap for a job that has
nothing to do.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shared.errors import StorageError
from shared.logs import get_logger

if TYPE_CHECKING:
    from shared.jobs import JobRecord
    from shared.seams import Context

log = get_logger(__name__)


def after_terminal(
    ctx: Context,
    record: JobRecord,
    *,
    logger: logging.LoggerAdapter[logging.Logger] | None = None,
) -> bool:
    """Run the hooks for a terminal record, then drop its pending marker.

    Returns True when everything ran and the marker is gone; False leaves the marker for the
    sweep, which calls this again (so a failed hook is retried, never skipped).
    """
    lg = logger or log
    job_id = str(record.get("id"))
    for hook in ctx.terminal_hooks():
        try:
            hook(ctx, record)
        except Exception as exc:
            lg.warning(
                "an after-terminal step failed; the sweep repeats it",
                job_id=job_id,
                step=getattr(hook, "__qualname__", repr(hook)),
                error=f"{type(exc).__name__}: {exc}",
            )
            return False
    try:
        ctx.store.remove_pending(job_id, pool=ctx.settings.marker_pool(record))
    except StorageError as exc:  # the next sweep removes it
        lg.warning("could not remove the pending marker", job_id=job_id, error=str(exc))
        return False
    return True


def after_requeue(
    ctx: Context,
    record: JobRecord,
    *,
    logger: logging.LoggerAdapter[logging.Logger] | None = None,
) -> None:
    """Run the requeue hooks for a record just sent back to the queue. The job still owes
    work and keeps its marker; a hook that fails is only logged (what it would have given
    back, e.g. a concurrency place, comes back by the staleness rule)."""
    lg = logger or log
    for hook in ctx.requeue_hooks():
        try:
            hook(ctx, record)
        except Exception as exc:
            lg.warning(
                "an after-requeue step failed; the staleness rule covers it",
                job_id=str(record.get("id")),
                step=getattr(hook, "__qualname__", repr(hook)),
                error=f"{type(exc).__name__}: {exc}",
            )
