"""Fault knobs, /stats and the admin server's input checks (our own emulator instance)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import pytest

from tests.emulator.emulator_support import PROJECT, eventually


def _pull_pair(emu: Any, unique: Any) -> tuple[str, str]:
    topic = emu.publisher.topic_path(PROJECT, unique("topic"))
    sub = emu.subscriber.subscription_path(PROJECT, unique("sub"))
    emu.publisher.create_topic(name=topic)
    emu.subscriber.create_subscription(name=sub, topic=topic)
    return topic, sub


def _drain(emu: Any, sub: str, want: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < want:
        resp = emu.subscriber.pull(subscription=sub, max_messages=100, timeout=10)
        assert resp.received_messages, f"only {len(got)} of {want} deliveries arrived"
        got += resp.received_messages
    return got


def test_duplicate_fraction_delivers_twice(faults, unique) -> None:
    topic, sub = _pull_pair(faults, unique)
    faults.set_faults(duplicate_fraction=1.0)
    ids = [faults.publisher.publish(topic, b"%d" % i).result(timeout=10) for i in range(10)]
    got = _drain(faults, sub, 20)
    assert Counter(r.message.message_id for r in got) == {i: 2 for i in ids}
    assert len({r.ack_id for r in got}) == 20
    faults.set_faults(duplicate_fraction=0.0)
    faults.subscriber.acknowledge(subscription=sub, ack_ids=[r.ack_id for r in got])
    stats = faults.stats()["subscriptions"][sub]
    assert (stats["delivered"], stats["duplicated"], stats["acked"], stats["backlog"]) == (
        10,
        10,
        10,
        0,
    )


def test_duplicates_also_reach_push_endpoints(faults, unique, recorder) -> None:
    endpoint = recorder()
    topic = faults.publisher.topic_path(PROJECT, unique("topic"))
    sub = faults.subscriber.subscription_path(PROJECT, unique("push"))
    faults.publisher.create_topic(name=topic)
    faults.subscriber.create_subscription(
        request={"name": sub, "topic": topic, "push_config": {"push_endpoint": endpoint.base}}
    )
    faults.set_faults(duplicate_fraction=1.0)
    message_id = faults.publisher.publish(topic, b"twice").result(timeout=10)
    eventually(lambda: len(endpoint.calls) >= 2)
    assert [b["message"]["messageId"] for b in endpoint.bodies()] == [message_id] * 2


def test_dropped_publishes_are_never_delivered(faults, unique) -> None:
    topic, sub = _pull_pair(faults, unique)
    faults.set_faults(drop_publish_fraction=1.0)
    lost = [faults.publisher.publish(topic, b"lost").result(timeout=10) for _ in range(5)]
    assert len(set(lost)) == 5 and all(i.isdigit() for i in lost)  # answered like a success
    faults.set_faults(drop_publish_fraction=0.0)
    kept = faults.publisher.publish(topic, b"kept").result(timeout=10)
    got = _drain(faults, sub, 1)
    assert [r.message.message_id for r in got] == [kept]
    faults.subscriber.acknowledge(subscription=sub, ack_ids=[got[0].ack_id])
    rest = faults.subscriber.pull(subscription=sub, max_messages=10, return_immediately=True)
    assert list(rest.received_messages) == []
    assert faults.stats()["topics"][topic] == {"published": 6, "dropped": 5}


def test_partial_drop_fraction_matches_stats(faults, unique) -> None:
    topic, sub = _pull_pair(faults, unique)
    faults.set_faults(drop_publish_fraction=0.5, seed=3)
    ids = [f.result(timeout=10) for f in [faults.publisher.publish(topic, b"x") for _ in range(40)]]
    faults.set_faults(drop_publish_fraction=0.0)
    dropped = faults.stats()["topics"][topic]["dropped"]
    assert 0 < dropped < 40
    delivered = _drain(faults, sub, 40 - dropped)
    assert {r.message.message_id for r in delivered} < set(ids)
    rest = faults.subscriber.pull(subscription=sub, max_messages=10, return_immediately=True)
    assert list(rest.received_messages) == []


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize(
    "body",
    [
        b'{"duplicate_fraction": 2}',
        b'{"drop_publish_fraction": "half"}',
        b'{"bogus": 0.1}',
        b"not json",
        b"[0.5]",
        b'{"duplicate_fraction": 0.5, "drop_publish_fraction": -1}',
    ],
)
def test_bad_fault_updates_get_400_and_change_nothing(faults, body: bytes) -> None:
    before = faults.stats()["faults"]
    status, answer = _post(f"{faults.admin_url}/faults", body)
    assert status == 400 and answer["error"]
    assert faults.stats()["faults"] == before


def test_stats_shape(faults) -> None:
    stats = faults.stats()
    assert set(stats) == {"totals", "topics", "subscriptions", "faults", "push_flow_control"}
    assert stats["push_flow_control"] == {
        "window": "adaptive",
        "max_window": 32,
        "initial_window": 4,
    }
    assert set(stats["totals"]) >= {
        "published",
        "dropped",
        "delivered",
        "duplicated",
        "acked",
        "nacked",
        "expired",
        "dead_lettered",
        "push_attempts",
        "push_failures",
    }
    status, _ = _post(f"{faults.admin_url}/nowhere", b"{}")
    assert status == 404
