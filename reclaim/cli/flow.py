"""The CLI's flow-control commands: pause, resume, and bulk retry / cancel."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from reclaim.cli.context import EXIT_OK, EXIT_USAGE, CliError, Context
from shared import bulk
from shared.errors import InvalidInput
from shared.jobs import JobStatus

DEFAULT_PACE = 20.0


def add_bulk_options(p: argparse.ArgumentParser, action: str) -> None:
    """--batch/--status/--pipeline/--since, --dry-run, --yes, --pace on retry or cancel."""
    g = p.add_argument_group(f"bulk {action} (instead of, or besides, job ids)")
    statuses = [s.value for s in bulk.ACTS_ON[action]]
    g.add_argument("--batch", metavar="B", help="jobs of this batch")
    g.add_argument("--status", choices=statuses, help="jobs in this status")
    g.add_argument("--pipeline", metavar="P", help="jobs of this pipeline")
    g.add_argument(
        "--since",
        metavar="T",
        help="jobs that ended (retry) or were submitted (cancel) since T: 30m, 24h, 7d or "
        "an ISO time (the ended index is read 7 days back without it)",
    )
    g.add_argument("--dry-run", action="store_true", help="count and list, change nothing")
    g.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    g.add_argument(
        "--pace",
        type=float,
        default=DEFAULT_PACE,
        metavar="N",
        help=f"jobs per second (default: {DEFAULT_PACE:g})",
    )


def is_bulk(args: argparse.Namespace) -> bool:
    given = [args.batch, args.status, args.pipeline, args.since]
    return any(v is not None for v in given) or len(args.job) != 1 or bool(args.dry_run)


def cmd_bulk(args: argparse.Namespace, action: str) -> int:
    """Select, show the count, confirm on a terminal, then act, paced."""
    ctx = Context(args)
    queue = ctx.queue(ring=action == "retry" and not args.dry_run)
    now = queue.clock()
    if not args.pace > 0:
        raise CliError("--pace must be greater than 0")
    try:
        selector = bulk.Selector(
            job_ids=tuple(args.job),
            batch=args.batch,
            status=JobStatus(args.status) if args.status else None,
            pipeline=args.pipeline,
            since=bulk.parse_since(args.since, now) if args.since else None,
        )
        chosen = bulk.select(queue.ctx, selector, action, now)
    except InvalidInput as exc:
        raise CliError(exc.reason) from None
    ids = [str(r.get("id")) for r in chosen]
    summary: dict[str, Any] = {"action": action, "matching": len(ids), "jobs": ids}
    if args.dry_run or not ids:
        summary["dry_run"] = bool(args.dry_run)
        shown = "\n".join(ids[:20]) + (f"\n... (+{len(ids) - 20} more)" if len(ids) > 20 else "")
        verb = "would " + action if args.dry_run else action
        ctx.emit(summary, f"{len(ids)} job(s) match; {verb}:\n{shown}".rstrip(":\n"))
        return EXIT_OK
    if not args.yes and not sys.stdin.isatty():  # no one to ask: never act unconfirmed
        summary["refused"] = "no --yes and no terminal to confirm on"
        if ctx.as_json:
            ctx.emit(summary, "")
        raise CliError(
            f"{len(ids)} job(s) match; nothing done: pass --yes to {action} them without "
            "a terminal to confirm on (or --dry-run to list them)",
            EXIT_USAGE,
        )
    if not ctx.as_json:
        print(f"{len(ids)} job(s) match; {action} at {args.pace:g}/s", file=sys.stderr)
    if not args.yes:
        answer = input(f"{action} {len(ids)} job(s)? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise CliError("nothing done")
    by = ctx.by()
    if action == "retry":
        result = bulk.act(chosen, lambda i: queue.retry(i, by=by), per_s=args.pace)
    else:
        reason = getattr(args, "reason", None)
        result = bulk.act(chosen, lambda i: queue.cancel(i, by=by, reason=reason), per_s=args.pace)
    data = {
        "action": action,
        "matching": len(ids),
        "acted": result.acted,
        "skipped": result.skipped,
        "errors": result.errors,
    }
    text = f"{action}: {len(result.acted)} of {len(ids)} job(s)"
    if result.skipped:
        text += f"; {len(result.skipped)} changed meanwhile (left as they are)"
    if result.errors:
        text += f"; {len(result.errors)} error(s): run it again to continue"
    ctx.emit(data, text)
    return EXIT_OK if not result.errors else 1


def cmd_pause(args: argparse.Namespace) -> int:
    ctx = Context(args)
    try:
        changed = ctx.queue(ring=False).pause(args.pipeline, by=ctx.by())
    except InvalidInput as exc:
        raise CliError(exc.reason) from None
    note = "" if changed else " (it was paused already)"
    ctx.emit({"pipeline": args.pipeline, "paused": True, "changed": changed}, f"paused{note}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    ctx = Context(args)
    try:
        resumed = ctx.queue().resume(args.pipeline, by=ctx.by())
    except InvalidInput as exc:
        raise CliError(exc.reason) from None
    more = "; the sweep rings the rest" if resumed.more else ""
    ctx.emit(
        {"pipeline": args.pipeline, "paused": False, **resumed.to_json()},
        f"resumed {args.pipeline}: {resumed.rung} parked job(s) rung{more}",
    )
    return EXIT_OK
