"""Long stages on Cloud Run jobs, over HTTP: a claim service with RECLAIM_RUNNER=job claims
and acks; the local Cloud Run jobs runner (reclaim/local/runjobs) runs each execution's task as a
process, which adopts the claim and runs the stages. Everything is arranged by state:
the task's adoption and first checkpoint, read from the record.

- a stage longer than claim's request timeout finishes exactly once on the runner;
- a task SIGTERMed (a platform event) hands the job back; a new execution finishes it;
- a task killed hard (SIGKILL) fails its execution, and the sweep rescues the job at
  once (long before the stale time);
- a second execution for the same claim is fenced: it exits 0 and writes nothing.
"""

from __future__ import annotations

import functools
import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, parse_at, submit_batch
from shared.job_queue import checkpoint_of
from shared.run_jobs import CLAIM_GENERATION_ENV, JOB_ID_ENV, short_name
from tests import polling

CLAIM_TIMEOUT_S = 5.0  # claim's request timeout, shortened: the long stage outlasts it
STALE_S = 60.0  # far beyond every test: only the execution's end may rescue a job early
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        claim_runner="job",
        max_instances=1,
        min_instances=1,
        concurrency=4,
        claim_timeout_seconds=CLAIM_TIMEOUT_S,
        stale_seconds=STALE_S,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=10.0,
        function_env={
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "RECLAIM_PIPELINE_MODULES": "tests.integration.long_pipelines",
        },
    ) as c:
        yield c


wait_for = functools.partial(polling.wait_for, interval=0.1)


def _call(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def execution(cloud: LocalCloud, name: str) -> dict[str, Any]:
    return _call(f"{cloud.endpoints['run_jobs']}/v2/{name}")


def events(record: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [e for e in record["history"] if e.get("event") == event]


def submit(cloud: LocalCloud, **payload: Any) -> str:
    bucket = cloud.config.topology.uploads_bucket
    _batch, (job_id,) = submit_batch(
        cloud.endpoints["jobs"], [{"pipeline": "long", "payload": {"bucket": bucket, **payload}}]
    )
    return job_id


def release(cloud: LocalCloud, job_id: str) -> None:
    """Let the job's hold stage end (the object it polls for)."""
    topology = cloud.config.topology
    bucket = wiring.storage_client(cloud.gcs_url, topology.project).bucket(topology.uploads_bucket)
    bucket.blob(f"release/{job_id}").upload_from_string(b"go")


def holding(watch: Watch, job_id: str, attempt: int) -> dict[str, Any] | None:
    """The record once `attempt`'s task adopted the claim with the first stage checkpointed
    (by attempt 1: the hold stage runs), else None."""
    record = watch.snapshot([job_id])[job_id]
    adopted = [e for e in events(record, "adopted") if e["attempt"] == attempt]
    if record["status"] == "running" and adopted and checkpoint_of(record)[0] >= 1:
        return record
    return None


def done(watch: Watch, job_id: str) -> dict[str, Any]:
    return wait_for(
        f"{job_id} done",
        lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "done" and r,
    )


def ended(cloud: LocalCloud, name: str) -> dict[str, Any]:
    return wait_for(
        f"{short_name(name)} completed",
        lambda: (e := execution(cloud, name)).get("completionTime") and e,
    )


def test_a_stage_longer_than_the_claim_timeout_finishes_once_on_the_jobs_runner(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    hold_s = CLAIM_TIMEOUT_S + 3
    job_id = submit(cloud, hold_s=hold_s)
    record = done(watch, job_id)
    counts = [len(events(record, e)) for e in ("claimed", "dispatched", "adopted", "done")]
    assert counts == [1, 1, 1, 1]
    (dispatched,) = events(record, "dispatched")
    (adopted,) = events(record, "adopted")
    assert adopted["execution"] == dispatched["execution"] == record["execution"]["name"]
    assert adopted["took_over_from"] == events(record, "claimed")[0]["owner"]  # the claim's
    assert record["owner"] == short_name(adopted["execution"]) and record["attempts"] == 1
    assert record["result"]["attempt"] == 1
    assert record["result"]["state"]["held"]["seconds"] >= hold_s > CLAIM_TIMEOUT_S
    run = ended(cloud, adopted["execution"])
    assert run["succeededCount"] == 1 and run["local"]["exit_code"] == 0
    # the claim acked at once: its push answered long before the stage ended
    assert parse_at(dispatched["at"]) < parse_at(adopted["at"]) < parse_at(record["updated_at"])


def test_a_sigtermed_task_hands_the_job_back_and_a_new_execution_finishes_it(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    job_id = submit(cloud)
    first = wait_for("the first task holding", lambda: holding(watch, job_id, 1))
    name = first["execution"]["name"]
    _call(f"{cloud.endpoints['run_jobs']}/admin/executions/{short_name(name)}/terminate", {})
    second = wait_for("a second task holding", lambda: holding(watch, job_id, 2))
    release(cloud, job_id)
    record = done(watch, job_id)
    (back,) = events(record, "handed back")
    assert (back["owner"], back["attempt"]) == (short_name(name), 1)
    assert record["attempts"] == 2 and record["max_attempts"] == MAX_ATTEMPTS + 1  # no cost
    assert record["handbacks"] == 1 and not events(record, "rescued")
    assert len(events(record, "done")) == 1
    # resumed from the checkpoint: the first stage ran once, in attempt 1
    assert record["result"]["state"]["first"] == 1
    assert record["result"]["state"]["held"]["attempt"] == 2 == record["result"]["attempt"]
    assert second["execution"]["name"] != name == events(record, "adopted")[0]["execution"]
    run = ended(cloud, name)  # the hand-back was the task's own ending: exit 0
    assert run["local"]["ending"] == "terminate" and run["local"]["exit_code"] == 0


def test_a_task_killed_hard_is_rescued_by_the_sweep_before_the_stale_time(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    job_id = submit(cloud)
    first = wait_for("the first task holding", lambda: holding(watch, job_id, 1))
    name = first["execution"]["name"]
    killed = datetime.now(UTC)
    _call(f"{cloud.endpoints['run_jobs']}/admin/executions/{short_name(name)}/kill", {})
    wait_for("a second task holding", lambda: holding(watch, job_id, 2))
    release(cloud, job_id)
    record = done(watch, job_id)
    (rescued,) = events(record, "rescued")
    assert (rescued["owner"], rescued["attempt"]) == (short_name(name), 1)
    assert "execution" in rescued["error"]["message"] and "failed" in rescued["error"]["message"]
    # the stale time had not passed since the task's last write: the execution's end told
    assert (parse_at(rescued["at"]) - killed).total_seconds() < STALE_S / 2
    assert record["attempts"] == 2 and record["rescues"] == 1
    assert len(events(record, "done")) == 1 and record["result"]["state"]["first"] == 1
    run = execution(cloud, name)
    assert run["failedCount"] == 1 and run["local"]["ending"] == "kill"


def test_a_duplicate_execution_for_the_same_claim_is_fenced_and_commits_nothing(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    job_id = submit(cloud)
    first = wait_for("the task holding", lambda: holding(watch, job_id, 1))
    job = first["execution"]["job"]
    claim = str(first["execution"]["claim_generation"])
    overrides = {JOB_ID_ENV: job_id, CLAIM_GENERATION_ENV: claim}
    env = [{"name": k, "value": v} for k, v in overrides.items()]
    op = _call(
        f"{cloud.endpoints['run_jobs']}/v2/{job}:run",
        {"overrides": {"containerOverrides": [{"env": env}]}},
    )
    duplicate = op["metadata"]["name"]
    run = ended(cloud, duplicate)
    assert run["succeededCount"] == 1 and run["local"]["exit_code"] == 0
    answer = json.loads(Path(run["local"]["log"]).read_text().strip().splitlines()[-1])
    assert answer["outcome"] == "fenced"
    release(cloud, job_id)
    record = done(watch, job_id)
    owners = {e.get("owner") for e in record["history"]}
    assert short_name(duplicate) not in owners and record["owner"] != short_name(duplicate)
    assert record["attempts"] == 1 and len(events(record, "done")) == 1
    assert record["execution"]["name"] == first["execution"]["name"]
    assert all(f"/{job_id}/1/" in o for o in record.get("outputs", []))
    assert cloud.dead_children() == {}
