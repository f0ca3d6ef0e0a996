"""What handling one doorbell decided: the kinds, and the Outcome claim answers with."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class OutcomeKind(StrEnum):
    """What became of a delivery. Only BUSY asks for a redelivery; the rest are decided (ack)."""

    BUSY = "busy"
    """No free slot: the claim function answers 429."""
    MISSING = "missing"
    """No record (yet, or any more)."""
    CORRUPT = "corrupt"
    """Unreadable record, left for a person."""
    SKIPPED = "skipped"
    """Not claimable: a duplicate doorbell, running-and-fresh, finished, backing off."""
    RECOVERED = "recovered"
    """Not claimable but stale: the watchdog acted (e.g. failed it, out of attempts)."""
    RACED = "raced"
    """Another owner won the claim's compare-and-swap."""
    DONE = "done"
    """Ran to the end; the record is done."""
    FAILED = "failed"
    """Failed for good (a permanent error, or out of attempts)."""
    REQUEUED = "requeued"
    """A stage failed and attempts are left: queued again, with backoff."""
    LOST = "lost"
    """This owner lost the job mid-run (re-claimed, rescued or cancelled): wrote nothing more."""


@dataclass
class Outcome:
    """What handle_delivery decided for one job (and the jobs it drained after it)."""

    job_id: str
    kind: OutcomeKind
    detail: str = ""
    owner: str | None = None
    attempt: int | None = None
    retry_after_s: float | None = None
    drained: list[Outcome] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return self.kind == OutcomeKind.BUSY

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "outcome": self.kind}
        for key in ("detail", "owner", "attempt", "retry_after_s"):
            value = getattr(self, key)
            if value not in (None, ""):
                out[key] = value
        if self.drained:
            out["drained"] = [d.to_json() for d in self.drained]
        return out
