"""The push window (slow start + halving on failure): the pure rule, then the pusher
obeying it, driven step by step on one thread (no HTTP, no sleeps)."""

from __future__ import annotations

from typing import Any

import pytest
from google.pubsub_v1.types import pubsub

from local.pubsub_emulator.broker import Broker
from local.pubsub_emulator.policy import INITIAL_PUSH_WINDOW, PushWindow
from local.pubsub_emulator.push import Pusher
from local.pubsub_emulator.subscription import Delivery

P = "projects/unit-proj"
TOPIC = f"{P}/topics/topic-w"
SUB = f"{P}/subscriptions/push-w"


def test_window_starts_at_the_maximum_by_default() -> None:
    assert PushWindow(maximum=5).size == 5
    assert INITIAL_PUSH_WINDOW >= 32


def test_window_grows_by_one_per_ack_up_to_the_maximum() -> None:
    w = PushWindow(maximum=5, initial=1)
    assert w.size == 1
    assert [w.acked() for _ in range(6)] == [2, 3, 4, 5, 5, 5]


def test_window_halves_on_every_failure_but_never_below_one() -> None:
    w = PushWindow(maximum=32, initial=32)
    assert [w.failed() for _ in range(7)] == [16, 8, 4, 2, 1, 1, 1]
    assert w.acked() == 2  # and grows again from there


def test_window_room_and_bounds() -> None:
    w = PushWindow(maximum=4, initial=3)
    assert (w.room(0), w.room(2), w.room(3), w.room(9)) == (3, 1, 0, 0)
    assert PushWindow(maximum=4, initial=10).size == 4
    assert PushWindow(maximum=0, initial=0).size == 1  # at least one push is always allowed
    odd = PushWindow(maximum=32, initial=7)
    assert (odd.failed(), odd.failed(), odd.failed()) == (3, 1, 1)


class ScriptedPusher(Pusher):
    """POSTs nothing: each push takes the next scripted outcome."""

    def __init__(self, broker: Broker, concurrency: int, initial_window: int) -> None:
        super().__init__(broker, concurrency, initial_window)
        self.ok = True
        self.posted = 0

    def _post(self, endpoint: str, delivery: Delivery, timeout: float) -> tuple[bool, str]:
        self.posted += 1
        return (True, "HTTP 200") if self.ok else (False, "HTTP 429")


def _round(pusher: ScriptedPusher) -> int:
    """Dispatch once, then let one worker run everything dispatched; how many were sent."""
    before = pusher.posted
    pusher._dispatch_once()
    pusher._queue.put(None)  # the worker returns after the queued pushes
    pusher._work()
    return pusher.posted - before


@pytest.fixture
def pusher() -> ScriptedPusher:
    broker = Broker()
    broker.create_topic(pubsub.Topic(name=TOPIC))
    broker.create_subscription(
        pubsub.Subscription(
            name=SUB,
            topic=TOPIC,
            push_config=pubsub.PushConfig(push_endpoint="http://127.0.0.1:9/push"),
        )
    )
    broker.publish(TOPIC, [pubsub.PubsubMessage(data=b"%d" % i) for i in range(200)])
    return ScriptedPusher(broker, concurrency=8, initial_window=1)  # a slow start, to watch


def _sub_stats(pusher: Pusher) -> dict[str, Any]:
    return dict(pusher.broker.snapshot()["subscriptions"][SUB])


def test_pusher_sends_at_most_the_window_and_adapts_it(pusher: ScriptedPusher) -> None:
    # Slow start: every round acks all it sent, so the window doubles up to the maximum.
    assert [_round(pusher) for _ in range(5)] == [1, 2, 4, 8, 8]
    assert pusher.window(SUB) == 8
    assert _sub_stats(pusher)["push_window"] == 8

    # A round of 8 refusals halves the window 8 times: down to one push in flight.
    pusher.ok = False
    assert _round(pusher) == 8
    assert pusher.window(SUB) == 1
    assert [_round(pusher) for _ in range(3)] == [1, 1, 1]

    # Success again: it grows back.
    pusher.ok = True
    assert [_round(pusher) for _ in range(4)] == [1, 2, 4, 8]
    stats = _sub_stats(pusher)
    assert (stats["push_window"], stats["push_in_flight"]) == (8, 0)
    assert (stats["push_attempts"], stats["push_failures"]) == (49, 11)  # 23 + 8 + 3 + 15


def test_windows_are_per_subscription(pusher: ScriptedPusher) -> None:
    other = f"{P}/subscriptions/push-other"
    pusher.broker.create_subscription(
        pubsub.Subscription(
            name=other,
            topic=TOPIC,
            push_config=pubsub.PushConfig(push_endpoint="http://127.0.0.1:9/other"),
        )
    )
    pusher.broker.publish(TOPIC, [pubsub.PubsubMessage(data=b"%d" % i) for i in range(20)])
    assert _round(pusher) == 2  # one for each subscription
    assert _round(pusher) == 4
    pusher.ok = False
    assert _round(pusher) == 8
    assert (pusher.window(SUB), pusher.window(other)) == (1, 1)
    pusher.ok = True
    assert _round(pusher) == 2
