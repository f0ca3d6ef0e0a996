"""A backlog larger than one sweep run's read budget, on fake-gcs-server through the
official client: the lost doorbell of a job in it is rung within two runs wherever its
marker is in the index, and the queue gauges count the whole backlog every run.

The backlog's own doorbells are fresh (submitted after the lost one), so their markers
say their records need nothing yet (shared.sweep_plan): the run reads the lost job's
record alone. A ring walking the index in name order, 20 markers a run, would need up
to six runs.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import job_queue, sweep_plan
from shared.config import Settings
from shared.queue import Queue, parse_submission
from shared.stores.gcs import GcsStore
from tests.contract.contract_support import make_gcs_client
from tests.unit.unit_support import Bell

BACKLOG = 100
BUDGET = 20
STALE_S = 6.0
LOST = "zz-lost-doorbell"  # last in name order: deep in the backlog


@pytest.fixture
def queue(gcs_server: str) -> Iterator[tuple[Queue, Bell]]:
    """A queue on a bucket of its own (left to the server, which the session stops)."""
    client = make_gcs_client(gcs_server)
    bucket = client.create_bucket(f"backlog-{uuid.uuid4().hex[:12]}")
    settings = Settings.from_env(
        {}, records_bucket=bucket.name, stale_seconds=STALE_S, sweep_max_jobs=BUDGET
    )
    bell = Bell()
    yield Queue(GcsStore(bucket.name, client), bell, settings), bell


def _wait_until_it_may_need_the_sweep(q: Queue, job_id: str, timeout_s: float = 60.0) -> None:
    """Until the job's marker is old enough to be read and its record is stale."""
    quiet = sweep_plan.quiet_seconds(q.settings)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = datetime.now(UTC)
        entry = next(e for e in q.store.list_pending() if e.job_id == job_id)
        stale = job_queue.stale_action(q.read(job_id), now, STALE_S, 5, skew_s=1.0)
        if sweep_plan.may_need_action(entry, now, quiet) and stale == "requeue":
            return
        time.sleep(0.2)
    raise TimeoutError(f"{job_id} never looked stale")


def _gauge(out: str, pipeline: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return next(e for e in lines if e.get("metric") == "queue" and e["pipeline"] == pipeline)


def test_a_lost_doorbell_deep_in_a_backlog_is_rung_within_two_runs_and_gauges_count_all(
    queue: tuple[Queue, Bell], capsys: pytest.CaptureFixture[str]
) -> None:
    q, bell = queue
    q.submit(parse_submission({"jobs": [{"pipeline": "demo", "id": LOST}]}, q.settings))
    _wait_until_it_may_need_the_sweep(q, LOST)  # nobody answered its doorbell: lost
    jobs = [{"pipeline": "demo", "id": f"b{i:03d}"} for i in range(BACKLOG)]
    q.submit(parse_submission({"jobs": jobs}, q.settings))  # their doorbells are on the way
    bell.rung.clear()
    capsys.readouterr()
    runs = 0
    while LOST not in bell.rung and runs < 2:
        result = q.sweep_once()
        runs += 1
        # only the lost job may need action: the fresh backlog is counted, not read
        assert (result.listed, result.examined) == (BACKLOG + 1, 1)
        assert result.unread == BACKLOG and result.truncated
        gauge = _gauge(capsys.readouterr().out, "demo")
        assert gauge["queued"] + gauge["running"] == BACKLOG + 1  # the whole backlog
        assert gauge["unread"] == BACKLOG
    assert LOST in bell.rung, f"not rung after {runs} sweep runs"
    assert q.read(LOST)["status"] == "queued"  # re-rung, still the queue's
