"""`reclaim dlq`: show, and optionally re-ring, what the dead-letter subscription holds.

A synchronous pull with the official client. Nothing is acknowledged unless
--requeue decided so; everything else is handed back with deadline 0, so looking
never loses a message.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from shared.cli import ops as cli_ops
from shared.cli import render as cli_render
from shared.cli.context import EXIT_OK, Context, check_reachable

_PULL_TIMEOUT_S = 5.0


def _pull(subscriber: Any, path: str, most: int) -> Iterator[Any]:
    """Synchronous pulls until `most` messages, or an answer short of what was asked
    (the backlog is drained, or Pub/Sub has no more to give right now)."""
    from google.api_core import exceptions as gexc

    got = 0
    while got < most:
        asked = min(most - got, 1000)
        try:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": asked}, timeout=_PULL_TIMEOUT_S
            )
        except gexc.DeadlineExceeded:
            return  # nothing arrived within the timeout: the subscription is empty
        for received in response.received_messages:
            got += 1
            yield received
        if len(response.received_messages) < asked:
            return


def _dead_letter(received: Any) -> cli_ops.DeadLetter:
    msg = received.message
    published = msg.publish_time.isoformat() if msg.publish_time else None
    return cli_ops.decode_dead_letter(
        received.ack_id,
        msg.message_id,
        bytes(msg.data),
        dict(msg.attributes),
        int(received.delivery_attempt or 0),
        published,
    )


def cmd_dlq(args: argparse.Namespace) -> int:
    """Show the dead letters; with --requeue re-ring pending jobs and ack their messages."""
    from google.cloud import pubsub_v1

    ctx = Context(args)
    check_reachable("PUBSUB_EMULATOR_HOST", "Pub/Sub emulator")
    store = ctx.store if args.requeue else None
    doorbell = ctx.doorbell if args.requeue else None
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(ctx.settings.project, ctx.dead_letter_subscription)
    rows: list[dict[str, Any]] = []
    try:
        letters = [_dead_letter(r) for r in _pull(subscriber, path, args.max_messages)]
        ack, back = _decide_letters(letters, store, doorbell, rows)
        if ack:
            subscriber.acknowledge(request={"subscription": path, "ack_ids": ack})
        if back:  # deadline 0: redelivered at once, nothing lost
            subscriber.modify_ack_deadline(
                request={"subscription": path, "ack_ids": back, "ack_deadline_seconds": 0}
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
    letters: list[cli_ops.DeadLetter], store: Any, doorbell: Any, rows: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """Which ack ids to ack and which to hand back; fills one display row per letter."""
    from shared.doorbell import DoorbellError

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
        if store is not None:
            decision, status = cli_ops.requeue_decision(store, letter.job_id)
            row["status"] = status
            if decision == "ring":
                try:
                    doorbell.ring(letter.job_id)
                    action = "re-rung"
                except DoorbellError:
                    decision, action = "keep", "left (ring failed)"
            elif decision == "drop":
                action = f"acked ({status})"
            else:
                action = "left (no readable job)"
            if decision in ("ring", "drop"):
                ack.append(letter.ack_id)
            else:
                back.append(letter.ack_id)
        else:
            back.append(letter.ack_id)
        row["action"] = action
        rows.append(row)
    return ack, back
