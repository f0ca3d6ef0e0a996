"""Attempt timeouts: bound a stage even when it never calls check().

Python cannot stop a thread. So at the deadline a timer thread writes the attempt's end
itself, through the owner's own OwnedRecord (one generation-matched write, like the
hand-back on SIGTERM): requeued with a TimedOut error (retryable, with backoff) or failed
when no attempt is left. That write closes the owner's handle and moves the generation,
the fencing token: everything the late stage tries afterwards (checkpoint, outputs, the
final write) is refused, so the zombie commits nothing.

What it does not do: free the thread. The stage keeps its request thread and its slot
(shared.claim.slots) until it returns, which is honest accounting (it still burns the CPU);
the function's own request timeout is the outer bound. docs/time.md says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from shared.errors import ReclaimError


class TimedOut(ReclaimError):
    """The attempt ran past its timeout (the record's error type: "TimedOut")."""


class Deadline:
    """Calls `on_expiry` once, on a daemon thread, `seconds` after entering (None: never)."""

    def __init__(self, seconds: float | None, on_expiry: Callable[[], None]) -> None:
        self.seconds = seconds
        self._on_expiry = on_expiry
        self._timer: threading.Timer | None = None
        self.fired = False

    def __enter__(self) -> Deadline:
        if self.seconds is not None and self.seconds > 0:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        self.fired = True
        self._on_expiry()
