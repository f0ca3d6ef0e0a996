"""The topology as data, in one place: buckets, topics, subscriptions, and the
delivery settings terraform must match.

Terraform (terraform/) declares the same names and the same ack deadline,
retry and dead-letter values; the ``PROD_*`` constants below are what a test
compares it with. Local backoffs may be shorter (demos need speed), so they are
explicit, overridable fields of ``Topology`` rather than hidden differences.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from shared import pools as pool_policy

PROJECT = "reclaim-local"
"""Local project id; matches shared/config.py's RECLAIM_PROJECT default."""

RECORDS_BUCKET = "reclaim-records"
"""Matches shared/config.py's RECLAIM_RECORDS_BUCKET default."""

UPLOADS_BUCKET = "reclaim-uploads"
"""Kept apart from records: records written to the trigger bucket would re-trigger."""

JOBS_TOPIC = "reclaim-jobs"
UPLOADS_TOPIC = "reclaim-uploads"
DEAD_LETTER_TOPIC = "reclaim-dead-letter"
TOPICS = (JOBS_TOPIC, UPLOADS_TOPIC, DEAD_LETTER_TOPIC)

CLAIM_SUBSCRIPTION = "reclaim-claim"
SUBMIT_UPLOAD_SUBSCRIPTION = "reclaim-submit-upload"
DEAD_LETTER_SUBSCRIPTION = "reclaim-dead-letter-hold"

CLAIM_ACK_DEADLINE_SECONDS = 600
"""Also the HTTP timeout of each push to claim: a job may run this long inside
one push before Pub/Sub redelivers it (the duplicate then finds it running-and-fresh)."""

SUBMIT_UPLOAD_ACK_DEADLINE_SECONDS = 60
"""submit_upload only writes a marker, a record and a doorbell: a minute is generous."""

DEAD_LETTER_ACK_DEADLINE_SECONDS = 60
"""The hold subscription is pulled by a person or a tool, never pushed."""

PROD_MIN_BACKOFF_SECONDS = 10
"""Production retry_policy.minimum_backoff of the push subscriptions (Pub/Sub default)."""

PROD_MAX_BACKOFF_SECONDS = 600
"""Production retry_policy.maximum_backoff (the Pub/Sub maximum)."""

LOCAL_MIN_BACKOFF_SECONDS = 1
"""Local minimum backoff: a refused push (429, dead instance) comes back within seconds."""

LOCAL_MAX_BACKOFF_SECONDS = 10
"""Local maximum backoff, so the demo and the chaos test finish in seconds."""

MAX_DELIVERY_ATTEMPTS = 20
"""dead_letter_policy.max_delivery_attempts (5-100). A doorbell refused this often
(429 while every slot is busy) is parked on the dead-letter topic; the record is
still the queue, so the sweep and the drain still run the job."""


@dataclass(frozen=True)
class SubscriptionSpec:
    """One subscription; ``push_function`` None means a pull subscription."""

    name: str
    topic: str
    ack_deadline_seconds: int
    push_function: str | None = None
    min_backoff_seconds: int | None = None
    max_backoff_seconds: int | None = None
    dead_letter_topic: str | None = None
    max_delivery_attempts: int | None = None


@dataclass(frozen=True)
class PoolWiring:
    """A declared pool's delivery settings: its topic and push subscription (shared.pools;
    terraform/pools.tf makes the same)."""

    name: str
    ack_deadline_seconds: int = CLAIM_ACK_DEADLINE_SECONDS
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS


def pool_subscription(pool: str) -> str:
    """The push subscription of a declared pool (the default pool's is reclaim-claim)."""
    return f"{CLAIM_SUBSCRIPTION}-{pool}"


@dataclass(frozen=True)
class Topology:
    """Names and delivery settings of one deployment (local or production)."""

    project: str = PROJECT
    records_bucket: str = RECORDS_BUCKET
    uploads_bucket: str = UPLOADS_BUCKET
    shard_buckets: tuple[str, ...] = ()
    """Record buckets beside records_bucket (RECLAIM_SHARD_BUCKETS; terraform's
    record_shards): each job lives in one of them by a hash of its id."""
    jobs_topic: str = JOBS_TOPIC
    uploads_topic: str = UPLOADS_TOPIC
    dead_letter_topic: str = DEAD_LETTER_TOPIC
    min_backoff_seconds: int = LOCAL_MIN_BACKOFF_SECONDS
    max_backoff_seconds: int = LOCAL_MAX_BACKOFF_SECONDS
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS
    claim_ack_deadline_seconds: int = CLAIM_ACK_DEADLINE_SECONDS
    submit_upload_ack_deadline_seconds: int = SUBMIT_UPLOAD_ACK_DEADLINE_SECONDS
    pools: tuple[PoolWiring, ...] = ()
    """The declared pools: each has a topic <jobs_topic>-<pool> pushed to claim-<pool>."""

    def __post_init__(self) -> None:
        _check(self)

    @property
    def topics(self) -> tuple[str, ...]:
        return (
            self.jobs_topic,
            self.uploads_topic,
            self.dead_letter_topic,
            *(pool_policy.topic_of(self.jobs_topic, p.name) for p in self.pools),
        )

    @property
    def buckets(self) -> tuple[str, ...]:
        return (self.records_bucket, *self.shard_buckets, self.uploads_bucket)

    @property
    def records_buckets(self) -> tuple[str, ...]:
        """Every record shard's bucket, the home bucket first."""
        return (self.records_bucket, *self.shard_buckets)

    def records_env(self) -> dict[str, str]:
        """The record buckets as every function and client is told them."""
        return {
            "RECLAIM_RECORDS_BUCKET": self.records_bucket,
            "RECLAIM_SHARD_BUCKETS": ",".join(self.shard_buckets),
        }

    @property
    def subscriptions(self) -> tuple[SubscriptionSpec, ...]:
        push: dict[str, Any] = {
            "min_backoff_seconds": self.min_backoff_seconds,
            "max_backoff_seconds": self.max_backoff_seconds,
            "dead_letter_topic": self.dead_letter_topic,
            "max_delivery_attempts": self.max_delivery_attempts,
        }
        return (
            SubscriptionSpec(
                CLAIM_SUBSCRIPTION,
                self.jobs_topic,
                self.claim_ack_deadline_seconds,
                "claim",
                **push,
            ),
            SubscriptionSpec(
                SUBMIT_UPLOAD_SUBSCRIPTION,
                self.uploads_topic,
                self.submit_upload_ack_deadline_seconds,
                "submit_upload",
                **push,
            ),
            SubscriptionSpec(
                DEAD_LETTER_SUBSCRIPTION, self.dead_letter_topic, DEAD_LETTER_ACK_DEADLINE_SECONDS
            ),
            *(
                SubscriptionSpec(
                    pool_subscription(p.name),
                    pool_policy.topic_of(self.jobs_topic, p.name),
                    p.ack_deadline_seconds,
                    f"claim-{p.name}",
                    **{**push, "max_delivery_attempts": p.max_delivery_attempts},
                )
                for p in self.pools
            ),
        )

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, name: str) -> str:
        return f"projects/{self.project}/subscriptions/{name}"

    def push_endpoint(self, base_url: str, topic: str) -> str:
        """functions-framework builds a pushed CloudEvent's ``source`` from this path."""
        return f"{base_url.rstrip('/')}/{self.topic_path(topic)}"


def with_pools(t: Topology, declared: pool_policy.Pools) -> Topology:
    """The topology with a topic and a push subscription per declared pool."""
    wired = tuple(
        PoolWiring(p.name, p.ack_deadline_seconds, p.max_delivery_attempts)
        for p in declared.declared.values()
    )
    return replace(t, pools=wired)


def production(**overrides: Any) -> Topology:
    """The topology terraform deploys: production backoffs."""
    values: dict[str, Any] = {
        "min_backoff_seconds": PROD_MIN_BACKOFF_SECONDS,
        "max_backoff_seconds": PROD_MAX_BACKOFF_SECONDS,
    }
    return replace(Topology(), **{**values, **overrides})


def _check(t: Topology) -> None:
    """Reject settings Pub/Sub itself would reject, before touching anything."""
    for name in (t.project, *t.buckets, *t.topics):
        if not name or "/" in name or any(c.isspace() for c in name):
            raise ValueError(f"invalid name {name!r}: must be non-empty, no spaces or '/'")
    if t.uploads_bucket in t.records_buckets:
        raise ValueError("records and uploads buckets must differ (an upload would re-trigger)")
    if len(set(t.records_buckets)) != len(t.records_buckets):
        raise ValueError(f"record buckets repeat: {list(t.records_buckets)}")
    for label, value in (
        ("claim_ack_deadline_seconds", t.claim_ack_deadline_seconds),
        ("submit_upload_ack_deadline_seconds", t.submit_upload_ack_deadline_seconds),
    ):
        if not 10 <= value <= 600:
            raise ValueError(f"{label}={value} must be within 10..600")
    if not 0 <= t.min_backoff_seconds <= t.max_backoff_seconds <= 600:
        raise ValueError("backoffs must satisfy 0 <= min <= max <= 600")
    if not 5 <= t.max_delivery_attempts <= 100:
        raise ValueError("max_delivery_attempts must be within 5..100")


# ---------------------------------------------------------------- creation


def storage_client(gcs_url: str, project: str) -> Any:
    """An official storage client aimed at fake-gcs-server, without touching os.environ."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs_url},
    )


def pubsub_admin_clients(emulator_host: str) -> tuple[Any, Any]:
    """GAPIC publisher and subscriber clients on an insecure channel to the emulator."""
    import grpc
    from google.pubsub_v1 import PublisherClient, SubscriberClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    pub = PublisherClient(
        transport=PublisherGrpcTransport(channel=grpc.insecure_channel(emulator_host))
    )
    sub = SubscriberClient(
        transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(emulator_host))
    )
    return pub, sub


def ensure_topics(t: Topology, publisher: Any) -> None:
    """Create every topic; an existing one is fine."""
    from google.api_core.exceptions import AlreadyExists

    for topic in t.topics:
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(request={"name": t.topic_path(topic)})


def ensure_buckets(t: Topology, storage: Any, extra: tuple[str, ...] = ()) -> None:
    """Create both buckets (and the other buckets upload routes name); an existing one
    is fine."""
    from google.api_core.exceptions import Conflict

    for name in (*t.buckets, *extra):
        with contextlib.suppress(Conflict):
            storage.create_bucket(name)


def notification_scope(notifications: list[tuple[str, str]]) -> tuple[str | None, str] | None:
    """fake-gcs-server's one notification (-event.bucket, -event.object-prefix) that
    covers the (bucket, prefix) notifications the upload routes need: their bucket when
    they share one (else every bucket) and their common prefix; None when none is needed.
    It can be wider than terraform's set, never narrower: submit_upload acks what no
    needed notification covers without a job, so locally the same uploads become jobs."""
    if not notifications:
        return None
    buckets = {b for b, _ in notifications}
    if len(buckets) > 1:
        return None, ""
    # a GCS prefix is a string prefix, not a path: character by character is right
    return buckets.pop(), os.path.commonprefix([p for _, p in notifications])  # noqa: RUF071


def subscription_request(
    t: Topology, spec: SubscriptionSpec, function_urls: Mapping[str, str]
) -> dict[str, Any]:
    """The CreateSubscription request for spec (pure, so a test can read it)."""
    req: dict[str, Any] = {
        "name": t.subscription_path(spec.name),
        "topic": t.topic_path(spec.topic),
        "ack_deadline_seconds": spec.ack_deadline_seconds,
    }
    if spec.push_function is not None:
        if spec.push_function not in function_urls:
            raise ValueError(f"no URL for push function {spec.push_function!r}")
        req["push_config"] = {
            "push_endpoint": t.push_endpoint(function_urls[spec.push_function], spec.topic)
        }
    if spec.min_backoff_seconds is not None:
        req["retry_policy"] = {
            "minimum_backoff": {"seconds": spec.min_backoff_seconds},
            "maximum_backoff": {"seconds": spec.max_backoff_seconds},
        }
    if spec.dead_letter_topic is not None:
        req["dead_letter_policy"] = {
            "dead_letter_topic": t.topic_path(spec.dead_letter_topic),
            "max_delivery_attempts": spec.max_delivery_attempts,
        }
    return req


def ensure_subscriptions(t: Topology, subscriber: Any, function_urls: Mapping[str, str]) -> None:
    """Create every subscription; an existing push one gets its endpoint updated."""
    from google.api_core.exceptions import AlreadyExists

    for spec in t.subscriptions:
        req = subscription_request(t, spec, function_urls)
        try:
            subscriber.create_subscription(request=req)
        except AlreadyExists:
            if "push_config" in req:
                subscriber.modify_push_config(
                    request={"subscription": req["name"], "push_config": req["push_config"]}
                )


def ensure_all(
    t: Topology, *, emulator_host: str, gcs_url: str, function_urls: Mapping[str, str]
) -> None:
    """Create the whole topology idempotently with the official clients."""
    pub, sub = pubsub_admin_clients(emulator_host)
    try:
        ensure_topics(t, pub)
        ensure_buckets(t, storage_client(gcs_url, t.project))
        ensure_subscriptions(t, sub, function_urls)
    finally:
        pub.transport.close()
        sub.transport.close()
