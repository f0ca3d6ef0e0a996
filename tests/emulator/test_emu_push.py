"""Push subscriptions into a local HTTP server: envelope, retries, concurrency, switching."""

from __future__ import annotations

import base64
import itertools
import re
import threading
import time
from typing import Any

import pytest
from google.cloud import pubsub_v1

from reclaim.local.procs import free_port
from tests.emulator.emulator_support import PROJECT, eventually

RFC3339_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _push_pair(
    publisher: Any, subscriber: Any, unique: Any, endpoint_base: str, **sub_fields: Any
) -> tuple[str, str, str]:
    topic_id = unique("topic")
    topic = publisher.topic_path(PROJECT, topic_id)
    sub = subscriber.subscription_path(PROJECT, unique("push"))
    publisher.create_topic(name=topic)
    endpoint = f"{endpoint_base}/projects/{PROJECT}/topics/{topic_id}"
    subscriber.create_subscription(
        request={
            "name": sub,
            "topic": topic,
            "push_config": {"push_endpoint": endpoint},
            **sub_fields,
        }
    )
    return topic, sub, endpoint


def test_push_sends_the_wrapped_envelope(emulator_env, subscriber, unique, recorder) -> None:
    ordered = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    endpoint_server = recorder()
    topic, sub, endpoint = _push_pair(ordered, subscriber, unique, endpoint_server.base)
    with_attrs = ordered.publish(topic, b"hello", job_id="j-1").result(timeout=10)
    no_data = ordered.publish(topic, b"", only="attr").result(timeout=10)
    keyed = ordered.publish(topic, b"k", ordering_key="key-1").result(timeout=10)
    ordered.transport.close()

    eventually(lambda: len(endpoint_server.calls) >= 3)
    by_id = {c["body"]["message"]["messageId"]: c for c in endpoint_server.calls}
    assert set(by_id) == {with_attrs, no_data, keyed}
    for call in by_id.values():
        assert call["path"] == endpoint.removeprefix(endpoint_server.base)
        assert call["headers"]["Content-Type"] == "application/json"
        message = call["body"]["message"]
        assert RFC3339_Z.fullmatch(message["publishTime"])
        assert message["publish_time"] == message["publishTime"]
        assert message["message_id"] == message["messageId"]
        assert call["body"]["subscription"] == sub
        assert "deliveryAttempt" not in call["body"]  # no dead-letter policy

    def stripped(message_id: str) -> dict[str, Any]:
        m = dict(by_id[message_id]["body"]["message"])
        for key in ("messageId", "message_id", "publishTime", "publish_time"):
            del m[key]
        return m

    assert stripped(with_attrs) == {
        "data": base64.b64encode(b"hello").decode(),
        "attributes": {"job_id": "j-1"},
    }
    assert stripped(no_data) == {"data": "", "attributes": {"only": "attr"}}
    assert stripped(keyed) == {"data": base64.b64encode(b"k").decode(), "orderingKey": "key-1"}
    assert len(endpoint_server.calls) == 3  # 200 acked each one


def test_push_retries_failures_with_backoff_then_stops(admin_emulator, unique, recorder) -> None:
    dead_topic = admin_emulator.publisher.topic_path(PROJECT, unique("dead"))
    admin_emulator.publisher.create_topic(name=dead_topic)
    answers = iter([500, 503, 429, 204])
    endpoint_server = recorder(lambda _: next(answers))
    topic, sub, _ = _push_pair(
        admin_emulator.publisher,
        admin_emulator.subscriber,
        unique,
        endpoint_server.base,
        retry_policy={"minimum_backoff": {"nanos": 200_000_000}, "maximum_backoff": {"seconds": 1}},
        dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 10},
    )
    message_id = admin_emulator.publisher.publish(topic, b"flaky").result(timeout=10)

    stats = eventually(
        lambda: (
            _sub_stats(admin_emulator.stats(), sub, "acked") == 1
            and admin_emulator.stats()["subscriptions"][sub]
        )
    )
    assert stats["backlog"] == 0
    assert (stats["push_attempts"], stats["push_failures"], stats["nacked"]) == (4, 3, 3)
    calls = endpoint_server.calls
    assert [c["body"]["message"]["messageId"] for c in calls] == [message_id] * 4
    assert [c["body"]["deliveryAttempt"] for c in calls] == [1, 2, 3, 4]
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(calls)]
    # Backoff floors (0.2, 0.4, 0.8 s): lower bounds only, never "how fast".
    assert all(gap >= floor - 0.05 for gap, floor in zip(gaps, [0.2, 0.4, 0.8], strict=True))


def _sub_stats(stats: dict[str, Any], sub: str, key: str) -> int:
    return int(stats["subscriptions"].get(sub, {}).get(key, 0))


def test_several_pushes_are_in_flight_at_once(publisher, subscriber, unique, recorder) -> None:
    barrier = threading.Barrier(5, timeout=10)

    def respond(_: dict[str, Any]) -> int:
        try:
            barrier.wait()  # only returns if 5 pushes are open at the same time
        except threading.BrokenBarrierError:
            return 500
        return 200

    endpoint_server = recorder(respond)
    topic, _, _ = _push_pair(publisher, subscriber, unique, endpoint_server.base)
    for f in [publisher.publish(topic, b"%d" % i) for i in range(5)]:
        f.result(timeout=10)
    eventually(lambda: len(endpoint_server.calls) >= 5)
    assert not barrier.broken


def test_refused_connection_is_retried_and_push_pull_switch(
    publisher, subscriber, unique, recorder
) -> None:
    dead_end = f"http://127.0.0.1:{free_port()}"
    topic, sub, endpoint = _push_pair(
        publisher,
        subscriber,
        unique,
        dead_end,
        retry_policy={
            "minimum_backoff": {"nanos": 100_000_000},
            "maximum_backoff": {"nanos": 200_000_000},
        },
    )
    message_id = publisher.publish(topic, b"waiting").result(timeout=10)
    time.sleep(0.5)  # let a few pushes fail against the closed port
    endpoint_server = recorder()
    subscriber.modify_push_config(
        request={
            "subscription": sub,
            "push_config": {"push_endpoint": endpoint.replace(dead_end, endpoint_server.base)},
        }
    )
    eventually(lambda: endpoint_server.bodies())
    assert endpoint_server.bodies()[0]["message"]["messageId"] == message_id

    subscriber.modify_push_config(request={"subscription": sub, "push_config": {}})
    pulled_id = publisher.publish(topic, b"pulled").result(timeout=10)
    got = subscriber.pull(subscription=sub, max_messages=5, timeout=10).received_messages
    assert [r.message.message_id for r in got] == [pulled_id]
    assert len(endpoint_server.calls) == 1


@pytest.mark.slow
def test_push_without_answer_within_the_ack_deadline_is_a_nack(
    admin_emulator, unique, recorder
) -> None:
    """The one test that waits out the API's minimum 10 s deadline."""
    release = threading.Event()

    def respond(call: dict[str, Any]) -> int:
        if len(endpoint_server.calls) == 1:
            release.wait(30)  # never answer the first push in time
        return 200

    endpoint_server = recorder(respond)
    try:
        topic, sub, _ = _push_pair(
            admin_emulator.publisher,
            admin_emulator.subscriber,
            unique,
            endpoint_server.base,
            ack_deadline_seconds=10,
            retry_policy={
                "minimum_backoff": {"nanos": 100_000_000},
                "maximum_backoff": {"nanos": 100_000_000},
            },
        )
        message_id = admin_emulator.publisher.publish(topic, b"slow").result(timeout=10)
        stats = eventually(
            lambda: (
                admin_emulator.stats()["subscriptions"][sub].get("acked") == 1
                and admin_emulator.stats()["subscriptions"][sub]
            ),
            timeout=25,
        )
    finally:
        release.set()
    assert [b["message"]["messageId"] for b in endpoint_server.bodies()] == [message_id] * 2
    assert (stats["push_attempts"], stats["push_failures"], stats["backlog"]) == (2, 1, 0)
