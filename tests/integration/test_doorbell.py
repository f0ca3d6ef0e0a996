"""The doorbell through the project's Pub/Sub emulator, with the official clients."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shared.config import Settings
from shared.doorbell import Doorbell, DoorbellError, get_doorbell, message_for


@pytest.fixture
def topic(publisher: Any, subscriber: Any, emulator_env: dict[str, str], unique: Any) -> Any:
    """(project, topic id, subscription path) with a pull subscription on a fresh topic."""
    project = emulator_env["GOOGLE_CLOUD_PROJECT"]
    topic_id = unique("jobs")
    topic_path = publisher.topic_path(project, topic_id)
    sub_path = subscriber.subscription_path(project, unique("sub"))
    publisher.create_topic(name=topic_path)
    subscriber.create_subscription(name=sub_path, topic=topic_path, ack_deadline_seconds=10)
    return project, topic_id, sub_path


def _pull(subscriber: Any, sub_path: str, want: int, deadline_s: float = 15.0) -> list[Any]:
    """Pull and ack until `want` messages arrived (or give up after deadline_s)."""
    got: list[Any] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        resp = subscriber.pull(
            request={"subscription": sub_path, "max_messages": 10},
            timeout=5,
        )
        if resp.received_messages:
            subscriber.acknowledge(
                request={
                    "subscription": sub_path,
                    "ack_ids": [m.ack_id for m in resp.received_messages],
                }
            )
        got.extend(m.message for m in resp.received_messages)
    return got


def test_ring_delivers_exactly_the_job_id(publisher: Any, subscriber: Any, topic: Any) -> None:
    project, topic_id, sub_path = topic
    bell = Doorbell(project, topic_id, publisher)

    bell.ring("job-123")

    (msg,) = _pull(subscriber, sub_path, 1)
    assert json.loads(msg.data) == {"job_id": "job-123"}
    assert msg.data == b'{"job_id": "job-123"}'
    assert dict(msg.attributes) == {"job_id": "job-123"}
    assert bell.calls == {"publish": 1}


def test_ring_many_publishes_all_and_reports_no_failures(
    publisher: Any, subscriber: Any, topic: Any
) -> None:
    project, topic_id, sub_path = topic
    bell = Doorbell(project, topic_id, publisher)
    ids = [f"job-{i}" for i in range(25)]

    assert bell.ring_many(ids) == []

    got = _pull(subscriber, sub_path, len(ids))
    assert sorted(m.attributes["job_id"] for m in got) == sorted(ids)
    assert all(json.loads(m.data) == {"job_id": m.attributes["job_id"]} for m in got)
    assert bell.calls == {"publish": 25}


def test_ring_to_a_missing_topic_raises_doorbell_error(
    publisher: Any, emulator_env: dict[str, str], unique: Any
) -> None:
    bell = Doorbell(emulator_env["GOOGLE_CLOUD_PROJECT"], unique("no-such-topic"), publisher)

    with pytest.raises(DoorbellError) as info:
        bell.ring("job-1")
    assert info.value.job_id == "job-1"
    assert bell.ring_many(["job-2", "job-3"]) == ["job-2", "job-3"]


def test_bad_ids_are_refused_before_anything_is_published(
    publisher: Any, subscriber: Any, topic: Any
) -> None:
    project, topic_id, sub_path = topic
    bell = Doorbell(project, topic_id, publisher)
    with pytest.raises(ValueError):
        bell.ring("")
    with pytest.raises(ValueError):
        bell.ring_many(["good", None])  # type: ignore[list-item]
    bell.ring("after")
    assert [m.attributes["job_id"] for m in _pull(subscriber, sub_path, 1)] == ["after"]
    assert bell.calls == {"publish": 1}


def test_get_doorbell_uses_one_shared_publisher_per_process(subscriber: Any, topic: Any) -> None:
    project, topic_id, sub_path = topic
    settings = Settings.from_env({}, project=project, jobs_topic=topic_id)

    bell = get_doorbell(settings)
    assert get_doorbell(settings) is bell
    assert bell.topic_path == settings.topic_path
    bell.ring("via-settings")

    (msg,) = _pull(subscriber, sub_path, 1)
    assert dict(msg.attributes) == {"job_id": "via-settings"}


def test_message_shape_is_ids_only() -> None:
    assert message_for("a.b-c_1") == (b'{"job_id": "a.b-c_1"}', {"job_id": "a.b-c_1"})
    with pytest.raises(ValueError):
        message_for(42)  # type: ignore[arg-type]
