"""`reclaim dlq`: show, and optionally re-ring, what the dead-letter subscription holds.

Synchronous pulls with the official client, until one comes back empty. Nothing is
acknowledged unless --requeue decided so; everything else is handed back with
deadline 0, so looking never loses a message.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Literal

from reclaim.cli import render as cli_render
from reclaim.cli.context import EXIT_OK, Context, check_reachable
from shared import deadletters, job_queue
from shared.deadletters import DeadLetter
from shared.errors import CorruptRecord, DoorbellError, InvalidInput, JobNotFound

if TYPE_CHECKING:
    from shared.queue import Queue

Decision = Literal["ring", "drop", "keep"]


def requeue_decision(queue: Queue, job_id: str | None) -> tuple[Decision, str | None]:
    """What --requeue does with one dead letter: ("ring"|"drop"|"keep", status).

    ring: the job still owes work, re-ring and ack. drop: it is terminal, the
    doorbell is moot, ack. keep: no job id, unknown or unreadable record, leave
    the message for a person.
    """
    if not job_id:
        return "keep", None
    try:
        record = queue.read(job_id)
    except (JobNotFound, CorruptRecord, InvalidInput):  # a letter naming no job we can read
        return "keep", None
    status = record.get("status")
    if status in job_queue.PENDING_STATUSES:
        return "ring", str(status)
    return "drop", str(status)


def cmd_dlq(args: argparse.Namespace) -> int:
    """Show the dead letters; with --requeue re-ring pending jobs and ack their messages."""
    from google.cloud import pubsub_v1

    ctx = Context(args)
    check_reachable("PUBSUB_EMULATOR_HOST", "Pub/Sub emulator")
    queue = ctx.queue() if args.requeue else None
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(ctx.settings.project, ctx.dead_letter_subscription)
    rows: list[dict[str, Any]] = []
    try:
        pulled = deadletters.pull_distinct(
            deadletters.pull_once(subscriber, path), args.max_messages
        )
        ack, back = _decide_letters([deadletters.dead_letter(p) for p in pulled], queue, rows)
        for ids in deadletters.chunks(ack):
            subscriber.acknowledge(request={"subscription": path, "ack_ids": ids})
        for ids in deadletters.chunks(back):  # deadline 0: redelivered at once, nothing lost
            subscriber.modify_ack_deadline(
                request={"subscription": path, "ack_ids": ids, "ack_deadline_seconds": 0}
            )
    finally:
        subscriber.close()
    columns = ("job_id", "delivery_count", "source_subscription", "published", "action")
    text = cli_render.table(rows, columns) if rows else f"no dead letters in {path}"
    if rows and not args.requeue:
        text += f"\n{len(rows)} message(s) left in place; --requeue re-rings pending jobs"
    ctx.emit({"subscription": path, "messages": rows}, text)
    return EXIT_OK


def _decide_letters(
    letters: list[DeadLetter], queue: Queue | None, rows: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """Which ack ids to ack and which to hand back; fills one display row per letter."""
    ack: list[str] = []
    back: list[str] = []
    for letter in letters:
        row = {
            "job_id": letter.job_id,
            "delivery_count": letter.delivery_count,
            "source_subscription": letter.source_subscription,
            "published": letter.published,
            "message_id": letter.message_id,
            "attributes": letter.attributes,
        }
        action = "left"
        if queue is not None:
            decision, status = requeue_decision(queue, letter.job_id)
            row["status"] = status
            if decision == "ring" and letter.job_id:
                try:
                    queue.ring(letter.job_id, letter.attributes.get("traceparent"))
                    action = "re-rung"
                except DoorbellError:
                    decision, action = "keep", "left (ring failed)"
            elif decision == "drop":
                action = f"acked ({status})"
            else:
                action = "left (no readable job)"
            if decision in ("ring", "drop"):
                ack.extend(letter.ack_ids)
            else:
                back.extend(letter.ack_ids)
        else:
            back.extend(letter.ack_ids)
        row["action"] = action
        rows.append(row)
    return ack, back
