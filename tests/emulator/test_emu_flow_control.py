"""Push flow control over the wire: the official clients, the emulator process, and an
HTTP endpoint that counts how many pushes it is answering at once.

Phases wait on counters, never on durations; the one bounded wait (the fixed-window
control) asserts that nothing happens while the window is provably full.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulator.emulator_support import (
    PROJECT,
    AdminEmulator,
    Recorder,
    eventually,
    run_emulator,
)

RETRY = {"minimum_backoff": {"nanos": 100_000_000}, "maximum_backoff": {"nanos": 200_000_000}}


class Endpoint:
    """What the endpoint answers, and how many pushes it holds at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.code = 200
        self.hold_s = 0.0
        self.release = threading.Event()
        self.hung = 0
        self.arrived = 0
        self.before_first_answer: int | None = None
        """How many pushes had arrived when the first one was answered."""

    def respond(self, call: dict[str, Any]) -> int:
        data = call["body"]["message"].get("attributes", {})
        if data.get("hang"):
            with self.lock:
                self.hung += 1
            self.release.wait(60)
            return 200
        with self.lock:
            self.now += 1
            self.arrived += 1
            self.most = max(self.most, self.now)
        try:
            if self.hold_s:
                time.sleep(self.hold_s)
            return self.code
        finally:
            with self.lock:
                self.now -= 1
                if self.before_first_answer is None:
                    self.before_first_answer = self.arrived


def _pair(emu: AdminEmulator, unique: Callable[[str], str], base: str) -> tuple[str, str]:
    topic = emu.publisher.topic_path(PROJECT, unique("topic"))
    sub = emu.subscriber.subscription_path(PROJECT, unique("push"))
    emu.publisher.create_topic(name=topic)
    emu.subscriber.create_subscription(
        request={
            "name": sub,
            "topic": topic,
            "push_config": {"push_endpoint": base + "/push"},
            "ack_deadline_seconds": 600,  # a hung push is held, never timed out, here
            "retry_policy": RETRY,
        }
    )
    return topic, sub


def _publish(emu: AdminEmulator, topic: str, n: int, **attrs: str) -> None:
    for f in [emu.publisher.publish(topic, b"%d" % i, **attrs) for i in range(n)]:
        f.result(timeout=10)


def _sub(emu: AdminEmulator, sub: str) -> dict[str, Any]:
    return dict(emu.stats()["subscriptions"].get(sub, {}))


@pytest.fixture
def endpoint(recorder: Callable[..., Recorder]) -> Iterator[tuple[Endpoint, Recorder]]:
    state = Endpoint()
    server = recorder(state.respond)
    try:
        yield state, server
    finally:
        state.release.set()


def test_slow_start_then_growth_then_shrink_on_failures(
    admin_emulator: AdminEmulator, unique: Callable[[str], str], endpoint: Any
) -> None:
    state, server = endpoint
    state.hold_s = 0.3  # long enough to see concurrency, far below the 2 s linger floor
    topic, sub = _pair(admin_emulator, unique, server.base)

    # slow start: until a push is answered, at most the initial window (4) goes out
    _publish(admin_emulator, topic, 40)
    eventually(lambda: _sub(admin_emulator, sub).get("acked") == 40, timeout=30)
    assert state.before_first_answer is not None and 1 <= state.before_first_answer <= 4
    assert state.most > 4, "the window never grew past its start"
    grown = _sub(admin_emulator, sub)["push_window"]
    assert grown > 8

    # refusals shrink it
    state.code, state.hold_s = 429, 0.0
    _publish(admin_emulator, topic, 6)
    eventually(lambda: _sub(admin_emulator, sub)["push_window"] <= grown // 2)
    eventually(lambda: _sub(admin_emulator, sub)["push_window"] <= 2)

    # and successes widen it again
    state.code = 200
    eventually(lambda: _sub(admin_emulator, sub).get("acked") == 46, timeout=30)
    _publish(admin_emulator, topic, 20)
    eventually(lambda: _sub(admin_emulator, sub).get("acked") == 66, timeout=30)
    assert _sub(admin_emulator, sub)["push_window"] > 4


def test_a_hung_endpoint_does_not_starve_healthy_deliveries(
    admin_emulator: AdminEmulator, unique: Callable[[str], str], endpoint: Any
) -> None:
    """Pushes held by a hung instance, a window narrowed by refusals: healthy
    deliveries still flow beside the held ones (adaptive window, the default)."""
    state, server = endpoint
    topic, sub = _pair(admin_emulator, unique, server.base)
    _publish(admin_emulator, topic, 3, hang="1")
    eventually(lambda: state.hung == 3)
    state.code = 429
    _publish(admin_emulator, topic, 4)
    eventually(lambda: _sub(admin_emulator, sub)["push_window"] == 1, timeout=20)
    state.code = 200
    _publish(admin_emulator, topic, 4)
    stats = eventually(lambda: (s := _sub(admin_emulator, sub)).get("acked") == 8 and s, timeout=30)
    assert state.hung == 3 and not state.release.is_set()  # still held all along
    assert stats["push_in_flight"] == 3 and stats["push_lingering"] == 3
    state.release.set()
    eventually(lambda: _sub(admin_emulator, sub).get("acked") == 11)


def test_the_fixed_window_is_starved_by_a_hung_endpoint(
    log_dir: Path, unique: Callable[[str], str], endpoint: Any
) -> None:
    """The control: --push-window fixed keeps every held push in its window."""
    state, server = endpoint
    flags = ("--push-window", "fixed", "--push-concurrency", "3")
    with run_emulator(log_dir, *flags, label="fixed-window") as emu:
        assert emu.stats()["push_flow_control"]["window"] == "fixed"
        topic, sub = _pair(emu, unique, server.base)
        _publish(emu, topic, 3, hang="1")
        eventually(lambda: state.hung == 3)
        _publish(emu, topic, 2)
        time.sleep(3.0)  # the window is full: nothing else can go out, however long
        assert len(server.calls) == 3 and not _sub(emu, sub).get("acked")
        state.release.set()
        eventually(lambda: _sub(emu, sub).get("acked") == 5)
