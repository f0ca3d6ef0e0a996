"""gRPC wiring: google.pubsub.v1.Publisher and Subscriber on generic handlers.

No generated code: requests and responses are the proto-plus types
google-cloud-pubsub ships, (de)serialized with their classmethods.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.broker import Broker
from reclaim.local.pubsub_emulator.errors import ApiError, InvalidArgument
from reclaim.local.pubsub_emulator.streaming import StreamingPullSession, received

_LOG = logging.getLogger("pubsub_emulator.server")
_EMPTY = empty_pb2.Empty()
_T = TypeVar("_T")

# The client pings every 30 s (keepalive_time_ms); gRPC's default server policy
# would answer that with GOAWAY too_many_pings.
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", 32 * 1024 * 1024),
    ("grpc.max_send_message_length", 32 * 1024 * 1024),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
    # A second emulator on a busy port must fail, not silently share it.
    ("grpc.so_reuseport", 0),
]


def _api(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Turn the broker's ApiError into the status code the service would send."""

    @functools.wraps(fn)
    def wrapper(request: Any, context: grpc.ServicerContext) -> _T:
        try:
            return fn(request, context)
        except ApiError as err:
            _LOG.info("%s -> %s: %s", fn.__name__, err.code, err.message)
            context.abort(grpc.StatusCode[err.code], err.message)
            raise  # unreachable: abort raises

    return wrapper


class Publisher:
    """google.pubsub.v1.Publisher."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def create_topic(self, request: pubsub.Topic, context: grpc.ServicerContext) -> pubsub.Topic:
        return self.broker.create_topic(request)

    def get_topic(self, request: pubsub.GetTopicRequest, context: Any) -> pubsub.Topic:
        return self.broker.get_topic(request.topic)

    def list_topics(
        self, request: pubsub.ListTopicsRequest, context: Any
    ) -> pubsub.ListTopicsResponse:
        topics, token = self.broker.list_topics(
            request.project, request.page_size, request.page_token
        )
        return pubsub.ListTopicsResponse(topics=topics, next_page_token=token)

    def list_topic_subscriptions(
        self, request: pubsub.ListTopicSubscriptionsRequest, context: Any
    ) -> pubsub.ListTopicSubscriptionsResponse:
        names, token = self.broker.list_topic_subscriptions(
            request.topic, request.page_size, request.page_token
        )
        return pubsub.ListTopicSubscriptionsResponse(subscriptions=names, next_page_token=token)

    def delete_topic(self, request: pubsub.DeleteTopicRequest, context: Any) -> empty_pb2.Empty:
        self.broker.delete_topic(request.topic)
        return _EMPTY

    def publish(self, request: pubsub.PublishRequest, context: Any) -> pubsub.PublishResponse:
        ids = self.broker.publish(request.topic, list(request.messages))
        return pubsub.PublishResponse(message_ids=ids)


class Subscriber:
    """google.pubsub.v1.Subscriber."""

    def __init__(self, broker: Broker, pull_wait: float, max_pull_messages: int = 0) -> None:
        self.broker = broker
        self.pull_wait = pull_wait
        self.max_pull_messages = max_pull_messages  # test-only cap on one Pull; 0 = none

    def create_subscription(
        self, request: pubsub.Subscription, context: Any
    ) -> pubsub.Subscription:
        return self.broker.create_subscription(request)

    def get_subscription(
        self, request: pubsub.GetSubscriptionRequest, context: Any
    ) -> pubsub.Subscription:
        return self.broker.get_subscription(request.subscription)

    def update_subscription(
        self, request: pubsub.UpdateSubscriptionRequest, context: Any
    ) -> pubsub.Subscription:
        paths = list(request.update_mask.paths) if "update_mask" in request else []
        return self.broker.update_subscription(request.subscription, paths)

    def list_subscriptions(
        self, request: pubsub.ListSubscriptionsRequest, context: Any
    ) -> pubsub.ListSubscriptionsResponse:
        subs, token = self.broker.list_subscriptions(
            request.project, request.page_size, request.page_token
        )
        return pubsub.ListSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    def delete_subscription(
        self, request: pubsub.DeleteSubscriptionRequest, context: Any
    ) -> empty_pb2.Empty:
        self.broker.delete_subscription(request.subscription)
        return _EMPTY

    def modify_push_config(
        self, request: pubsub.ModifyPushConfigRequest, context: Any
    ) -> empty_pb2.Empty:
        self.broker.modify_push_config(request.subscription, request.push_config)
        return _EMPTY

    def acknowledge(self, request: pubsub.AcknowledgeRequest, context: Any) -> empty_pb2.Empty:
        if not request.ack_ids:
            raise InvalidArgument("ack_ids must not be empty.")
        self.broker.acknowledge(request.subscription, list(request.ack_ids))
        return _EMPTY

    def modify_ack_deadline(
        self, request: pubsub.ModifyAckDeadlineRequest, context: Any
    ) -> empty_pb2.Empty:
        if not request.ack_ids:
            raise InvalidArgument("ack_ids must not be empty.")
        self.broker.modify_ack_deadline(
            request.subscription, list(request.ack_ids), request.ack_deadline_seconds
        )
        return _EMPTY

    def pull(
        self, request: pubsub.PullRequest, context: grpc.ServicerContext
    ) -> pubsub.PullResponse:
        """Wait briefly for messages unless return_immediately, like the service.

        With max_pull_messages, answer at most that many, as the service may return
        fewer messages than are waiting."""
        name, limit = request.subscription, request.max_messages
        if self.max_pull_messages and limit > 0:
            limit = min(limit, self.max_pull_messages)
        if request.return_immediately:
            deliveries = self.broker.pull(name, limit)
        else:
            remaining = context.time_remaining()
            wait = self.pull_wait if remaining is None else min(self.pull_wait, remaining - 0.1)
            deliveries = self.broker.wait_pull(
                name, limit, max(wait, 0.0), stop=lambda: not context.is_active()
            )
        return pubsub.PullResponse(received_messages=[received(d) for d in deliveries])

    def streaming_pull(
        self,
        request_iterator: Iterator[pubsub.StreamingPullRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[pubsub.StreamingPullResponse]:
        try:
            first = next(request_iterator)
        except StopIteration:
            return
        try:
            session = StreamingPullSession(self.broker, first, context)
            yield from session.run(request_iterator)
        except ApiError as err:
            _LOG.info("StreamingPull -> %s: %s", err.code, err.message)
            context.abort(grpc.StatusCode[err.code], err.message)


def _unary(fn: Callable[..., Any], req: Any, resp: Any) -> grpc.RpcMethodHandler:
    serialize = resp.SerializeToString if resp is empty_pb2.Empty else resp.serialize
    return grpc.unary_unary_rpc_method_handler(
        _api(fn), request_deserializer=req.deserialize, response_serializer=serialize
    )


def handlers(
    broker: Broker, pull_wait: float, max_pull_messages: int = 0
) -> list[grpc.GenericRpcHandler]:
    pub, sub = Publisher(broker), Subscriber(broker, pull_wait, max_pull_messages)
    p, e = pubsub, empty_pb2.Empty
    publisher = {
        "CreateTopic": _unary(pub.create_topic, p.Topic, p.Topic),
        "GetTopic": _unary(pub.get_topic, p.GetTopicRequest, p.Topic),
        "ListTopics": _unary(pub.list_topics, p.ListTopicsRequest, p.ListTopicsResponse),
        "ListTopicSubscriptions": _unary(
            pub.list_topic_subscriptions,
            p.ListTopicSubscriptionsRequest,
            p.ListTopicSubscriptionsResponse,
        ),
        "DeleteTopic": _unary(pub.delete_topic, p.DeleteTopicRequest, e),
        "Publish": _unary(pub.publish, p.PublishRequest, p.PublishResponse),
    }
    subscriber = {
        "CreateSubscription": _unary(sub.create_subscription, p.Subscription, p.Subscription),
        "GetSubscription": _unary(sub.get_subscription, p.GetSubscriptionRequest, p.Subscription),
        "UpdateSubscription": _unary(
            sub.update_subscription, p.UpdateSubscriptionRequest, p.Subscription
        ),
        "ListSubscriptions": _unary(
            sub.list_subscriptions, p.ListSubscriptionsRequest, p.ListSubscriptionsResponse
        ),
        "DeleteSubscription": _unary(sub.delete_subscription, p.DeleteSubscriptionRequest, e),
        "ModifyPushConfig": _unary(sub.modify_push_config, p.ModifyPushConfigRequest, e),
        "Acknowledge": _unary(sub.acknowledge, p.AcknowledgeRequest, e),
        "ModifyAckDeadline": _unary(sub.modify_ack_deadline, p.ModifyAckDeadlineRequest, e),
        "Pull": _unary(sub.pull, p.PullRequest, p.PullResponse),
        "StreamingPull": grpc.stream_stream_rpc_method_handler(
            sub.streaming_pull,
            request_deserializer=p.StreamingPullRequest.deserialize,
            response_serializer=p.StreamingPullResponse.serialize,
        ),
    }
    return [
        grpc.method_handlers_generic_handler("google.pubsub.v1.Publisher", publisher),
        grpc.method_handlers_generic_handler("google.pubsub.v1.Subscriber", subscriber),
    ]


def build_server(
    broker: Broker,
    host: str,
    port: int,
    *,
    pull_wait: float = 2.0,
    max_workers: int = 128,
    max_pull_messages: int = 0,
) -> tuple[grpc.Server, int]:
    """A started-ready (not yet started) server and the port it bound; port 0 = any free one."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        options=SERVER_OPTIONS,
    )
    server.add_generic_rpc_handlers(handlers(broker, pull_wait, max_pull_messages))
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot listen on {host}:{port}")
    return server, bound
