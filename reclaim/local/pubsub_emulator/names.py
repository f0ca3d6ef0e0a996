"""Resource-name rules of the service (pure)."""

from __future__ import annotations

import re

from reclaim.local.pubsub_emulator.errors import InvalidArgument

DELETED_TOPIC = "_deleted-topic_"

# Topic and subscription ids: start with a letter, 3-255 chars, no "goog" prefix.
_RESOURCE_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_PROJECT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}")


def _check_id(value: str, what: str, full: str) -> str:
    if not _RESOURCE_ID.fullmatch(value) or value.lower().startswith("goog"):
        raise InvalidArgument(f"Invalid {what} name: {full!r}")
    return value


def _split(name: str, collection: str) -> tuple[str, str]:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != collection:
        raise InvalidArgument(
            f"Invalid resource name given (name={name}). "
            f"Refer to https://cloud.google.com/pubsub/docs/pubsub-basics#resource_names"
        )
    if not _PROJECT_ID.fullmatch(parts[1]):
        raise InvalidArgument(f"Invalid project in resource name: {name!r}")
    return parts[1], parts[3]


def parse_topic(name: str) -> tuple[str, str]:
    """projects/P/topics/T -> (P, T), or InvalidArgument."""
    project, topic = _split(name, "topics")
    return project, _check_id(topic, "topic", name)


def parse_subscription(name: str) -> tuple[str, str]:
    """projects/P/subscriptions/S -> (P, S), or InvalidArgument."""
    project, sub = _split(name, "subscriptions")
    return project, _check_id(sub, "subscription", name)


def parse_project(name: str) -> str:
    """projects/P -> P, or InvalidArgument."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT_ID.fullmatch(parts[1]):
        raise InvalidArgument(f"Invalid project name: {name!r}")
    return parts[1]
