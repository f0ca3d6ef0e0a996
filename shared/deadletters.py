"""The dead-letter subscription, read without losing anything: decode what it holds,
pull until it is empty, ack or hand back in bounded calls.

Shared by `reclaim dlq` (which may re-ring and ack) and the dashboard (which only
looks: everything it pulls goes straight back with deadline 0).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

PULL_TIMEOUT_S = 5.0
PULL_MAX = 1000  # messages asked of one Pull
ACK_IDS_PER_CALL = 1000
DELIVERIES_PER_MESSAGE = 4  # copies of one message pulled before the loop gives up


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


Pulled = tuple[Any, tuple[str, ...]]  # a ReceivedMessage, and every ack id it came under


def pull_distinct(pull: Callable[[int], Sequence[Any]], most: int) -> list[Pulled]:
    """Pull until a pull comes back empty or `most` distinct messages are held.

    One Pull may answer fewer messages than are waiting ("The Pub/Sub system may return
    fewer than the number specified",
    https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/pull),
    so only an empty answer says the backlog is drained. Delivery is at least once: a
    message is kept once, by message id, with the ack id of each copy. `pull(n)` asks
    for at most n; the loop also stops after DELIVERIES_PER_MESSAGE x `most`
    deliveries, so a subscription that keeps redelivering what is held cannot hold it.
    """
    held: dict[str, tuple[Any, list[str]]] = {}
    deliveries = 0
    while len(held) < most and deliveries < DELIVERIES_PER_MESSAGE * most:
        batch = pull(min(most - len(held), PULL_MAX))
        if not batch:
            break
        for received in batch:
            deliveries += 1
            _, ack_ids = held.setdefault(received.message.message_id, (received, []))
            ack_ids.append(received.ack_id)
    return [(received, tuple(ack_ids)) for received, ack_ids in held.values()]


def pull_once(subscriber: Any, path: str) -> Callable[[int], Sequence[Any]]:
    """A `pull(n)` over one subscription for pull_distinct; a timeout is an empty answer."""
    from google.api_core import exceptions as gexc

    def pull(asked: int) -> Sequence[Any]:
        try:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": asked}, timeout=PULL_TIMEOUT_S
            )
        except gexc.DeadlineExceeded:
            return []  # nothing arrived within the timeout: as empty as an empty answer
        return list(response.received_messages)

    return pull


def dead_letter(pulled: Pulled) -> DeadLetter:
    """A pulled message (with every ack id it came under), decoded."""
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


def chunks(ids: list[str]) -> Iterator[list[str]]:
    """Ack ids in groups one acknowledge/modifyAckDeadline call accepts."""
    for i in range(0, len(ids), ACK_IDS_PER_CALL):
        yield ids[i : i + ACK_IDS_PER_CALL]
