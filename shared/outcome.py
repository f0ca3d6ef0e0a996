"""What handling one doorbell decided: the kinds, and the Outcome claim answers with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Outcome kinds. Only "busy" asks for a redelivery; everything else is decided (ack).
BUSY = "busy"  # no free slot: answer 429
MISSING = "missing"  # no record (yet, or any more): ack
CORRUPT = "corrupt"  # unreadable record: ack, left for a person
SKIPPED = "skipped"  # not claimable: duplicate doorbell, running-and-fresh, finished, backing off
RECOVERED = "recovered"  # not claimable but stale: the watchdog acted (e.g. failed, exhausted)
RACED = "raced"  # another owner won the claim CAS
DONE = "done"
FAILED = "failed"
REQUEUED = "requeued"
LOST = "lost"  # we lost the job mid-run (re-claimed, rescued or cancelled): wrote nothing more


@dataclass
class Outcome:
    """What handle_delivery decided for one job (and the jobs it drained after it)."""

    job_id: str
    kind: str
    detail: str = ""
    owner: str | None = None
    attempt: int | None = None
    retry_after_s: float | None = None
    drained: list[Outcome] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return self.kind == BUSY

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "outcome": self.kind}
        for key in ("detail", "owner", "attempt", "retry_after_s"):
            value = getattr(self, key)
            if value not in (None, ""):
                out[key] = value
        if self.drained:
            out["drained"] = [d.to_json() for d in self.drained]
        return out
