"""The clock: injected wherever time decides something, so tests control it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware (UTC)."""


def utcnow() -> datetime:
    """The real clock."""
    return datetime.now(UTC)
