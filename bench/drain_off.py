"""What the drain buys: bench/backlog.py's platform run (a 500-job batch through 2x4 slots,
pushes refused with 429 past Cloud Run's pending time, production backoffs) with the drain
off (RECLAIM_DRAIN_MAX_JOBS=0), so a refused job comes back only with Pub/Sub's
redelivery, 10 s or more later. Its own row, beside the ideal, and in LONG (make
bench-scale): a third 500-job run that the backlog row's target does not need.
"""

from __future__ import annotations

from typing import Any

from bench.backlog import CONCURRENCY, INSTANCES, JOBS, SLEEP_S, _variant
from bench.common import row


def run() -> dict[str, Any]:
    off = _variant(refuse=True, drain=False)
    took, ideal = off["first_doorbell_to_last_done_s"], off["ideal_s"]
    return {
        "raw": {"platform_drain_off": off},
        "rows": [
            row(
                f"{JOBS}-job batch with the drain off, {INSTANCES}x{CONCURRENCY} slots, "
                f"{SLEEP_S:g} s jobs, production backoffs",
                f"{took:.1f} s ({off['refused_429']} pushes refused, {off['done']}/{JOBS} done)",
                f"ideal {ideal:g} s (every slot busy throughout); the backlog row's platform "
                "run is the same batch with the drain on",
                f"{took / ideal:.2f}x the ideal",
                "- (what the drain buys)",
                None,
                "refused jobs come back only with Pub/Sub's redelivery, 10 s or more later. "
                "Pub/Sub's wide push window keeps Cloud Run's pending queue full, so the "
                "refusals cost mostly the tail; the drain matters most when the refused "
                "doorbells are all that is left (a small batch, the demo's rescue)",
            )
        ],
    }
