"""What handling one doorbell decided: the kinds, and the Outcome claim answers with."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class OutcomeKind(StrEnum):
    """What became of a delivery. BUSY asks for a redelivery, and so does an Outcome whose
    `redeliver` is set (a hand-back whose doorbell could not be rung); the rest are
    decided (ack)."""

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
    DEFERRED = "deferred"
    """This revision lacks the job's pipeline or version (rollout skew): left queued, no
    attempt spent, the push redelivered for a revision that has it (shared.resume)."""
    DISPATCHED = "dispatched"
    """Claimed, and its stages started on a Cloud Run job execution (the detail names
    it: shared.claim.dispatch); the execution's task runs and ends the job."""
    FENCED = "fenced"
    """A Cloud Run job's task found its claim adopted by another execution, claimed again
    or ended (shared.claim.task): it wrote nothing and exits."""
    REROUTED = "rerouted"
    """The job's pipeline runs in another pool (a rollout moved it): its doorbell was rung
    on that pool's topic, nothing run here (shared.features.pool_routing)."""
    PARKED = "parked"
    """A stage ended early to wait (a sleep, a waitpoint, its children): the job is
    waiting, its slot freed and no attempt spent (shared.features.waits)."""
    HANDED_BACK = "handed back"
    """The instance is shutting down: the job was queued again at no cost (or, not yet
    claimed, passed on) and its doorbell rung for a live instance."""


@dataclass
class Outcome:
    """What handle_delivery decided for one job (and the jobs it drained after it)."""

    job_id: str
    kind: OutcomeKind
    detail: str = ""
    owner: str | None = None
    attempt: int | None = None
    retry_after_s: float | None = None
    redeliver: bool = False
    """Answer so that Pub/Sub delivers this push again (the job is not settled)."""
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
        if self.redeliver:
            out["redeliver"] = True
        if self.drained:
            out["drained"] = [d.to_json() for d in self.drained]
        return out
