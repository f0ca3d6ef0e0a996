"""The emulator through the official google-cloud-pubsub client, over gRPC."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.api_core import exceptions

from tests.emulator.emulator_support import PROJECT, eventually

Unique = Callable[[str], str]


def _pair(publisher: Any, subscriber: Any, unique: Unique, **sub_fields: Any) -> tuple[str, str]:
    topic = publisher.topic_path(PROJECT, unique("topic"))
    sub = subscriber.subscription_path(PROJECT, unique("sub"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, **sub_fields})
    return topic, sub


def test_publish_pull_ack_with_attributes_and_unique_ids(publisher, subscriber, unique) -> None:
    topic, sub = _pair(publisher, subscriber, unique)
    futures = [publisher.publish(topic, f"m{i}".encode(), kind="test", n=str(i)) for i in range(20)]
    ids = [f.result(timeout=10) for f in futures]
    assert len(set(ids)) == 20 and all(i.isdigit() for i in ids)

    got: dict[str, Any] = {}
    while len(got) < 20:
        resp = subscriber.pull(subscription=sub, max_messages=50, timeout=10)
        for r in resp.received_messages:
            got[r.message.message_id] = r
    assert set(got) == set(ids)
    sample = got[ids[3]].message
    assert sample.data == b"m3" and dict(sample.attributes) == {"kind": "test", "n": "3"}
    assert abs(sample.publish_time - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)
    assert all(r.delivery_attempt == 0 for r in got.values())  # no dead-letter policy

    subscriber.acknowledge(subscription=sub, ack_ids=[r.ack_id for r in got.values()])
    again = subscriber.pull(subscription=sub, max_messages=50, return_immediately=True)
    assert list(again.received_messages) == []


def test_fan_out_to_every_subscription_of_the_topic(publisher, subscriber, unique) -> None:
    topic, first = _pair(publisher, subscriber, unique)
    second = subscriber.subscription_path(PROJECT, unique("sub"))
    subscriber.create_subscription(name=second, topic=topic)
    publisher.publish(topic, b"both").result(timeout=10)
    for sub in (first, second):
        resp = subscriber.pull(subscription=sub, max_messages=5, timeout=10)
        assert [r.message.data for r in resp.received_messages] == [b"both"]
    topic_subs = publisher.list_topic_subscriptions(request={"topic": topic})
    assert sorted(topic_subs) == sorted([first, second])


def test_streaming_pull_receives_many_and_acks_stick(admin_emulator, unique) -> None:
    publisher, subscriber = admin_emulator.publisher, admin_emulator.subscriber
    topic, sub = _pair(publisher, subscriber, unique)
    received: list[str] = []
    lock = threading.Lock()

    def callback(message: Any) -> None:
        with lock:
            received.append(message.message_id)
        message.ack()

    future = subscriber.subscribe(sub, callback)
    try:
        futures = [publisher.publish(topic, b"%d" % i) for i in range(150)]
        ids = [f.result(timeout=10) for f in futures]
        eventually(lambda: len(received) >= 150)
        # The acks reached the server: nothing is left to redeliver, ever.
        stats = eventually(lambda: _settled(admin_emulator.stats(), sub))
    finally:
        future.cancel()
        future.result(timeout=10)
    assert sorted(received) == sorted(ids)  # each exactly once, none redelivered
    assert (stats["delivered"], stats["acked"], stats.get("expired", 0)) == (150, 150, 0)


def _settled(stats: dict[str, Any], sub: str) -> dict[str, Any] | None:
    mine = stats["subscriptions"].get(sub, {})
    return mine if mine.get("backlog") == 0 and mine.get("acked") == 150 else None


def test_nack_in_streaming_pull_redelivers(publisher, subscriber, unique) -> None:
    topic, sub = _pair(publisher, subscriber, unique)
    seen: list[str] = []

    def callback(message: Any) -> None:
        seen.append(message.message_id)
        if len(seen) == 1:
            message.nack()
        else:
            message.ack()

    future = subscriber.subscribe(sub, callback)
    try:
        message_id = publisher.publish(topic, b"retry me").result(timeout=10)
        eventually(lambda: len(seen) >= 2)
    finally:
        future.cancel()
        future.result(timeout=10)
    assert seen[:2] == [message_id, message_id]


def test_ack_deadline_expiry_redelivers(publisher, subscriber, unique) -> None:
    """Modack to 1 s (the API allows 0..600 for modacks) instead of waiting out 10 s."""
    topic, sub = _pair(publisher, subscriber, unique)
    message_id = publisher.publish(topic, b"slow").result(timeout=10)
    first = subscriber.pull(subscription=sub, max_messages=1, timeout=10).received_messages[0]
    subscriber.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1)
    second = eventually(
        lambda: subscriber.pull(subscription=sub, max_messages=1, timeout=10).received_messages
    )[0]
    assert second.message.message_id == message_id and second.ack_id != first.ack_id


def test_dead_letter_after_max_attempts(publisher, subscriber, unique) -> None:
    dead_topic = publisher.topic_path(PROJECT, unique("dead"))
    hold = subscriber.subscription_path(PROJECT, unique("hold"))
    publisher.create_topic(name=dead_topic)
    subscriber.create_subscription(name=hold, topic=dead_topic)
    topic, sub = _pair(
        publisher,
        subscriber,
        unique,
        dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5},
    )
    created = subscriber.get_subscription(subscription=sub)
    assert created.dead_letter_policy.max_delivery_attempts == 5
    original_id = publisher.publish(topic, b"poison", origin="test").result(timeout=10)

    attempts = []
    for _ in range(5):
        r = subscriber.pull(subscription=sub, max_messages=1, timeout=10).received_messages[0]
        assert r.message.message_id == original_id
        attempts.append(r.delivery_attempt)
        subscriber.modify_ack_deadline(subscription=sub, ack_ids=[r.ack_id], ack_deadline_seconds=0)
    assert attempts == [1, 2, 3, 4, 5]

    dead = subscriber.pull(subscription=hold, max_messages=5, timeout=10).received_messages
    assert len(dead) == 1
    attrs = dict(dead[0].message.attributes)
    assert dead[0].message.data == b"poison" and attrs.pop("origin") == "test"
    publish_time = attrs.pop("CloudPubSubDeadLetterSourceTopicPublishTime")
    assert dt.datetime.fromisoformat(publish_time) < dead[0].message.publish_time
    assert attrs == {
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceSubscription": sub.rsplit("/", 1)[1],
        "CloudPubSubDeadLetterSourceSubscriptionProject": PROJECT,
    }
    leftover = subscriber.pull(subscription=sub, max_messages=1, return_immediately=True)
    assert list(leftover.received_messages) == []


def test_status_codes(publisher, subscriber, unique) -> None:
    topic, sub = _pair(publisher, subscriber, unique)
    with pytest.raises(exceptions.AlreadyExists):
        publisher.create_topic(name=topic)
    with pytest.raises(exceptions.AlreadyExists):
        subscriber.create_subscription(name=sub, topic=topic)
    missing = publisher.topic_path(PROJECT, unique("missing"))
    with pytest.raises(exceptions.NotFound):
        publisher.publish(missing, b"x").result(timeout=10)
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=missing)
    with pytest.raises(exceptions.InvalidArgument):
        publisher.create_topic(name=f"projects/{PROJECT}/topics/no")
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.create_subscription(
            name=subscriber.subscription_path(PROJECT, unique("sub")),
            topic=topic,
            ack_deadline_seconds=601,
        )
    subscriber.delete_subscription(subscription=sub)
    with pytest.raises(exceptions.NotFound):
        subscriber.pull(subscription=sub, max_messages=1, timeout=10)
    with pytest.raises(exceptions.NotFound):
        subscriber.delete_subscription(subscription=sub)


def test_deleted_topic_leaves_subscription_detached(publisher, subscriber, unique) -> None:
    topic, sub = _pair(publisher, subscriber, unique)
    publisher.delete_topic(topic=topic)
    assert subscriber.get_subscription(subscription=sub).topic == "_deleted-topic_"
    with pytest.raises(exceptions.NotFound):
        publisher.publish(topic, b"x").result(timeout=10)


def test_list_topics_and_subscriptions_page(publisher, subscriber, unique) -> None:
    project = unique("pagers")
    topics = [publisher.topic_path(project, f"topic-{i}") for i in range(5)]
    for name in topics:
        publisher.create_topic(name=name)
        subscriber.create_subscription(name=name.replace("/topics/", "/subscriptions/"), topic=name)
    pager = publisher.list_topics(request={"project": f"projects/{project}", "page_size": 2})
    pages = list(pager.pages)
    assert len(pages) == 3
    assert [t.name for page in pages for t in page.topics] == topics
    subs = subscriber.list_subscriptions(request={"project": f"projects/{project}", "page_size": 3})
    assert len(list(subs)) == 5


def test_update_subscription_and_modify_push_config(publisher, subscriber, unique) -> None:
    _topic, sub = _pair(publisher, subscriber, unique)
    updated = subscriber.update_subscription(
        request={
            "subscription": {"name": sub, "ack_deadline_seconds": 42},
            "update_mask": {"paths": ["ack_deadline_seconds"]},
        }
    )
    assert updated.ack_deadline_seconds == 42
    subscriber.modify_push_config(
        request={"subscription": sub, "push_config": {"push_endpoint": "http://127.0.0.1:9/x"}}
    )
    got = subscriber.get_subscription(subscription=sub)
    assert got.push_config.push_endpoint == "http://127.0.0.1:9/x"
    subscriber.modify_push_config(request={"subscription": sub, "push_config": {}})
    assert subscriber.get_subscription(subscription=sub).push_config.push_endpoint == ""


def test_deleting_the_subscription_ends_an_open_stream_with_not_found(
    publisher, subscriber, unique
) -> None:
    _topic, sub = _pair(publisher, subscriber, unique)
    future = subscriber.subscribe(sub, lambda m: m.ack())
    try:
        eventually(lambda: future.running())
        time.sleep(0.3)  # let the stream open before the subscription goes
        subscriber.delete_subscription(subscription=sub)
        with pytest.raises(exceptions.NotFound):
            future.result(timeout=10)
    finally:
        future.cancel()


def test_malformed_ack_ids_are_invalid_argument(publisher, subscriber, unique) -> None:
    _topic, sub = _pair(publisher, subscriber, unique)
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.acknowledge(subscription=sub, ack_ids=["bogus"])
