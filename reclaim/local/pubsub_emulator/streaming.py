"""StreamingPull, as SubscriberClient.subscribe() drives it.

The first request names the subscription and the stream's ack deadline; later
requests are heartbeats (empty), deadline changes, or acks/modacks (the client
usually sends those as unary calls instead). A reader thread consumes the
requests while the handler's generator waits for messages and yields them.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator

import grpc
from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.errors import ApiError, InvalidArgument
from reclaim.local.pubsub_emulator.policy import check_ack_deadline
from reclaim.local.pubsub_emulator.subscription import Delivery

_LOG = logging.getLogger("pubsub_emulator.streaming")
BATCH = 100  # messages per StreamingPullResponse at most
WAIT_SLICE = 1.0


def received(delivery: Delivery) -> pubsub.ReceivedMessage:
    return pubsub.ReceivedMessage(
        ack_id=delivery.ack_id,
        message=delivery.message,
        delivery_attempt=delivery.delivery_attempt or 0,
    )


def _apply(broker: Broker, name: str, request: pubsub.StreamingPullRequest) -> None:
    """Acks and modacks carried by a stream request."""
    if request.ack_ids:
        broker.acknowledge(name, list(request.ack_ids))
    ids, secs = list(request.modify_deadline_ack_ids), list(request.modify_deadline_seconds)
    if len(ids) != len(secs):
        raise InvalidArgument(
            "modify_deadline_ack_ids and modify_deadline_seconds must have the same length."
        )
    for ack_id, seconds in zip(ids, secs, strict=True):
        broker.modify_ack_deadline(name, [ack_id], seconds)


class StreamingPullSession:
    """One open stream: its subscription incarnation, deadline and flow control."""

    def __init__(
        self, broker: Broker, first: pubsub.StreamingPullRequest, context: grpc.ServicerContext
    ) -> None:
        if not first.subscription:
            raise InvalidArgument("The first StreamingPullRequest must name a subscription.")
        self.broker = broker
        self.name = first.subscription
        self.deadline = check_ack_deadline(first.stream_ack_deadline_seconds)
        self.max_outstanding = max(first.max_outstanding_messages, 0)
        self.serial = broker.subscription_serial(self.name)
        self.owner = f"stream-{uuid.uuid4().hex[:8]}"
        self.context = context
        self._done = threading.Event()
        self.error: ApiError | None = None
        _apply(broker, self.name, first)
        context.add_callback(self._finish)

    def _finish(self) -> None:
        self._done.set()
        self.broker.wake()

    def _stopped(self) -> bool:
        return self._done.is_set() or self.error is not None or not self.context.is_active()

    def _read(self, requests: Iterator[pubsub.StreamingPullRequest]) -> None:
        try:
            for request in requests:
                if request.stream_ack_deadline_seconds:
                    self.deadline = check_ack_deadline(request.stream_ack_deadline_seconds)
                _apply(self.broker, self.name, request)
        except ApiError as err:
            self.error = err
        except Exception as exc:  # the client went away mid-read
            _LOG.debug("stream %s reader ended: %r", self.owner, exc)
        finally:
            # A half-closed stream ends the call, as with the service.
            self._finish()

    def run(
        self, requests: Iterator[pubsub.StreamingPullRequest]
    ) -> Iterator[pubsub.StreamingPullResponse]:
        reader = threading.Thread(
            target=self._read, args=(requests,), name=f"{self.owner}-reader", daemon=True
        )
        reader.start()
        properties = pubsub.StreamingPullResponse.SubscriptionProperties(
            exactly_once_delivery_enabled=False,
            message_ordering_enabled=self.broker.get_subscription(
                self.name
            ).enable_message_ordering,
        )
        _LOG.info("stream %s opened on %s", self.owner, self.name)
        while not self._stopped() and not self.broker.closed:
            deliveries = self.broker.wait_pull(
                self.name,
                BATCH,
                WAIT_SLICE,
                owner=self.owner,
                max_outstanding=self.max_outstanding,
                ack_deadline=self.deadline,
                serial=self.serial,
                stop=self._stopped,
            )
            if deliveries:
                yield pubsub.StreamingPullResponse(
                    received_messages=[received(d) for d in deliveries],
                    subscription_properties=properties,
                )
        if self.error is not None:
            raise self.error
        _LOG.info("stream %s closed", self.owner)
