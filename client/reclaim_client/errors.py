"""Exceptions mapped from the API's refusals ({"error", "reason"}) and from the network."""

from __future__ import annotations

from typing import Any


class ReclaimError(Exception):
    """A refusal of the API: its HTTP status, short `error` and `reason` sentence."""

    def __init__(self, status: int, error: str, reason: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.body = body or {}


class InvalidRequest(ReclaimError):
    """400: a bad field, id, filter or token; nothing was written."""


class NotFound(ReclaimError):
    """404: no such job or batch."""


class Conflict(ReclaimError):
    """409 conflict: a job id already names a job with other content."""


class NotAllowed(ReclaimError):
    """409: the job's state does not allow this, or a bulk selection grew since its count."""


class Gone(ReclaimError):
    """410: the waitpoint's job ended or no longer exists (docs/waiting.md)."""


class RecordUnreadable(ReclaimError):
    """409: the job's record cannot be decoded; a person must repair it."""


class TooLarge(ReclaimError):
    """413: the body is over the deployment's limit."""


class Unavailable(ReclaimError):
    """503 (storage or Pub/Sub outage), or the connection kept dropping: retry later."""


class NoAdminUrl(ReclaimError):
    """An operator call (cancel, retry, count, confirm) on a Client made without admin_url:
    the admin function alone serves them (nothing was sent)."""


class WaitTimeout(ReclaimError):
    """wait() gave up before the job finished."""


_BY_STATUS: dict[int, type[ReclaimError]] = {
    400: InvalidRequest,
    404: NotFound,
    410: Gone,
    413: TooLarge,
    503: Unavailable,
}
_CONFLICTS: dict[str, type[ReclaimError]] = {
    "conflict": Conflict,
    "record unreadable": RecordUnreadable,
}


def from_answer(status: int, body: Any) -> ReclaimError:
    """The exception for a refused answer (any non-JSON answer keeps its status)."""
    shown = body if isinstance(body, dict) else {}
    error = str(shown.get("error") or "refused")
    reason = str(shown.get("reason") or f"HTTP {status}")
    if status == 409:
        kind = _CONFLICTS.get(error, NotAllowed)
    else:
        kind = _BY_STATUS.get(status, ReclaimError)
    return kind(status, error, reason, shown)
