"""Peek at the dead-letter subscription: pull a page, hand every message straight back.

Looking never loses a message: nothing is acknowledged, and each pulled message's
deadline is set to 0, so Pub/Sub may deliver it again at once
(https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/modifyAckDeadline).
Re-ringing or dropping them stays the CLI's `reclaim dlq --requeue`.
"""

from __future__ import annotations

import threading
from typing import Any

from shared.deadletters import DeadLetter, chunks, dead_letter, pull_distinct, pull_once

PEEK_MAX = 50
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
    """Up to `most` dead letters (pulled until the subscription answers empty, one entry
    per message), each handed back at once."""
    client = _subscriber()
    path = client.subscription_path(project, subscription)
    letters = [dead_letter(p) for p in pull_distinct(pull_once(client, path), most)]
    back = [ack_id for letter in letters for ack_id in letter.ack_ids]
    for ids in chunks(back):
        client.modify_ack_deadline(
            request={"subscription": path, "ack_ids": ids, "ack_deadline_seconds": 0}
        )
    return letters
