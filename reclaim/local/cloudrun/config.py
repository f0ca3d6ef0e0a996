"""One service's settings, and the numbers Cloud Run documents for them (pure).

Each constant names the page it comes from; the platform reads nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

AUTOSCALING_DOC = "https://cloud.google.com/run/docs/about-instance-autoscaling"
CONCURRENCY_DOC = "https://cloud.google.com/run/docs/about-concurrency"
CONTRACT_DOC = "https://cloud.google.com/run/docs/container-contract#instance-shutdown"
TIMEOUT_DOC = "https://cloud.google.com/run/docs/configuring/request-timeout"
BILLING_DOC = "https://cloud.google.com/run/docs/configuring/billing-settings"
PRICING_DOC = "https://cloud.google.com/run/pricing"
TROUBLESHOOTING_DOC = "https://cloud.google.com/run/docs/troubleshooting"

TARGET_CONCURRENCY_UTILIZATION = 0.6
"""The autoscaler keeps instances at 60% of their maximum concurrency (AUTOSCALING_DOC)."""

MIN_PENDING_S = 10.0
PENDING_STARTUP_FACTOR = 3.5
"""At max instances a request pends for up to 3.5x the service's average start-up
time, or 10 s, whichever is greater, then fails with 429 (AUTOSCALING_DOC)."""

SHUTDOWN_GRACE_S = 10.0
"""SIGTERM, then SIGKILL 10 s later if the instance has not exited (CONTRACT_DOC)."""

IDLE_TIMEOUT_S = 900.0
"""Cloud Run may keep an idle instance up to 15 minutes before it shuts it down
(AUTOSCALING_DOC, "extra instances are shut down after 15 minutes of idle"); the
local cloud uses far shorter periods so scale-in happens within a test."""

BILLING_INCREMENT_S = 0.1
"""Request-based billing: billable instance time is rounded up to the nearest
100 ms (PRICING_DOC); an instance bills while it starts, serves at least one
request, and shuts down (BILLING_DOC)."""

MAX_CONCURRENCY = 1000
MAX_TIMEOUT_S = 3600.0
"""A service's request timeout is at most 60 minutes (TIMEOUT_DOC)."""

NO_INSTANCE_TEXT = "The request was aborted because there was no available instance."
"""What Cloud Run says when a request pended without finding an instance (HTTP 429;
TROUBLESHOOTING_DOC and https://cloud.google.com/run/docs/known-issues)."""

TIMEOUT_TEXT = "upstream request timeout"
"""Body of the platform's 504 (the status is documented in TIMEOUT_DOC; the body
wording is this emulation's)."""

INSTANCE_LOST_TEXT = "The request failed because the instance stopped before it answered."
"""Body of the platform's 503 when an instance dies mid-request (this emulation's words)."""


class ConfigError(ValueError):
    """A service setting Cloud Run would refuse; the message names it."""


@dataclass(frozen=True)
class ServiceConfig:
    """The sizing of one Cloud Run service (a gen2 function), as terraform sets it."""

    name: str
    concurrency: int = 80
    """max_instance_request_concurrency: requests one instance gets at once (= THREADS)."""
    max_instances: int = 100
    min_instances: int = 0
    timeout_s: float = 300.0
    """The request timeout: the front answers 504 past it (the instance goes on)."""
    idle_timeout_s: float = IDLE_TIMEOUT_S
    """An instance with no request in flight for this long is shut down (scale-in)."""
    shutdown_grace_s: float = SHUTDOWN_GRACE_S
    pending_timeout_s: float | None = None
    """None: Cloud Run's rule (pending_timeout()); a number overrides it (tests)."""
    target_utilization: float = TARGET_CONCURRENCY_UTILIZATION
    start_timeout_s: float = 60.0
    """An instance that does not listen within this long counts as a failed start."""

    def validate(self) -> None:
        """Raise ConfigError for a value Cloud Run (or this emulation) cannot honour."""
        n = self.name
        if not n or "/" in n:
            raise ConfigError(f"service name {n!r} must be non-empty, without '/'")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"{n}: concurrency={self.concurrency} must be 1..{MAX_CONCURRENCY}")
        if self.max_instances < 1:
            raise ConfigError(f"{n}: max_instances={self.max_instances} must be >= 1")
        if not 0 <= self.min_instances <= self.max_instances:
            raise ConfigError(
                f"{n}: min_instances={self.min_instances} must be 0..max_instances "
                f"({self.max_instances})"
            )
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"{n}: timeout_s={self.timeout_s} must be within (0, 3600]")
        if self.idle_timeout_s < 0:
            raise ConfigError(f"{n}: idle_timeout_s={self.idle_timeout_s} must be >= 0")
        if self.shutdown_grace_s < 0:
            raise ConfigError(f"{n}: shutdown_grace_s={self.shutdown_grace_s} must be >= 0")
        if self.pending_timeout_s is not None and self.pending_timeout_s <= 0:
            raise ConfigError(f"{n}: pending_timeout_s={self.pending_timeout_s} must be > 0")
        if not 0 < self.target_utilization <= 1:
            raise ConfigError(
                f"{n}: target_utilization={self.target_utilization} must be within (0, 1]"
            )
        if self.start_timeout_s <= 0:
            raise ConfigError(f"{n}: start_timeout_s={self.start_timeout_s} must be > 0")

    def pending_timeout(self, average_startup_s: float | None) -> float:
        """How long a request may wait for a free instance before Cloud Run's 429."""
        if self.pending_timeout_s is not None:
            return self.pending_timeout_s
        return pending_timeout(average_startup_s)


def pending_timeout(average_startup_s: float | None) -> float:
    """max(10 s, 3.5 x the average start-up time) (AUTOSCALING_DOC)."""
    return max(MIN_PENDING_S, PENDING_STARTUP_FACTOR * (average_startup_s or 0.0))


def billed(seconds: float, increment: float = BILLING_INCREMENT_S) -> float:
    """A billable period rounded up to the billing increment (100 ms)."""
    if seconds <= 0:
        return 0.0
    steps = math.ceil(round(seconds / increment, 9))
    return round(steps * increment, 6)
