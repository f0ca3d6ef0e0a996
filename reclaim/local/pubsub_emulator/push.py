"""Push delivery: one HTTP POST per message, with the service's wrapped envelope.

102/200/201/202/204 ack; any other status, a refused connection or no answer
within the ack deadline is a nack (redelivered after the retry policy's
backoff, and counted toward dead-lettering). How many pushes of a subscription
are in flight at once is its push window (policy.PushWindow): adaptive by
default, as the service's flow control is (https://cloud.google.com/pubsub/docs/push:
a small window at first, growing on successes, shrinking on failures), or fixed
(--push-window fixed). Workers are daemon threads so a shutdown never waits for
a slow endpoint.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import queue
import threading
import time
from collections import Counter
from typing import Any

import requests

from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.errors import ApiError
from reclaim.local.pubsub_emulator.policy import (
    INITIAL_PUSH_WINDOW,
    PushTicket,
    PushWindow,
    rfc3339_z,
)
from reclaim.local.pubsub_emulator.subscription import Delivery

_LOG = logging.getLogger("pubsub_emulator.push")
ACK_STATUSES = frozenset({102, 200, 201, 202, 204})
USER_AGENT = "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)"
_STOP = None


def envelope(delivery: Delivery) -> dict[str, Any]:
    """The JSON body the service POSTs for a wrapped push subscription."""
    msg = delivery.message
    published = rfc3339_z(msg.publish_time.timestamp())
    body: dict[str, Any] = {"data": base64.b64encode(msg.data).decode("ascii")}
    if msg.attributes:
        body["attributes"] = dict(msg.attributes)
    body.update(
        messageId=msg.message_id,
        message_id=msg.message_id,
        publishTime=published,
        publish_time=published,
    )
    if msg.ordering_key:
        body["orderingKey"] = msg.ordering_key
    wrapped: dict[str, Any] = {"message": body, "subscription": delivery.subscription}
    if delivery.delivery_attempt is not None:
        wrapped["deliveryAttempt"] = delivery.delivery_attempt
    return wrapped


_Push = tuple[Delivery, float, str, int, PushTicket]  # delivery, timeout, endpoint, id, ticket


class Pusher:
    """A dispatcher thread leasing push messages + a fixed pool of POSTing workers.

    `concurrency` is the largest push window of a subscription; `adaptive` chooses
    the service's flow control (a window that starts at `initial_window` and adapts)
    over a window fixed at `concurrency`.
    """

    def __init__(
        self,
        broker: Broker,
        concurrency: int = 32,
        *,
        adaptive: bool = True,
        initial_window: int = INITIAL_PUSH_WINDOW,
        clock: Any = time.monotonic,
    ) -> None:
        self.broker = broker
        self.per_subscription = max(concurrency, 1)
        self.adaptive = adaptive
        self.initial_window = initial_window
        self.workers = max(self.per_subscription * 4, 64)
        self._clock = clock
        self._inflight: Counter[str] = Counter()
        self._started: dict[str, dict[int, float]] = {}
        self._windows: dict[str, PushWindow] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Push | None] = queue.Queue()
        self._stopping = threading.Event()
        self._local = threading.local()
        self._threads: list[threading.Thread] = []
        broker.stats.info.update(
            window="adaptive" if adaptive else "fixed",
            max_window=self.per_subscription,
            initial_window=min(initial_window, self.per_subscription)
            if adaptive
            else self.per_subscription,
        )

    def start(self) -> None:
        self._spawn(self._dispatch, "push-dispatch")
        for i in range(self.workers):
            self._spawn(self._work, f"push-{i}")

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop leasing and tell workers to quit; in-flight POSTs are abandoned (leases expire)."""
        self._stopping.set()
        self.broker.wake()
        for _ in range(self.workers):
            self._queue.put(_STOP)

    def _window(self, name: str) -> PushWindow:
        """The subscription's push window (call with self._lock held)."""
        window = self._windows.get(name)
        if window is None:
            window = PushWindow(self.per_subscription, self.initial_window, adaptive=self.adaptive)
            self._windows[name] = window
            self._started[name] = {}
        return window

    def window(self, name: str) -> int:
        """Current push window of a subscription (the initial one if it never pushed)."""
        with self._lock:
            return self._window(name).size

    def _gauges(self, name: str, now: float) -> None:
        """Refresh what /stats shows of one subscription's flow control (lock held)."""
        window = self._window(name)
        started = self._started[name].values()
        counted = window.counted(started, now)
        typical = window.typical_s
        self.broker.stats.gauge(
            name,
            push_window=window.size,
            push_in_flight=self._inflight[name],
            push_lingering=self._inflight[name] - counted,
            push_latency_ms=None if typical is None else round(typical * 1000),
        )

    def _capacity(self, name: str) -> int:
        with self._lock:
            total = sum(self._inflight.values())
            now = self._clock()
            room = self._window(name).room(self._started[name].values(), now)
            return max(0, min(room, self.workers - total))

    def _dispatch(self) -> None:
        while not self._stopping.is_set():
            try:
                self._dispatch_once()
            except Exception:  # a bug here must not silently stop all pushes
                _LOG.exception("push dispatcher error")
                self._stopping.wait(0.5)

    def _dispatch_once(self) -> None:
        batch = self.broker.next_push_batch(self._capacity, timeout=1.0)
        for delivery, timeout in batch:
            name = delivery.subscription
            endpoint = self.broker.push_endpoint(name)
            with self._lock:
                now = self._clock()
                push_id = next(self._ids)
                ticket = self._window(name).ticket(now)
                self._started[name][push_id] = now
                self._inflight[name] += 1
                self._gauges(name, now)
            self._queue.put((delivery, timeout, endpoint, push_id, ticket))

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopping.is_set():
                return
            delivery, timeout, endpoint, push_id, ticket = item
            ok: bool | None = None
            try:
                ok = self._push(delivery, timeout, endpoint)
            except Exception:  # keep the worker alive; the lease expires and redelivers
                _LOG.exception("push worker error")
            finally:
                self._finish(delivery.subscription, push_id, ticket, ok)
                self.broker.wake()

    def _finish(self, name: str, push_id: int, ticket: PushTicket, ok: bool | None) -> None:
        """One push ended: the window learns its outcome (None: no endpoint, no signal)."""
        with self._lock:
            now = self._clock()
            self._started[name].pop(push_id, None)
            self._inflight[name] -= 1
            window = self._window(name)
            if ok is True:
                window.acked(ticket, now)
            elif ok is False:
                window.failed(ticket, now)
            self._gauges(name, now)

    def _push(self, delivery: Delivery, timeout: float, endpoint: str) -> bool | None:
        """POST one delivery; True acked, False failed, None when there was no endpoint."""
        name = delivery.subscription
        self.broker.stats.sub(name, "push_attempts")
        ok: bool | None = None
        why = "no endpoint (switched to pull)"
        if endpoint:
            ok, why = self._post(endpoint, delivery, timeout)
        if self._stopping.is_set():
            return ok
        try:
            if ok:
                self.broker.acknowledge(name, [delivery.ack_id])
                return ok
            self.broker.stats.sub(name, "push_failures")
            _LOG.info("push of %s to %s failed: %s", delivery.message.message_id, endpoint, why)
            self.broker.modify_ack_deadline(name, [delivery.ack_id], 0)
        except ApiError:
            pass  # the subscription was deleted meanwhile
        return ok

    def _post(self, endpoint: str, delivery: Delivery, timeout: float) -> tuple[bool, str]:
        body = json.dumps(envelope(delivery)).encode()
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        try:
            response = self._session().post(endpoint, data=body, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            return False, type(exc).__name__
        response.close()
        return response.status_code in ACK_STATUSES, f"HTTP {response.status_code}"
