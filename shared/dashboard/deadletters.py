"""Peek at the dead-letter subscription: pull a page, hand every message straight back.

Looking never loses a message: nothing is acknowledged, and each pulled message's
deadline is set to 0, so Pub/Sub may deliver it again at once
(https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/modifyAckDeadline).
Re-ringing or dropping them stays the CLI's `reclaim dlq --requeue`.
"""

from __future__ import annotations

import threading
from typing import Any

from shared.cli.dlq import DeadLetter, decode_dead_letter

PEEK_MAX = 50
_TIMEOUT_S = 5.0
_CLIENT: Any = None
_LOCK = threading.Lock()


def _subscriber() -> Any:
    global _CLIENT
    with _LOCK:
        if _CLIENT is None:
            from google.cloud import pubsub_v1

            _CLIENT = pubsub_v1.SubscriberClient()
        return _CLIENT


def peek(project: str, subscription: str, most: int = PEEK_MAX) -> list[DeadLetter]:
    """Up to `most` dead letters, each handed back at once."""
    from google.api_core import exceptions as gexc

    client = _subscriber()
    path = client.subscription_path(project, subscription)
    try:
        response = client.pull(
            request={"subscription": path, "max_messages": most}, timeout=_TIMEOUT_S
        )
    except gexc.DeadlineExceeded:
        return []
    letters = []
    for received in response.received_messages:
        msg = received.message
        letters.append(
            decode_dead_letter(
                received.ack_id,
                msg.message_id,
                bytes(msg.data),
                dict(msg.attributes),
                int(received.delivery_attempt or 0),
                msg.publish_time.isoformat() if msg.publish_time else None,
            )
        )
    if letters:
        client.modify_ack_deadline(
            request={
                "subscription": path,
                "ack_ids": [letter.ack_id for letter in letters],
                "ack_deadline_seconds": 0,
            }
        )
    return letters
