"""Broker semantics with an injected clock: no server, no sleeps."""

from __future__ import annotations

import datetime as dt

import pytest
from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    Unimplemented,
)
from reclaim.local.pubsub_emulator.faults import FaultError, Faults
from reclaim.local.pubsub_emulator.names import DELETED_TOPIC
from reclaim.local.pubsub_emulator.policy import SubPolicy, redelivery_delay

P = "projects/unit-proj"
TOPIC = f"{P}/topics/topic-a"
SUB = f"{P}/subscriptions/sub-a"
DLQ = f"{P}/topics/dead-letters"
DLQ_SUB = f"{P}/subscriptions/dead-letter-hold"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _secs(s: float) -> dt.timedelta:
    return dt.timedelta(seconds=s)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(clock: Clock) -> Broker:
    b = Broker(clock=clock, wall=lambda: 1_700_000_000.123456)
    b.create_topic(pubsub.Topic(name=TOPIC))
    return b


def _sub(broker: Broker, **fields: object) -> None:
    broker.create_subscription(pubsub.Subscription(name=SUB, topic=TOPIC, **fields))


def _msg(data: bytes = b"x", **attrs: str) -> pubsub.PubsubMessage:
    return pubsub.PubsubMessage(data=data, attributes=attrs)


def test_fan_out_only_to_subscriptions_that_existed_at_publish(broker: Broker) -> None:
    _sub(broker)
    broker.publish(TOPIC, [_msg(b"early")])
    broker.create_subscription(pubsub.Subscription(name=f"{P}/subscriptions/late", topic=TOPIC))
    broker.publish(TOPIC, [_msg(b"later")])
    assert [d.message.data for d in broker.pull(SUB, 10)] == [b"early", b"later"]
    assert [d.message.data for d in broker.pull(f"{P}/subscriptions/late", 10)] == [b"later"]


def test_ids_are_unique_digit_strings_and_publish_time_is_set(broker: Broker) -> None:
    _sub(broker)
    ids = broker.publish(TOPIC, [_msg() for _ in range(50)])
    assert len(set(ids)) == 50 and all(i.isdigit() for i in ids)
    d = broker.pull(SUB, 1)[0]
    assert d.message.publish_time.timestamp() == pytest.approx(1_700_000_000.123)
    assert d.delivery_attempt is None  # no dead-letter policy


def test_nack_without_retry_policy_redelivers_at_once(broker: Broker) -> None:
    _sub(broker)
    broker.publish(TOPIC, [_msg()])
    first = broker.pull(SUB, 1)[0]
    assert broker.pull(SUB, 1) == []
    broker.modify_ack_deadline(SUB, [first.ack_id], 0)
    again = broker.pull(SUB, 1)[0]
    assert again.message.message_id == first.message.message_id
    assert again.ack_id != first.ack_id


def test_expiry_redelivers_after_the_deadline_and_modack_extends(
    broker: Broker, clock: Clock
) -> None:
    _sub(broker, ack_deadline_seconds=30)
    broker.publish(TOPIC, [_msg()])
    d = broker.pull(SUB, 1)[0]
    clock.now += 29
    assert broker.pull(SUB, 1) == []
    broker.modify_ack_deadline(SUB, [d.ack_id], 60)
    clock.now += 59
    assert broker.pull(SUB, 1) == []
    clock.now += 2
    assert broker.pull(SUB, 1)[0].message.message_id == d.message.message_id
    assert broker.stats.snapshot()["totals"]["expired"] == 1


def test_retry_policy_backoff_is_exponential_between_bounds(broker: Broker, clock: Clock) -> None:
    _sub(
        broker, retry_policy=pubsub.RetryPolicy(minimum_backoff=_secs(2), maximum_backoff=_secs(5))
    )
    broker.publish(TOPIC, [_msg()])
    delivery, waits = broker.pull(SUB, 1)[0], []
    for _ in range(4):
        broker.modify_ack_deadline(SUB, [delivery.ack_id], 0)
        start = clock.now
        while not (got := broker.pull(SUB, 1)):
            clock.now += 0.5
        waits.append(clock.now - start)
        delivery = got[0]
    assert waits == [2.0, 4.0, 5.0, 5.0]


def test_redelivery_delay_policy() -> None:
    with_retry = SubPolicy(retry=(1.0, 10.0))
    assert [redelivery_delay(n, with_retry) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert redelivery_delay(3, SubPolicy()) == 0.0  # pull, no retry policy: immediate
    push = SubPolicy(push_endpoint="http://x/")
    assert redelivery_delay(1, push) == pytest.approx(0.1)
    assert redelivery_delay(30, push) == 60.0


def test_dead_letter_after_max_attempts_with_service_attributes(broker: Broker) -> None:
    broker.create_topic(pubsub.Topic(name=DLQ))
    broker.create_subscription(pubsub.Subscription(name=DLQ_SUB, topic=DLQ))
    _sub(
        broker,
        dead_letter_policy=pubsub.DeadLetterPolicy(dead_letter_topic=DLQ, max_delivery_attempts=5),
    )
    [original_id] = broker.publish(TOPIC, [_msg(b"poison", a="b")])
    attempts = []
    for _ in range(5):
        d = broker.pull(SUB, 1)[0]
        attempts.append(d.delivery_attempt)
        broker.modify_ack_deadline(SUB, [d.ack_id], 0)
    assert attempts == [1, 2, 3, 4, 5]
    assert broker.pull(SUB, 1) == [] and broker.backlog(SUB) == 0
    dead = broker.pull(DLQ_SUB, 10)
    assert len(dead) == 1
    msg = dead[0].message
    assert msg.data == b"poison" and msg.message_id != original_id
    assert dict(msg.attributes) == {
        "a": "b",
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceSubscription": "sub-a",
        "CloudPubSubDeadLetterSourceSubscriptionProject": "unit-proj",
        "CloudPubSubDeadLetterSourceTopicPublishTime": "2023-11-14T22:13:20.123+00:00",
    }
    assert dead[0].delivery_attempt is None
    assert broker.stats.snapshot()["subscriptions"][SUB]["dead_lettered"] == 1


def test_expiries_count_toward_dead_lettering(broker: Broker, clock: Clock) -> None:
    broker.create_topic(pubsub.Topic(name=DLQ))
    broker.create_subscription(pubsub.Subscription(name=DLQ_SUB, topic=DLQ))
    _sub(broker, dead_letter_policy=pubsub.DeadLetterPolicy(dead_letter_topic=DLQ))
    broker.publish(TOPIC, [_msg()])
    seen = []
    for _ in range(5):
        seen.append(broker.pull(SUB, 1)[0].delivery_attempt)
        clock.now += 11
    broker.tick()
    assert seen == [1, 2, 3, 4, 5]
    assert len(broker.pull(DLQ_SUB, 10)) == 1


def test_late_ack_is_honoured_and_stale_modack_is_ignored(broker: Broker, clock: Clock) -> None:
    _sub(broker)
    broker.publish(TOPIC, [_msg()])
    old = broker.pull(SUB, 1)[0]
    clock.now += 11
    new = broker.pull(SUB, 1)[0]
    broker.modify_ack_deadline(SUB, [old.ack_id], 0)  # stale: must not nack the new lease
    assert broker.pull(SUB, 1) == []
    broker.acknowledge(SUB, [old.ack_id])  # late ack removes the message
    assert broker.backlog(SUB) == 0
    broker.acknowledge(SUB, [new.ack_id, "99-99"])  # unknown ids are ignored
    with pytest.raises(InvalidArgument):
        broker.acknowledge(SUB, ["not an ack id"])
    clock.now += 100
    assert broker.pull(SUB, 1) == []


def test_duplicates_are_shadow_deliveries(clock: Clock) -> None:
    b = Broker(clock=clock, faults=Faults(duplicate_fraction=1.0, seed=1))
    b.create_topic(pubsub.Topic(name=TOPIC))
    _sub(b)
    b.publish(TOPIC, [_msg()])
    first = b.pull(SUB, 10)
    second = b.pull(SUB, 10)
    assert len(first) == 1 and len(second) == 1 and second[0].duplicate
    assert first[0].message.message_id == second[0].message.message_id
    b.modify_ack_deadline(SUB, [second[0].ack_id], 0)  # nacking a shadow changes nothing
    assert b.pull(SUB, 10) == []
    b.acknowledge(SUB, [second[0].ack_id])  # acking a shadow acks the message
    assert b.backlog(SUB) == 0
    totals = b.stats.snapshot()["totals"]
    assert (totals["delivered"], totals["duplicated"], totals["nacked"]) == (1, 1, 0)


def test_dropped_publish_answers_ids_but_reaches_nobody(clock: Clock) -> None:
    b = Broker(clock=clock, faults=Faults(drop_publish_fraction=1.0))
    b.create_topic(pubsub.Topic(name=TOPIC))
    _sub(b)
    ids = b.publish(TOPIC, [_msg(), _msg()])
    assert len(ids) == 2 and b.pull(SUB, 10) == []
    assert b.stats.snapshot()["topics"][TOPIC] == {"published": 2, "dropped": 2}


def test_stream_flow_control_limits_outstanding_per_owner(broker: Broker) -> None:
    _sub(broker)
    broker.publish(TOPIC, [_msg() for _ in range(5)])
    got = broker.pull(SUB, 10, owner="s1", max_outstanding=3)
    assert len(got) == 3
    assert broker.pull(SUB, 10, owner="s1", max_outstanding=3) == []
    broker.acknowledge(SUB, [got[0].ack_id])
    assert len(broker.pull(SUB, 10, owner="s1", max_outstanding=3)) == 1


def test_deleted_topic_detaches_subscriptions(broker: Broker) -> None:
    _sub(broker)
    broker.publish(TOPIC, [_msg()])
    broker.delete_topic(TOPIC)
    assert broker.get_subscription(SUB).topic == DELETED_TOPIC
    assert len(broker.pull(SUB, 10)) == 1  # the backlog stays deliverable
    with pytest.raises(NotFound):
        broker.publish(TOPIC, [_msg()])
    broker.create_topic(pubsub.Topic(name=TOPIC))
    assert broker.list_topic_subscriptions(TOPIC) == ([], "")


def test_errors_and_validation(broker: Broker) -> None:
    with pytest.raises(AlreadyExists):
        broker.create_topic(pubsub.Topic(name=TOPIC))
    for bad in ("topic-a", f"{P}/topics/ab", f"{P}/topics/goog-x", f"{P}/topics/1abc"):
        with pytest.raises(InvalidArgument):
            broker.create_topic(pubsub.Topic(name=bad))
    with pytest.raises(NotFound):
        broker.create_subscription(pubsub.Subscription(name=SUB, topic=f"{P}/topics/missing"))
    for deadline in (5, 601):
        with pytest.raises(InvalidArgument):
            _sub(broker, ack_deadline_seconds=deadline)
    with pytest.raises(InvalidArgument):
        _sub(
            broker,
            dead_letter_policy=pubsub.DeadLetterPolicy(
                dead_letter_topic=DLQ, max_delivery_attempts=4
            ),
        )
    with pytest.raises(NotFound):  # the dead-letter topic must exist
        _sub(broker, dead_letter_policy=pubsub.DeadLetterPolicy(dead_letter_topic=DLQ))
    with pytest.raises(Unimplemented):
        _sub(broker, filter='attributes.x = "y"')
    with pytest.raises(NotFound):
        broker.pull(SUB, 1)  # nothing above created it
    _sub(broker)
    with pytest.raises(InvalidArgument):
        broker.modify_ack_deadline(SUB, ["1-1"], 601)
    with pytest.raises(InvalidArgument):
        broker.publish(TOPIC, [pubsub.PubsubMessage()])
    with pytest.raises(InvalidArgument):
        broker.publish(TOPIC, [_msg(googx="1")])
    assert broker.backlog(SUB) == 0


def test_list_topics_pages(broker: Broker) -> None:
    for i in range(5):
        broker.create_topic(pubsub.Topic(name=f"{P}/topics/page-{i}"))
    broker.create_topic(pubsub.Topic(name="projects/other-proj/topics/page-9"))
    names, token = [], ""
    while True:
        topics, token = broker.list_topics(P, 2, token)
        names += [t.name for t in topics]
        if not token:
            break
    assert names == sorted([TOPIC, *(f"{P}/topics/page-{i}" for i in range(5))])


def test_update_subscription_is_all_or_nothing(broker: Broker) -> None:
    _sub(broker)
    bad = pubsub.Subscription(name=SUB, ack_deadline_seconds=3)
    with pytest.raises(InvalidArgument):
        broker.update_subscription(bad, ["ack_deadline_seconds"])
    assert broker.get_subscription(SUB).ack_deadline_seconds == 10
    good = pubsub.Subscription(name=SUB, ack_deadline_seconds=42)
    assert broker.update_subscription(good, ["ack_deadline_seconds"]).ack_deadline_seconds == 42


def test_fault_knob_updates_are_validated_all_or_nothing() -> None:
    f = Faults()
    with pytest.raises(FaultError):
        f.update({"duplicate_fraction": 0.5, "drop_publish_fraction": 2})
    with pytest.raises(FaultError):
        f.update({"bogus": 1})
    assert f.snapshot() == {"duplicate_fraction": 0.0, "drop_publish_fraction": 0.0}
    assert f.update({"drop_publish_fraction": 0.25})["drop_publish_fraction"] == 0.25
