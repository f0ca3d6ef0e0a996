"""`reclaim dlq`: show, and optionally re-ring, what the dead-letter subscription holds.

A synchronous pull with the official client. Nothing is acknowledged unless
--requeue decided so; everything else is handed back with deadline 0, so looking
never loses a message.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shared import job_queue
from shared.cli import render as cli_render
from shared.cli.context import EXIT_OK, Context, check_reachable
from shared.errors import CorruptRecord, DoorbellError, JobNotFound

if TYPE_CHECKING:
    from shared.queue import Queue

_PULL_TIMEOUT_S = 5.0

Decision = Literal["ring", "drop", "keep"]


@dataclass(frozen=True)
class DeadLetter:
    """One message held by the dead-letter subscription, decoded for display."""

    ack_id: str
    message_id: str
    job_id: str | None
    delivery_count: int | None
    source_subscription: str | None
    attributes: dict[str, str]
    published: str | None


def decode_dead_letter(
    ack_id: str,
    message_id: str,
    data: bytes,
    attributes: dict[str, str],
    delivery_attempt: int,
    published: str | None,
) -> DeadLetter:
    """Job id from the doorbell (attribute first, then JSON data); Pub/Sub's dead-letter
    attributes give the source subscription and its delivery count."""
    job_id = attributes.get("job_id")
    if not job_id:
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        if isinstance(body, dict) and isinstance(body.get("job_id"), str):
            job_id = body["job_id"]
    count_attr = attributes.get("CloudPubSubDeadLetterSourceDeliveryCount")
    count: int | None = delivery_attempt or None
    if count_attr and count_attr.isdigit():
        count = int(count_attr)
    return DeadLetter(
        ack_id=ack_id,
        message_id=message_id,
        job_id=job_id,
        delivery_count=count,
        source_subscription=attributes.get("CloudPubSubDeadLetterSourceSubscription"),
        attributes=dict(attributes),
        published=published,
    )


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
    except (JobNotFound, CorruptRecord):
        return "keep", None
    status = record.get("status")
    if status in job_queue.PENDING_STATUSES:
        return "ring", str(status)
    return "drop", str(status)


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


def _dead_letter(received: Any) -> DeadLetter:
    msg = received.message
    published = msg.publish_time.isoformat() if msg.publish_time else None
    return decode_dead_letter(
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
    queue = ctx.queue() if args.requeue else None
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(ctx.settings.project, ctx.dead_letter_subscription)
    rows: list[dict[str, Any]] = []
    try:
        letters = [_dead_letter(r) for r in _pull(subscriber, path, args.max_messages)]
        ack, back = _decide_letters(letters, queue, rows)
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
                ack.append(letter.ack_id)
            else:
                back.append(letter.ack_id)
        else:
            back.append(letter.ack_id)
        row["action"] = action
        rows.append(row)
    return ack, back
