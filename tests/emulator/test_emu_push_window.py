"""The push window: the pure rule, then the pusher obeying it, driven step by step on
one thread with a hand-moved clock (no HTTP, no sleeps)."""

from __future__ import annotations

from typing import Any

import pytest
from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.policy import INITIAL_PUSH_WINDOW, LINGER_FLOOR_S, PushWindow
from reclaim.local.pubsub_emulator.push import Pusher
from reclaim.local.pubsub_emulator.subscription import Delivery

P = "projects/unit-proj"
TOPIC = f"{P}/topics/topic-w"
SUB = f"{P}/subscriptions/push-w"


# ----------------------------------------------------------------------------- the rule


def test_slow_start_from_a_single_digit_window_plus_one_per_ack() -> None:
    w = PushWindow(maximum=8)
    assert w.size == INITIAL_PUSH_WINDOW == 4
    grown = [w.acked(w.ticket(0.0), 0.1) for _ in range(6)]
    assert grown == [5, 6, 7, 8, 8, 8]


def test_a_failure_halves_the_window_once_per_round_never_below_one() -> None:
    w = PushWindow(maximum=32, initial=32)
    burst = [w.ticket(0.0) for _ in range(5)]  # five pushes let out together
    assert [w.failed(t, 1.0) for t in burst] == [16, 16, 16, 16, 16]  # one signal
    for expected in (8, 4, 2, 1, 1):
        assert w.failed(w.ticket(2.0), 3.0) == expected  # each later push is a new round
    assert w.acked(w.ticket(4.0), 4.1) == 2  # and it grows again from one


def test_hung_pushes_stop_counting_after_three_times_the_typical_latency() -> None:
    w = PushWindow(maximum=8, initial=2)
    # before any ack the floor applies: a push older than 2 s no longer counts
    assert w.linger_after() == LINGER_FLOOR_S
    assert w.room([0.0, 0.0], now=1.0) == 0
    assert w.room([0.0, 0.0], now=LINGER_FLOOR_S) == 2
    # acked pushes of ~3 s make the typical latency 3 s: lingering starts at 9 s
    for _ in range(3):
        w.acked(w.ticket(10.0), 13.0)
    assert w.typical_s == pytest.approx(3.0)
    assert w.linger_after() == pytest.approx(9.0)
    assert w.counted([20.0, 20.0, 12.0], now=21.0) == 2  # the push of 9 s ago lingers


def test_fixed_window_never_moves_and_counts_every_push() -> None:
    w = PushWindow(maximum=3, adaptive=False)
    assert w.size == 3 and w.linger_after() is None
    assert w.failed(w.ticket(0.0), 1.0) == 3 and w.acked(w.ticket(0.0), 1.0) == 3
    assert w.room([0.0, 0.0, 0.0], now=10_000.0) == 0


def test_window_bounds() -> None:
    assert PushWindow(maximum=4, initial=10).size == 4
    assert PushWindow(maximum=0, initial=0).size == 1  # one push always probes


# ----------------------------------------------------------------------------- the pusher


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedPusher(Pusher):
    """POSTs nothing: each push takes the scripted outcome; `hold` keeps pushes open."""

    def __init__(self, broker: Broker, clock: Clock, **kw: Any) -> None:
        super().__init__(broker, 8, clock=clock, **kw)
        self.ok = True
        self.posted = 0
        self.held: list[tuple[Any, ...]] = []

    def _post(self, endpoint: str, delivery: Delivery, timeout: float) -> tuple[bool, str]:
        self.posted += 1
        return (True, "HTTP 200") if self.ok else (False, "HTTP 429")


def _round(pusher: ScriptedPusher, hold: int = 0) -> int:
    """Dispatch once; keep the first `hold` pushes open, run the rest; how many went out."""
    before = pusher._queue.qsize()
    pusher._dispatch_once()
    sent = pusher._queue.qsize() - before
    items = [pusher._queue.get_nowait() for _ in range(pusher._queue.qsize())]
    pusher.held += items[:hold]
    for item in items[hold:]:
        pusher._queue.put(item)
    pusher._queue.put(None)  # the worker returns after the queued pushes
    pusher._work()
    return sent


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _broker(messages: int = 300) -> Broker:
    broker = Broker()
    broker.create_topic(pubsub.Topic(name=TOPIC))
    broker.create_subscription(
        pubsub.Subscription(
            name=SUB,
            topic=TOPIC,
            ack_deadline_seconds=600,
            push_config=pubsub.PushConfig(push_endpoint="http://127.0.0.1:9/push"),
        )
    )
    if messages:
        broker.publish(TOPIC, [pubsub.PubsubMessage(data=b"%d" % i) for i in range(messages)])
    return broker


def _gauges(pusher: Pusher) -> dict[str, Any]:
    return dict(pusher.broker.snapshot()["subscriptions"][SUB])


def test_pusher_sends_at_most_the_window_and_adapts_it(clock: Clock) -> None:
    pusher = ScriptedPusher(_broker(), clock)
    # slow start: every round acks all it sent, so the window doubles up to the maximum
    assert [_round(pusher) for _ in range(4)] == [4, 8, 8, 8]
    g = _gauges(pusher)
    assert (g["push_window"], g["push_in_flight"], g["push_lingering"]) == (8, 0, 0)
    # a round of 8 refusals (one round): the window halves once
    pusher.ok = False
    assert _round(pusher) == 8
    assert pusher.window(SUB) == 4
    assert [_round(pusher) for _ in range(3)] == [4, 2, 1]
    assert pusher.window(SUB) == 1
    # success again: it grows back
    pusher.ok = True
    assert [_round(pusher) for _ in range(4)] == [1, 2, 4, 8]
    assert pusher.broker.snapshot()["push_flow_control"]["window"] == "adaptive"


def test_hung_pushes_cannot_starve_the_others(clock: Clock) -> None:
    """The chaos failure, replayed: pushes held by a hung instance fill a window that
    failures narrowed. Once they outlast the typical latency they stop counting."""
    pusher = ScriptedPusher(_broker(), clock)
    assert _round(pusher) == 4 and pusher.window(SUB) == 8  # typical latency is ~0
    assert _round(pusher, hold=2) == 8  # two of these hang (a SIGSTOPped instance)
    pusher.ok = False
    clock.now += 0.1
    assert _round(pusher) == 6 and pusher.window(SUB) == 4  # refusals: halved once
    assert _round(pusher) == 2 and pusher.window(SUB) == 2  # the 2 hung ones count
    assert _round(pusher) == 0  # the window is full of hung pushes: nothing goes out
    clock.now += LINGER_FLOOR_S  # they outlast max(2 s, 3 x typical)
    pusher.ok = True
    assert _round(pusher) == 2  # deliveries flow beside the hung pushes
    g = _gauges(pusher)
    assert (g["push_in_flight"], g["push_lingering"], g["push_window"]) == (2, 2, 4)


def test_the_fixed_window_is_starved_by_hung_pushes(clock: Clock) -> None:
    """The control: with --push-window fixed, hung pushes hold their slots for good."""
    pusher = ScriptedPusher(_broker(), clock, adaptive=False)
    assert _round(pusher, hold=8) == 8
    clock.now += 3600
    assert _round(pusher) == 0
    assert pusher.broker.snapshot()["push_flow_control"]["window"] == "fixed"


def test_windows_are_per_subscription(clock: Clock) -> None:
    broker = _broker(messages=0)
    other = f"{P}/subscriptions/push-other"
    broker.create_subscription(
        pubsub.Subscription(
            name=other,
            topic=TOPIC,
            push_config=pubsub.PushConfig(push_endpoint="http://127.0.0.1:9/other"),
        )
    )
    broker.publish(TOPIC, [pubsub.PubsubMessage(data=b"%d" % i) for i in range(40)])
    pusher = ScriptedPusher(broker, clock)
    assert _round(pusher) == 8  # 4 for each subscription
    pusher.ok = False
    assert _round(pusher) == 16
    assert (pusher.window(SUB), pusher.window(other)) == (4, 4)
