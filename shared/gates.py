"""Checks between "claimable" and the claim's compare-and-swap.

The policy (shared.job_queue) says whether a job may be claimed at all. A gate may still
hold a due job back without burning an attempt (a paused pipeline, a concurrency key at its
limit, a rate over its window) or end it without running (expired). Gates run in the claim
function only, in order; the first that decides answers the delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.clock import Clock
    from shared.config import Settings
    from shared.doorbell import Ringer
    from shared.outcome import Outcome
    from shared.storage import Store, Stored


@dataclass(frozen=True)
class GateContext:
    """What a gate may look at: the job as read (with the generation that fences it)."""

    store: Store
    doorbell: Ringer
    settings: Settings
    stored: Stored
    now: datetime
    clock: Clock


Gate = Callable[[GateContext], "Outcome | None"]
"""None lets the claim go on; an Outcome answers the delivery instead (the gate has done
whatever it needed: parked, deferred, ended the job)."""

GATES: tuple[Gate, ...] | None = None
"""The features' gates in the order they run, installed by shared.lifecycle."""


def check(ctx: GateContext) -> Outcome | None:
    """The first gate's decision, or None when every gate lets the claim go on."""
    if GATES is None:
        raise RuntimeError("shared.lifecycle was not imported: the features' gates are missing")
    for gate in GATES:
        decided = gate(ctx)
        if decided is not None:
            return decided
    return None
