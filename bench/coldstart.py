"""The doorbell wait a cold start alone causes, on the local cloud: `python -m bench.coldstart`.

shared.claim.drain.BACKLOG_WAIT_S turns a doorbell that waited longer into a sign of a backlog;
a claim instance started from zero must not count as one. Each round waits until claim
has no instance (idle_timeout_seconds=1), submits one demo job and reads, from its
record, the seconds from its creation (the doorbell is published right after) to its
claim: publish, push, a new instance's process start, imports and the first client
calls. Prints the figures; no pass/fail (timing belongs here, not in a test).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import requests

from reclaim.local.cloud import LocalCloud

ROUNDS = 7


def _wait_for(what: str, fn: Callable[[], Any], timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := fn():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"gave up waiting for {what}")


def _claim_instances(cloud: LocalCloud) -> int:
    return len(cloud.service("claim").instances())


def _wait_s(cloud: LocalCloud) -> float:
    _wait_for("claim scaled to zero", lambda: _claim_instances(cloud) == 0, 60)
    resp = requests.post(cloud.endpoints["jobs"], json={"pipeline": "demo"}, timeout=30)
    assert resp.status_code == 202, resp.text
    url = f"{cloud.endpoints['submit']}/jobs/{resp.json()['id']}"

    def claimed() -> dict[str, Any] | None:
        view = requests.get(url, timeout=30).json()
        return view if any(e["event"] == "claimed" for e in view["history"]) else None

    view = _wait_for("the job claimed", claimed, 120)
    created = datetime.fromisoformat(view["created_at"])
    at = next(e["at"] for e in view["history"] if e["event"] == "claimed")
    return (datetime.fromisoformat(at) - created).total_seconds()


def main() -> int:
    waits = []
    with LocalCloud.for_tests(idle_timeout_seconds=1.0, min_instances=0) as cloud:
        for _ in range(ROUNDS):
            waits.append(_wait_s(cloud))
            time.sleep(0.5)
    waits.sort()
    print(
        f"cold-start doorbell wait over {ROUNDS} rounds (s): "
        + ", ".join(f"{w:.2f}" for w in waits)
    )
    print(f"median {statistics.median(waits):.2f} s, max {waits[-1]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
