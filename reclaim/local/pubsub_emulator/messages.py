"""Publish-time message rules and the messages the service builds itself (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.errors import InvalidArgument
from reclaim.local.pubsub_emulator.policy import dead_letter_time

MAX_MESSAGES_PER_PUBLISH = 1000
MAX_REQUEST_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024


def _check_attributes(attributes: dict[str, str]) -> None:
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidArgument(f"A message may carry at most {MAX_ATTRIBUTES} attributes.")
    for key, value in attributes.items():
        if not key or len(key.encode()) > MAX_ATTRIBUTE_KEY_BYTES:
            raise InvalidArgument(f"Invalid attribute key {key!r}: 1..256 bytes.")
        if key.lower().startswith("goog"):
            raise InvalidArgument(f"Invalid attribute key {key!r}: the goog prefix is reserved.")
        if len(value.encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise InvalidArgument(f"Attribute {key!r} exceeds {MAX_ATTRIBUTE_VALUE_BYTES} bytes.")


def check_publish(messages: Sequence[pubsub.PubsubMessage]) -> None:
    """Reject a publish request the way the service does, before anything is stored."""
    if not messages:
        raise InvalidArgument("The publish request must contain at least one message.")
    if len(messages) > MAX_MESSAGES_PER_PUBLISH:
        raise InvalidArgument(
            f"Too many messages in one publish request (max {MAX_MESSAGES_PER_PUBLISH})."
        )
    total = 0
    for message in messages:
        attributes = dict(message.attributes)
        if not message.data and not attributes:
            raise InvalidArgument(
                "One or more messages in the publish request is empty. Each message must "
                "contain either non-empty data, or at least one attribute."
            )
        _check_attributes(attributes)
        if len(message.ordering_key.encode()) > MAX_ORDERING_KEY_BYTES:
            raise InvalidArgument("ordering_key exceeds 1024 bytes.")
        total += len(message.data) + sum(len(k) + len(v) for k, v in attributes.items())
    if total > MAX_REQUEST_BYTES:
        raise InvalidArgument("Request payload exceeds the 10 MB limit.")


def stamped(
    source: pubsub.PubsubMessage,
    message_id: str,
    publish_ts: float,
    extra_attributes: dict[str, str] | None = None,
) -> pubsub.PubsubMessage:
    """A stored copy of a published message with the id and time the service assigns."""
    attributes = dict(source.attributes)
    if extra_attributes:
        attributes.update(extra_attributes)
    return pubsub.PubsubMessage(
        data=source.data,
        attributes=attributes,
        ordering_key=source.ordering_key,
        message_id=message_id,
        publish_time=dt.datetime.fromtimestamp(publish_ts, tz=dt.UTC),
    )


def dead_letter_attributes(
    delivery_count: int, subscription: str, original_publish_ts: float
) -> dict[str, str]:
    """The attributes the service adds when it forwards to a dead-letter topic."""
    _, project, _, sub_id = subscription.split("/")
    return {
        "CloudPubSubDeadLetterSourceDeliveryCount": str(delivery_count),
        "CloudPubSubDeadLetterSourceSubscription": sub_id,
        "CloudPubSubDeadLetterSourceSubscriptionProject": project,
        "CloudPubSubDeadLetterSourceTopicPublishTime": dead_letter_time(original_publish_ts),
    }
