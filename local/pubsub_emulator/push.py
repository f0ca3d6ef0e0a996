"""Push delivery: one HTTP POST per message, with the service's wrapped envelope.

102/200/201/202/204 ack; any other status, a refused connection or no answer
within the ack deadline is a nack (redelivered after the retry policy's
backoff, and counted toward dead-lettering). A bounded number of pushes per
subscription are in flight at once. Workers are daemon threads so a shutdown
never waits for a slow endpoint.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections import Counter
from typing import Any

import requests

from local.pubsub_emulator.broker import Broker
from local.pubsub_emulator.errors import ApiError
from local.pubsub_emulator.policy import rfc3339_z
from local.pubsub_emulator.subscription import Delivery

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


class Pusher:
    """A dispatcher thread leasing push messages + a fixed pool of POSTing workers."""

    def __init__(self, broker: Broker, concurrency: int = 32) -> None:
        self.broker = broker
        self.per_subscription = max(concurrency, 1)
        self.workers = max(self.per_subscription * 4, 64)
        self._inflight: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Delivery, float, str] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._local = threading.local()
        self._threads: list[threading.Thread] = []

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

    def _capacity(self, name: str) -> int:
        with self._lock:
            total = sum(self._inflight.values())
            return max(0, min(self.per_subscription - self._inflight[name], self.workers - total))

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
            endpoint = self.broker.push_endpoint(delivery.subscription)
            with self._lock:
                self._inflight[delivery.subscription] += 1
            self._queue.put((delivery, timeout, endpoint))

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
            delivery, timeout, endpoint = item
            try:
                self._push(delivery, timeout, endpoint)
            except Exception:  # keep the worker alive; the lease expires and redelivers
                _LOG.exception("push worker error")
            finally:
                with self._lock:
                    self._inflight[delivery.subscription] -= 1
                self.broker.wake()

    def _push(self, delivery: Delivery, timeout: float, endpoint: str) -> None:
        name = delivery.subscription
        self.broker.stats.sub(name, "push_attempts")
        ok, why = False, "no endpoint (switched to pull)"
        if endpoint:
            ok, why = self._post(endpoint, delivery, timeout)
        if self._stopping.is_set():
            return
        try:
            if ok:
                self.broker.acknowledge(name, [delivery.ack_id])
                return
            self.broker.stats.sub(name, "push_failures")
            _LOG.info("push of %s to %s failed: %s", delivery.message.message_id, endpoint, why)
            self.broker.modify_ack_deadline(name, [delivery.ack_id], 0)
        except ApiError:
            pass  # the subscription was deleted meanwhile

    def _post(self, endpoint: str, delivery: Delivery, timeout: float) -> tuple[bool, str]:
        body = json.dumps(envelope(delivery)).encode()
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        try:
            response = self._session().post(endpoint, data=body, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            return False, type(exc).__name__
        response.close()
        return response.status_code in ACK_STATUSES, f"HTTP {response.status_code}"
