"""Subscription settings and delivery policy of the service (pure).

The broker keeps a SubPolicy next to each subscription's stored config, so the
hot paths never re-read proto fields or re-apply defaults.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from google.pubsub_v1.types import pubsub

from reclaim.local.pubsub_emulator.errors import InvalidArgument, Unimplemented
from reclaim.local.pubsub_emulator.names import parse_topic

MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600
DEFAULT_ACK_DEADLINE = 10
DEFAULT_MIN_BACKOFF = 10.0
DEFAULT_MAX_BACKOFF = 600.0
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
DEFAULT_RETENTION = dt.timedelta(days=7)
# The service slows pushes to a failing endpoint (push backoff, 100 ms .. 60 s)
# even without a retry policy; without it a dead endpoint would be hammered.
PUSH_BACKOFF_MIN = 0.1
PUSH_BACKOFF_MAX = 60.0


PUSH_DOC = "https://cloud.google.com/pubsub/docs/push"
INITIAL_PUSH_WINDOW = 4
"""The service starts a push subscription with "a small single-digit window size"
(PUSH_DOC, delivery rate: the push window grows on each success, shrinks on failure)."""
LINGER_FACTOR = 3.0
LINGER_FLOOR_S = 2.0
"""A push outstanding longer than max(LINGER_FLOOR_S, LINGER_FACTOR x the typical
latency of acked pushes) stops counting against the window (see PushWindow)."""
LATENCY_WEIGHT = 0.2
"""Weight of the newest acked push in the typical latency (an exponential average)."""
WINDOW_MODES = ("adaptive", "fixed")


@dataclass(frozen=True)
class PushTicket:
    """What the window remembers about one push it let out."""

    epoch: int
    started: float


class PushWindow:
    """How many pushes of one subscription may be in flight (pure; the pusher locks it).

    Adaptive (the service's flow control, PUSH_DOC): it starts small
    (INITIAL_PUSH_WINDOW), grows by one per acked push up to `maximum` (so a fully
    used window doubles every round trip: the slow start), and halves on a failed
    push (a non-ack status, a refused connection, no answer within the ack
    deadline), never below one. Failures of pushes let out before the last
    halving do not halve it again: a burst of refusals from one overloaded moment
    is one signal, not twenty.

    A push counts against the window only while it is younger than `linger_after()`
    (max(2 s, 3x the typical acked latency)). A hung endpoint (a SIGSTOPped
    instance behind the front) holds its pushes until the ack deadline; without
    this they would fill a window narrowed by failures and starve every other
    delivery, which is how an earlier adaptive window failed the chaos test. Long
    but healthy pushes (claim holds one for its whole job) are not starved either:
    once they outlast the typical latency, new pushes go out beside them.

    Fixed: the window is always `maximum` and every outstanding push counts
    (the emulator's behaviour before flow control; --push-window fixed).
    """

    def __init__(
        self,
        maximum: int,
        initial: int = INITIAL_PUSH_WINDOW,
        *,
        adaptive: bool = True,
        linger_factor: float = LINGER_FACTOR,
        linger_floor_s: float = LINGER_FLOOR_S,
    ) -> None:
        self.maximum = max(maximum, 1)
        self.adaptive = adaptive
        self.size = min(max(initial, 1), self.maximum) if adaptive else self.maximum
        self.epoch = 0
        self.typical_s: float | None = None
        self.linger_factor = linger_factor
        self.linger_floor_s = linger_floor_s

    def linger_after(self) -> float | None:
        """Age past which a push stops counting (None: every push counts)."""
        if not self.adaptive:
            return None
        return max(self.linger_floor_s, self.linger_factor * (self.typical_s or 0.0))

    def counted(self, started: Iterable[float], now: float) -> int:
        """How many of the outstanding pushes (their start times) count now."""
        limit = self.linger_after()
        return sum(1 for t in started if limit is None or now - t < limit)

    def room(self, started: Iterable[float], now: float) -> int:
        """How many more pushes may start now."""
        return max(self.size - self.counted(started, now), 0)

    def ticket(self, now: float) -> PushTicket:
        return PushTicket(self.epoch, now)

    def acked(self, ticket: PushTicket, now: float) -> int:
        if self.adaptive:
            latency = max(0.0, now - ticket.started)
            if self.typical_s is None:
                self.typical_s = latency
            else:
                self.typical_s += LATENCY_WEIGHT * (latency - self.typical_s)
            self.size = min(self.size + 1, self.maximum)
        return self.size

    def failed(self, ticket: PushTicket, now: float) -> int:
        if self.adaptive and ticket.epoch == self.epoch:
            self.size = max(self.size // 2, 1)
            self.epoch += 1
        return self.size


@dataclass(frozen=True)
class SubPolicy:
    """The delivery-relevant settings of one subscription, defaults applied."""

    ack_deadline: int = DEFAULT_ACK_DEADLINE
    retry: tuple[float, float] | None = None  # (minimum, maximum) backoff seconds
    dead_letter_topic: str | None = None
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    push_endpoint: str = ""


def check_ack_deadline(seconds: int, *, allow_zero: bool = False) -> int:
    """Ack deadlines are 10..600 s; ModifyAckDeadline also takes 0 (a nack)."""
    if allow_zero and 0 <= seconds <= MAX_ACK_DEADLINE:
        return seconds
    if not MIN_ACK_DEADLINE <= seconds <= MAX_ACK_DEADLINE:
        low = 0 if allow_zero else MIN_ACK_DEADLINE
        raise InvalidArgument(
            f"Invalid ack deadline given: {seconds}. It must be between {low} and "
            f"{MAX_ACK_DEADLINE} seconds."
        )
    return seconds


def _seconds(value: dt.timedelta) -> float:
    return value.total_seconds()


def _retry(sub: pubsub.Subscription) -> tuple[float, float] | None:
    if "retry_policy" not in sub:
        return None
    rp = sub.retry_policy
    low = _seconds(rp.minimum_backoff) if "minimum_backoff" in rp else DEFAULT_MIN_BACKOFF
    high = _seconds(rp.maximum_backoff) if "maximum_backoff" in rp else DEFAULT_MAX_BACKOFF
    for value in (low, high):
        if not 0 <= value <= MAX_ACK_DEADLINE:
            raise InvalidArgument(f"Invalid retry_policy backoff {value}s: must be 0..600 s.")
    if low > high:
        raise InvalidArgument("retry_policy minimum_backoff must not exceed maximum_backoff.")
    return (low, high)


def _dead_letter(sub: pubsub.Subscription) -> tuple[str | None, int]:
    if "dead_letter_policy" not in sub or not sub.dead_letter_policy.dead_letter_topic:
        return None, DEFAULT_MAX_DELIVERY_ATTEMPTS
    dlp = sub.dead_letter_policy
    parse_topic(dlp.dead_letter_topic)
    attempts = dlp.max_delivery_attempts or DEFAULT_MAX_DELIVERY_ATTEMPTS
    if not 5 <= attempts <= 100:
        raise InvalidArgument(
            f"Invalid max_delivery_attempts {attempts}: must be between 5 and 100."
        )
    return dlp.dead_letter_topic, attempts


def check_push_config(config: pubsub.PushConfig) -> str:
    """The push endpoint ('' = pull), or an error for what is unsupported."""
    if pubsub.PushConfig.pb(config).WhichOneof("wrapper") == "no_wrapper":
        raise Unimplemented("push_config.no_wrapper is not supported by this emulator.")
    endpoint = config.push_endpoint
    if endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgument(f"Invalid push_endpoint given: {endpoint!r}.")
    return str(endpoint)


def _reject_unsupported(sub: pubsub.Subscription) -> None:
    if sub.filter:
        raise Unimplemented("Subscription filters are not supported by this emulator.")
    if sub.enable_exactly_once_delivery:
        raise Unimplemented("Exactly-once delivery is not supported by this emulator.")
    for field in ("bigquery_config", "cloud_storage_config", "bigtable_config"):
        if field in sub:
            raise Unimplemented(f"{field} subscriptions are not supported by this emulator.")
    if sub.message_transforms:
        raise Unimplemented("message_transforms are not supported by this emulator.")


def policy_of(sub: pubsub.Subscription) -> SubPolicy:
    """Validate a subscription's settings the way the service does; defaults applied."""
    _reject_unsupported(sub)
    deadline = sub.ack_deadline_seconds or DEFAULT_ACK_DEADLINE
    check_ack_deadline(deadline)
    dead_letter_topic, attempts = _dead_letter(sub)
    return SubPolicy(
        ack_deadline=deadline,
        retry=_retry(sub),
        dead_letter_topic=dead_letter_topic,
        max_delivery_attempts=attempts,
        push_endpoint=check_push_config(sub.push_config),
    )


def apply_defaults(sub: pubsub.Subscription, policy: SubPolicy) -> None:
    """Fill in what the service reports back for unset fields."""
    sub.ack_deadline_seconds = policy.ack_deadline
    if "message_retention_duration" not in sub:
        sub.message_retention_duration = DEFAULT_RETENTION
    if policy.dead_letter_topic:
        sub.dead_letter_policy.max_delivery_attempts = policy.max_delivery_attempts
    if policy.retry:
        sub.retry_policy.minimum_backoff = dt.timedelta(seconds=policy.retry[0])
        sub.retry_policy.maximum_backoff = dt.timedelta(seconds=policy.retry[1])
    sub.state = pubsub.Subscription.State(pubsub.Subscription.State.ACTIVE)


def redelivery_delay(failures: int, policy: SubPolicy) -> float:
    """Seconds before a nacked or expired message is offered again.

    Exponential between the retry policy's bounds; with no retry policy the
    service redelivers at once (pull) or applies its push backoff (push).
    """
    exponent = max(failures - 1, 0)
    if policy.retry is not None:
        low, high = policy.retry
        return float(min(high, low * 2.0**exponent))
    if policy.push_endpoint:
        return float(min(PUSH_BACKOFF_MAX, PUSH_BACKOFF_MIN * 2.0**exponent))
    return 0.0


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def rfc3339_z(ts: float) -> str:
    """Push envelope publishTime: 2021-02-26T19:13:55.749Z."""
    return _utc(ts).strftime("%Y-%m-%dT%H:%M:%S.") + f"{_utc(ts).microsecond // 1000:03d}Z"


def dead_letter_time(ts: float) -> str:
    """CloudPubSubDeadLetterSourceTopicPublishTime: 2022-08-12T15:56:29.732+00:00."""
    return _utc(ts).strftime("%Y-%m-%dT%H:%M:%S.") + f"{_utc(ts).microsecond // 1000:03d}+00:00"
