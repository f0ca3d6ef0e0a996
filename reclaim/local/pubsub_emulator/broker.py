"""Topics, subscriptions and delivery semantics, behind one lock + condition.

No gRPC here: the server and the push worker call these methods, and tests can
drive them directly with an injected clock. `clock` (monotonic seconds) rules
ack deadlines and backoffs; `wall` (epoch seconds) stamps publish times. The
blocking helpers (wait_pull, next_push_batch) wait in real time and are meant
for the real clock.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import proto
from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    Unimplemented,
)
from reclaim.local.pubsub_emulator.faults import Faults
from reclaim.local.pubsub_emulator.messages import check_publish, dead_letter_attributes, stamped
from reclaim.local.pubsub_emulator.names import (
    DELETED_TOPIC,
    parse_project,
    parse_subscription,
    parse_topic,
)
from reclaim.local.pubsub_emulator.policy import (
    apply_defaults,
    check_ack_deadline,
    check_push_config,
    policy_of,
)
from reclaim.local.pubsub_emulator.stats import Stats
from reclaim.local.pubsub_emulator.subscription import Delivery, Entry, SubState

_LOG = logging.getLogger("pubsub_emulator.broker")

UPDATABLE_SUBSCRIPTION_FIELDS = frozenset(
    {
        "ack_deadline_seconds",
        "push_config",
        "retry_policy",
        "dead_letter_policy",
        "labels",
        "message_retention_duration",
        "expiration_policy",
        "retain_acked_messages",
    }
)
MAX_PAGE_SIZE = 1000
_MAX_WAIT_SLICE = 1.0  # re-check stop conditions at least this often
_ACK_ID = re.compile(r"\d+-\d+")


def _check_ack_ids(ack_ids: Sequence[str]) -> None:
    """Malformed ack ids are INVALID_ARGUMENT; well-formed stale ones are ignored."""
    for ack_id in ack_ids:
        if not _ACK_ID.fullmatch(ack_id):
            raise InvalidArgument(
                f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
            )


class _Topic:
    def __init__(self, config: pubsub.Topic) -> None:
        self.config = config
        self.subscriptions: set[str] = set()


_M = TypeVar("_M", bound=proto.Message)


def _copy(message: _M) -> _M:
    """A detached deep copy, so callers never share the broker's objects."""
    return type(message).deserialize(type(message).serialize(message))


def _page(names: list[str], page_size: int, page_token: str) -> tuple[list[str], str]:
    """Sorted names after page_token; the token is the last name returned."""
    if page_size < 0:
        raise InvalidArgument("page_size must not be negative.")
    size = min(page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
    start = 0
    if page_token:
        if not page_token.startswith("projects/"):
            raise InvalidArgument(f"Invalid page_token: {page_token!r}")
        start = next((i for i, n in enumerate(names) if n > page_token), len(names))
    chunk = names[start : start + size]
    more = start + size < len(names)
    return chunk, (chunk[-1] if more and chunk else "")


class Broker:
    """The emulator's whole state (memory only)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        faults: Faults | None = None,
        stats: Stats | None = None,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.faults = faults or Faults()
        self.stats = stats or Stats()
        self.cond = threading.Condition(threading.RLock())
        self._topics: dict[str, _Topic] = {}
        self._subs: dict[str, SubState] = {}
        self._ids = itertools.count(int(wall() * 1_000_000) + 1)
        self.closed = False

    # -- lifecycle --------------------------------------------------------
    def close(self) -> None:
        """Wake every waiter; they return empty-handed."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # -- topics -----------------------------------------------------------
    def create_topic(self, topic: pubsub.Topic) -> pubsub.Topic:
        parse_topic(topic.name)
        if "schema_settings" in topic:
            raise Unimplemented("Schemas are not supported by this emulator.")
        with self.cond:
            if topic.name in self._topics:
                raise AlreadyExists("Topic already exists")
            self._topics[topic.name] = _Topic(_copy(topic))
            return _copy(topic)

    def get_topic(self, name: str) -> pubsub.Topic:
        parse_topic(name)
        with self.cond:
            return _copy(self._topic(name).config)

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise NotFound(f"Topic not found (resource={name})")
        return topic

    def list_topics(
        self, project: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[pubsub.Topic], str]:
        parse_project(project)
        with self.cond:
            names = sorted(n for n in self._topics if n.startswith(project + "/topics/"))
            chunk, token = _page(names, page_size, page_token)
            return [_copy(self._topics[n].config) for n in chunk], token

    def list_topic_subscriptions(
        self, topic: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[str], str]:
        parse_topic(topic)
        with self.cond:
            return _page(sorted(self._topic(topic).subscriptions), page_size, page_token)

    def delete_topic(self, name: str) -> None:
        """Subscriptions stay, detached: their topic reads "_deleted-topic_"."""
        parse_topic(name)
        with self.cond:
            topic = self._topic(name)
            del self._topics[name]
            for sub_name in topic.subscriptions:
                sub = self._subs.get(sub_name)
                if sub is not None:
                    sub.config.topic = DELETED_TOPIC
            self.cond.notify_all()

    def publish(self, topic: str, messages: Sequence[pubsub.PubsubMessage]) -> list[str]:
        parse_topic(topic)
        check_publish(messages)
        with self.cond:
            self._topic(topic)
            ids = []
            for message in messages:
                message_id = str(next(self._ids))
                ids.append(message_id)
                self.stats.topic(topic, "published")
                if self.faults.should_drop_publish():
                    self.stats.topic(topic, "dropped")
                    _LOG.info("fault: dropped message %s on %s", message_id, topic)
                    continue
                self._fan_out(topic, stamped(message, message_id, self._now_ms()))
            self.cond.notify_all()
            return ids

    def _now_ms(self) -> float:
        return math.floor(self.wall() * 1000) / 1000

    def _fan_out(self, topic: str, message: pubsub.PubsubMessage) -> None:
        publish_ts = message.publish_time.timestamp()
        for sub_name in self._topics[topic].subscriptions:
            self._subs[sub_name].add(message.message_id, message, publish_ts)

    # -- subscriptions ----------------------------------------------------
    def create_subscription(self, request: pubsub.Subscription) -> pubsub.Subscription:
        parse_subscription(request.name)
        parse_topic(request.topic)
        policy = policy_of(request)
        config = _copy(request)
        apply_defaults(config, policy)
        with self.cond:
            if request.name in self._subs:
                raise AlreadyExists("Subscription already exists")
            topic = self._topic(request.topic)
            if policy.dead_letter_topic:
                self._topic(policy.dead_letter_topic)
            self._subs[request.name] = SubState(config, policy)
            topic.subscriptions.add(request.name)
            self.cond.notify_all()
            return _copy(config)

    def _sub(self, name: str, serial: int | None = None) -> SubState:
        sub = self._subs.get(name)
        if sub is None or (serial is not None and sub.serial != serial):
            raise NotFound(f"Subscription does not exist (resource={name})")
        return sub

    def get_subscription(self, name: str) -> pubsub.Subscription:
        parse_subscription(name)
        with self.cond:
            return _copy(self._sub(name).config)

    def subscription_serial(self, name: str) -> int:
        """Identity of the current incarnation (a re-created name is a new subscription)."""
        parse_subscription(name)
        with self.cond:
            return self._sub(name).serial

    def list_subscriptions(
        self, project: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[pubsub.Subscription], str]:
        parse_project(project)
        with self.cond:
            names = sorted(n for n in self._subs if n.startswith(project + "/subscriptions/"))
            chunk, token = _page(names, page_size, page_token)
            return [_copy(self._subs[n].config) for n in chunk], token

    def delete_subscription(self, name: str) -> None:
        parse_subscription(name)
        with self.cond:
            sub = self._sub(name)
            del self._subs[name]
            topic = self._topics.get(sub.config.topic)
            if topic is not None:
                topic.subscriptions.discard(name)
            self.cond.notify_all()

    def update_subscription(
        self, request: pubsub.Subscription, paths: Sequence[str]
    ) -> pubsub.Subscription:
        """Apply the fields named in the update mask, all or nothing."""
        parse_subscription(request.name)
        if not paths:
            raise InvalidArgument("update_mask must be specified and non-empty.")
        unsupported = sorted(set(paths) - UPDATABLE_SUBSCRIPTION_FIELDS)
        if unsupported:
            raise InvalidArgument(f"Cannot update field(s): {', '.join(unsupported)}")
        with self.cond:
            sub = self._sub(request.name)
            config = _copy(sub.config)
            for path in paths:
                if path in request:
                    setattr(config, path, getattr(request, path))
                else:
                    delattr(config, path)
            policy = policy_of(config)
            if policy.dead_letter_topic:
                self._topic(policy.dead_letter_topic)
            apply_defaults(config, policy)
            sub.config, sub.policy = config, policy
            self.cond.notify_all()
            return _copy(config)

    def modify_push_config(self, name: str, push_config: pubsub.PushConfig) -> None:
        """Switch between pull and push (an empty endpoint means pull)."""
        parse_subscription(name)
        endpoint = check_push_config(push_config)
        with self.cond:
            sub = self._sub(name)
            sub.config.push_config = _copy(push_config)
            sub.policy = replace(sub.policy, push_endpoint=endpoint)
            self.cond.notify_all()

    # -- delivery ---------------------------------------------------------
    def _advance(self, sub: SubState, now: float) -> None:
        expired, dead = sub.advance(now)
        self.stats.sub(sub.name, "expired", expired)
        for entry in dead:
            self._dead_letter(sub, entry)
        if expired:
            self.cond.notify_all()

    def _dead_letter(self, sub: SubState, entry: Entry) -> None:
        """Forward to the dead-letter topic as a new message with the service's attributes."""
        self.stats.sub(sub.name, "dead_lettered")
        target = sub.policy.dead_letter_topic or ""
        if target not in self._topics:
            _LOG.warning("dead-letter topic %s is gone; message %s is lost", target, entry.key)
            return
        extra = dead_letter_attributes(entry.failures, sub.name, entry.publish_ts)
        message = stamped(entry.message, str(next(self._ids)), self._now_ms(), extra)
        self._fan_out(target, message)
        self.cond.notify_all()

    def tick(self) -> None:
        """Expire leases and release backoffs everywhere (the background ticker)."""
        with self.cond:
            now = self.clock()
            for sub in list(self._subs.values()):
                self._advance(sub, now)

    def pull(
        self,
        name: str,
        max_messages: int,
        *,
        owner: str | None = None,
        max_outstanding: int = 0,
        ack_deadline: float | None = None,
        serial: int | None = None,
    ) -> list[Delivery]:
        """Lease what is available now (never blocks)."""
        if max_messages <= 0:
            raise InvalidArgument("max_messages must be a positive integer.")
        with self.cond:
            sub = self._sub(name, serial)
            now = self.clock()
            self._advance(sub, now)
            limit = max_messages
            if max_outstanding > 0:
                limit = min(limit, max_outstanding - sub.outstanding(owner))
            if limit <= 0:
                return []
            deadline = ack_deadline if ack_deadline is not None else sub.policy.ack_deadline
            out = sub.deliver(
                limit, now, deadline_s=deadline, owner=owner, duplicate=self.faults.should_duplicate
            )
            dups = sum(1 for d in out if d.duplicate)
            self.stats.sub(name, "delivered", len(out) - dups)
            self.stats.sub(name, "duplicated", dups)
            return out

    def _wait(self, subs: Sequence[SubState], remaining: float) -> None:
        now = self.clock()
        events = [t for t in (s.next_event() for s in subs) if t is not None]
        timeout = min([remaining, _MAX_WAIT_SLICE, *(max(t - now, 0.001) for t in events)])
        self.cond.wait(timeout)

    def wait_pull(
        self,
        name: str,
        max_messages: int,
        timeout: float,
        *,
        owner: str | None = None,
        max_outstanding: int = 0,
        ack_deadline: float | None = None,
        serial: int | None = None,
        stop: Callable[[], bool] = lambda: False,
    ) -> list[Delivery]:
        """Like pull, but wait up to `timeout` real seconds for something to arrive."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                out = self.pull(
                    name,
                    max_messages,
                    owner=owner,
                    max_outstanding=max_outstanding,
                    ack_deadline=ack_deadline,
                    serial=serial,
                )
                remaining = end - time.monotonic()
                if out or remaining <= 0 or self.closed or stop():
                    return out
                self._wait([self._sub(name, serial)], remaining)

    def next_push_batch(
        self, capacity: Callable[[str], int], timeout: float, *, grace_s: float = 2.0
    ) -> list[tuple[Delivery, float]]:
        """Lease messages of push subscriptions, up to capacity(name) each.

        Returns (delivery, http timeout) pairs. Leases last the ack deadline plus
        grace_s so the push's own timeout decides first.
        """
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                pushes = [s for s in self._subs.values() if s.policy.push_endpoint]
                batch: list[tuple[Delivery, float]] = []
                for sub in pushes:
                    room = capacity(sub.name)
                    if room > 0:
                        deadline = sub.policy.ack_deadline
                        for d in self.pull(
                            sub.name, room, owner="push", ack_deadline=deadline + grace_s
                        ):
                            batch.append((d, float(deadline)))
                remaining = end - time.monotonic()
                if batch or remaining <= 0 or self.closed:
                    return batch
                self._wait(pushes, remaining)

    def push_endpoint(self, name: str) -> str:
        """Current endpoint of a subscription ('' if pull or gone)."""
        with self.cond:
            sub = self._subs.get(name)
            return sub.policy.push_endpoint if sub is not None else ""

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> None:
        parse_subscription(name)
        _check_ack_ids(ack_ids)
        with self.cond:
            sub = self._sub(name)
            acked = sum(1 for a in ack_ids if sub.ack(a))
            self.stats.sub(name, "acked", acked)
            self.cond.notify_all()

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> None:
        """Extend leases; 0 is a nack (redelivery after the retry policy's backoff)."""
        parse_subscription(name)
        check_ack_deadline(seconds, allow_zero=True)
        _check_ack_ids(ack_ids)
        with self.cond:
            sub = self._sub(name)
            now = self.clock()
            for ack_id in ack_ids:
                if seconds > 0:
                    sub.extend(ack_id, seconds, now)
                    continue
                nacked, dead = sub.nack(ack_id, now)
                self.stats.sub(name, "nacked", int(nacked))
                if dead is not None:
                    self._dead_letter(sub, dead)
            self.cond.notify_all()

    def snapshot(self) -> dict[str, Any]:
        """Counters + each subscription's current backlog + fault knobs (for /stats)."""
        with self.cond:
            backlogs = {name: sub.backlog() for name, sub in self._subs.items()}
        snap = self.stats.snapshot()
        for name, count in backlogs.items():
            snap["subscriptions"].setdefault(name, {})["backlog"] = count
        snap["faults"] = self.faults.snapshot()
        return snap

    def backlog(self, name: str) -> int:
        """Messages not yet acked (leased, delayed or ready)."""
        with self.cond:
            return self._sub(name).backlog()
