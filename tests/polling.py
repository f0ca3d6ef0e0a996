"""Waiting in tests: poll until something holds, with a deadline (never a timing claim)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 90, interval: float = 0.2) -> Any:
    """fn's first truthy value; AssertionError naming `what` once `timeout` has passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"never saw {what} within {timeout}s")
