"""Request-based billing of one instance (pure; the caller passes the time).

With request-based billing (the default) an instance is billed while it starts,
while it serves at least one request, and while it shuts down
(https://cloud.google.com/run/docs/configuring/billing-settings); billable time is
rounded up to the nearest 100 ms (https://cloud.google.com/run/pricing). The meter
counts reasons to bill (start-up, each request in flight, shutdown): a billable
period runs while at least one holds, and each period is rounded up on its own.
A request the front cut at its deadline still bills until the instance answers it.
"""

from __future__ import annotations

from reclaim.local.cloudrun.config import BILLING_INCREMENT_S, billed


class Meter:
    """Billable periods of one instance; not thread-safe (the service's lock guards it)."""

    def __init__(self, increment: float = BILLING_INCREMENT_S) -> None:
        self.increment = increment
        self._holds = 0
        self._since: float | None = None
        self._billed = 0.0
        self._raw = 0.0
        self.periods = 0

    def hold(self, now: float) -> None:
        """A reason to bill begins (start-up, a request, shutdown)."""
        if self._holds == 0:
            self._since = now
        self._holds += 1

    def release(self, now: float) -> None:
        """A reason to bill ends; the period closes when none is left."""
        if self._holds <= 0:
            raise RuntimeError("release without hold")
        self._holds -= 1
        if self._holds == 0 and self._since is not None:
            spent = max(0.0, now - self._since)
            self._raw += spent
            self._billed += billed(spent, self.increment)
            self.periods += 1
            self._since = None

    @property
    def billing(self) -> bool:
        return self._holds > 0

    def billed_s(self, now: float) -> float:
        """Billed seconds so far, the open period counted as if it closed now."""
        total = self._billed
        if self._since is not None:
            total += billed(max(0.0, now - self._since), self.increment)
        return round(total, 6)

    def raw_s(self, now: float) -> float:
        """The same time unrounded (how much the rounding adds is the difference)."""
        total = self._raw
        if self._since is not None:
            total += max(0.0, now - self._since)
        return total
