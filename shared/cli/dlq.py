"""`reclaim dlq`: show, and optionally re-ring, what the dead-letter subscription holds.

Synchronous pulls with the official client, until one comes back empty. Nothing is
acknowledged unless --requeue decided so; everything else is handed back with
deadline 0, so looking never loses a message.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shared import job_queue
from shared.cli import render as cli_render
from shared.cli.context import EXIT_OK, Context, check_reachable
from shared.errors import CorruptRecord, DoorbellError, JobNotFound

if TYPE_CHECKING:
    from shared.queue import Queue

_PULL_TIMEOUT_S = 5.0
_PULL_MAX = 1000  # messages asked of one Pull
_ACK_IDS_PER_CALL = 1000
_DELIVERIES_PER_MESSAGE = 4  # copies of one message pulled before the loop gives up

Decision = Literal["ring", "drop", "keep"]


@dataclass(frozen=True)
class DeadLetter:
    """One message held by the dead-letter subscription, decoded for display."""

    ack_ids: tuple[str, ...]  # every delivery of this message: acking or handing back covers all
    message_id: str
    job_id: str | None
    delivery_count: int | None
    source_subscription: str | None
    attributes: dict[str, str]
    published: str | None


def decode_dead_letter(
    ack_ids: Sequence[str],
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
        ack_ids=tuple(ack_ids),
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


Pulled = tuple[Any, tuple[str, ...]]  # a ReceivedMessage, and every ack id it came under


def pull_distinct(pull: Callable[[int], Sequence[Any]], most: int) -> list[Pulled]:
    """Pull until a pull comes back empty or `most` distinct messages are held.

    One Pull may answer fewer messages than are waiting ("The Pub/Sub system may return
    fewer than the number specified",
    https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/pull),
    so only an empty answer says the backlog is drained. Delivery is at least once: a
    message is kept once, by message id, with the ack id of each copy. `pull(n)` asks
    for at most n; the loop also stops after _DELIVERIES_PER_MESSAGE x `most`
    deliveries, so a subscription that keeps redelivering what is held cannot hold it.
    """
    held: dict[str, tuple[Any, list[str]]] = {}
    deliveries = 0
    while len(held) < most and deliveries < _DELIVERIES_PER_MESSAGE * most:
        batch = pull(min(most - len(held), _PULL_MAX))
        if not batch:
            break
        for received in batch:
            deliveries += 1
            _, ack_ids = held.setdefault(received.message.message_id, (received, []))
            ack_ids.append(received.ack_id)
    return [(received, tuple(ack_ids)) for received, ack_ids in held.values()]


def _pull_once(subscriber: Any, path: str) -> Callable[[int], Sequence[Any]]:
    from google.api_core import exceptions as gexc

    def pull(asked: int) -> Sequence[Any]:
        try:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": asked}, timeout=_PULL_TIMEOUT_S
            )
        except gexc.DeadlineExceeded:
            return []  # nothing arrived within the timeout: as empty as an empty answer
        return list(response.received_messages)

    return pull


def _dead_letter(pulled: Pulled) -> DeadLetter:
    received, ack_ids = pulled
    msg = received.message
    published = msg.publish_time.isoformat() if msg.publish_time else None
    return decode_dead_letter(
        ack_ids,
        msg.message_id,
        bytes(msg.data),
        dict(msg.attributes),
        int(received.delivery_attempt or 0),
        published,
    )


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), _ACK_IDS_PER_CALL):
        yield ids[i : i + _ACK_IDS_PER_CALL]


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
        pulled = pull_distinct(_pull_once(subscriber, path), args.max_messages)
        ack, back = _decide_letters([_dead_letter(p) for p in pulled], queue, rows)
        for ids in _chunks(ack):
            subscriber.acknowledge(request={"subscription": path, "ack_ids": ids})
        for ids in _chunks(back):  # deadline 0: redelivered at once, nothing lost
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
                    queue.ring(letter.job_id)
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
