"""A push request's time budget: how long a claim may go on working inside it.

Pub/Sub waits for a push's answer up to the subscription's ack deadline, then
counts the push failed and redelivers the message
(https://cloud.google.com/pubsub/docs/push); Cloud Run cuts the request at the
function's timeout, which terraform keeps at least as long. Cloud Run's advice
for work near a deadline is to "track the amount of time left during execution"
and return early (https://cloud.google.com/run/docs/configuring/request-timeout).

The push's own job always runs: it is what the push is for. Every job the drain
adds to the request must fit in what is left, so a drain never turns a push that
would have been answered in time into a redelivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PENDING_ALLOWANCE_S = 10.0
"""A push may have waited this long in Cloud Run's pending queue before the instance saw
it (at least 10 s, https://cloud.google.com/run/docs/about-instance-autoscaling); its
deadline started when Pub/Sub sent it, so the budget counts that wait as spent."""


class PushBudget:
    """The time left of one push request, on a monotonic clock started at its arrival."""

    def __init__(
        self,
        deadline_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        pending_allowance_s: float = PENDING_ALLOWANCE_S,
    ) -> None:
        self._clock = clock
        self._started = clock()
        self.deadline_s = deadline_s
        self.usable_s = max(0.0, deadline_s - pending_allowance_s)

    def elapsed(self) -> float:
        return self._clock() - self._started

    def remaining(self) -> float:
        """Seconds left before the push's deadline (pending allowance taken off)."""
        return self.usable_s - self.elapsed()

    def allows(self, seconds: float) -> bool:
        """Whether work that takes up to `seconds` still ends before the deadline."""
        return self.remaining() >= seconds


UNLIMITED = float("inf")
"""A budget for callers outside a push (tests, a CLI): nothing is refused for time."""


def unlimited() -> PushBudget:
    return PushBudget(UNLIMITED, pending_allowance_s=0.0)
