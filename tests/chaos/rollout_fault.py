"""Rollouts as a chaos fault: a small state machine the storm steps once per loop, by state.

1. ``submit first``: submit's new revision learns a new pipeline (``fresh``) and a few
   ``fresh`` jobs are submitted while claim's serving revision does not know it (terraform
   updates submit and claim in no guaranteed order);
2. once claim has deferred every one of them (each history says ``deferred``), claim's
   next release is deployed: ``demo`` with one more stage (reclaim/local/demo_release.py) and
   ``fresh``, the old revision drained at once, so its busy instances get SIGTERM mid-job
   and their jobs resume on the new release by stage name;
3. once it serves, the fault is over (``done``).

``check(records)`` then holds the rollout to its promises: every ``fresh`` job done on its
first attempt (none spent while deferred), no job ended for its code (``PipelineChanged``,
``PipelineUnavailable``), and a demo job that ran the added stage completed each demo
stage once, in order.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reclaim.local.cloud import LocalCloud
from reclaim.local.demo import RELEASE_MODULE, RELEASE_STAGE
from reclaim.local.observe import Watch
from tests.integration.cloud_support import roll_out

FRESH_MODULE = "tests.integration.versioned_fresh"
FRESH_JOBS = 4
CODE_ERRORS = ("PipelineChanged", "PipelineUnavailable")


@dataclass
class RolloutFault:
    """One rollout of submit then claim, stepped by the storm; `fresh_ids` are the jobs it
    submitted (check them with the rest)."""

    modules: tuple[str, ...] = ()
    """The modules the deployment already loads (RECLAIM_PIPELINE_MODULES), kept."""
    state: str = "idle"
    fresh_ids: list[str] = field(default_factory=list)
    claim_revision: str | None = None

    def step(
        self, cloud: LocalCloud, watch: Watch, ready: Callable[[], bool] = lambda: True
    ) -> str | None:
        """Advance when the state allows; a line saying what happened, else None. Claim's
        deploy also waits for `ready` (the storm's own state: a job mid-pipeline, say)."""
        if self.state == "submit first" and not ready():
            return None
        act: dict[str, Callable[[LocalCloud, Watch], str | None]] = {
            "idle": self._submit_first,
            "submit first": self._claim_after,
            "claim deploying": self._serving,
        }
        return act[self.state](cloud, watch) if self.state in act else None

    @property
    def done(self) -> bool:
        return self.state == "done"

    def _submit_first(self, cloud: LocalCloud, watch: Watch) -> str | None:
        submit = cloud.revisions("submit")
        if submit["serving"] != submit["latest"]:
            return None
        self.state = "submit deploying"
        modules = [*self.modules, FRESH_MODULE]
        revision = roll_out(cloud, "submit", timeout=60, pipeline_modules=modules)
        self.fresh_ids = _submit(cloud.endpoints["jobs"], FRESH_JOBS)
        self.state = "submit first"
        return f"rollout: submit {revision} knows 'fresh' first; {FRESH_JOBS} jobs of it submitted"

    def _claim_after(self, cloud: LocalCloud, watch: Watch) -> str | None:
        records = watch.snapshot(self.fresh_ids)
        if not all(_deferred(r) for r in records.values()):
            return None
        modules = [*self.modules, RELEASE_MODULE, FRESH_MODULE]
        self.claim_revision = cloud.deploy_revision(
            "claim", pipeline_modules=modules, drain_timeout_seconds=0
        )
        self.state = "claim deploying"
        return (
            f"rollout: claim {self.claim_revision} (demo + {RELEASE_STAGE!r}, 'fresh') "
            "deployed, the old revision drained at once"
        )

    def _serving(self, cloud: LocalCloud, watch: Watch) -> str | None:
        if cloud.revisions("claim")["serving"] != self.claim_revision:
            return None
        self.state = "done"
        return f"rollout: claim {self.claim_revision} serving"


def check(records: Mapping[str, Mapping[str, Any]], fault: RolloutFault) -> list[str]:
    """What the rollout broke, one line each (empty: nothing)."""
    problems = []
    for job_id in fault.fresh_ids:
        rec = records.get(job_id) or {}
        if rec.get("status") != "done" or rec.get("attempts") != 1:
            problems.append(f"{job_id}: fresh job {rec.get('status')} after {rec.get('attempts')}")
    for job_id, rec in records.items():
        error = rec.get("error") or {}
        if rec.get("status") == "failed" and error.get("type") in CODE_ERRORS:
            problems.append(f"{job_id}: ended for its code: {error.get('message')}")
        result = rec.get("result") or {}
        if result.get("receipt"):
            stages = [c.get("stage") for c in result.get("completed") or []]
            if stages != sorted(set(stages)) or stages != list(range(len(stages))):
                problems.append(f"{job_id}: demo stages {stages} around the rollout")
    return problems


def _deferred(record: Mapping[str, Any]) -> bool:
    return any(e.get("event") == "deferred" for e in record.get("history") or [])


def _submit(url: str, n: int) -> list[str]:
    jobs = [{"pipeline": "fresh", "payload": {"name": f"n{i}"}} for i in range(n)]
    req = urllib.request.Request(
        url,
        data=json.dumps({"jobs": jobs}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return [str(j["id"]) for j in json.loads(resp.read())["jobs"]]
