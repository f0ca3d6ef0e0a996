"""Long stages on Cloud Run jobs, over HTTP: a claim service with RECLAIM_RUNNER=job claims
and acks; the local Cloud Run jobs runner (reclaim/local/runjobs) runs each execution's task as a
process, which adopts the claim and runs the stages. Everything is arranged by state:
the task's adoption and first checkpoint, read from the record.

- a stage longer than claim's request timeout finishes exactly once on the runner;
- a task SIGTERMed (a platform event) hands the job back; a new execution finishes it;
- a task killed hard (SIGKILL) fails its execution, and the sweep rescues the job at
  once (long before the stale time);
- a second execution for the same claim is fenced: it exits 0 and writes nothing;

and, on job pools of the tests' pools file, what Cloud Run does that the runner did not
do before (issue 42's audit, docs/long-stages.md):

- a burst past a pool's execution bound, and past the project's running executions
  (a :run refused with 429), all finish, no attempt spent on either (F4);
- a task of an older image hands a job of newer code back at no cost (F6);
- a task whose environment lacks its pool's settings heartbeats by its pool's stale time
  all the same (F7);
- an execution slower to start than its pool's stale time is not rescued (F9);
- a maintenance event pauses a CPU task, which runs on (F10);
- a cancel stops the job's execution (F11);
- a stage longer than its pool's task timeout fails its attempts, never handed back (issue
  41, item 10: the local runner applies each pool's task timeout).
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
from shared.claim.dispatch import AT_BOUND, RUN_REFUSED
from shared.claim.task import SKEWED
from shared.job_queue import checkpoint_of
from shared.run_jobs import CLAIM_GENERATION_ENV, JOB_ID_ENV, short_name
from tests import polling

CLAIM_TIMEOUT_S = 5.0  # claim's request timeout, shortened: the long stage outlasts it
STALE_S = 60.0  # far beyond every test: only the execution's end may rescue a job early
MAX_ATTEMPTS = 3
POOL_STALE_S = 4.0  # the job pools' own: short, so a wrong heartbeat is seen at once
BOUND = 2
TASK_TIMEOUT_S = 8
LONG = "tests.integration.long_pipelines"
NEWER = "tests.integration.newer_pipelines"


def _pool(pipeline: str, **fields: Any) -> dict[str, Any]:
    return {
        "pipelines": [pipeline],
        "runner": "job",
        "max_instances": 1,
        "stale_seconds": POOL_STALE_S,
        **fields,
    }


POOLS = {
    "pools": {
        "bounded": _pool("bounded", stale_seconds=6, job={"max_executions": BOUND}),
        "timed": _pool("timed", stale_seconds=6, job={"task_timeout_seconds": TASK_TIMEOUT_S}),
        "slow": _pool("slow", job={"start_grace_seconds": 120}),
        "stale": _pool("stale"),
        "skew": _pool("newer", stale_seconds=6),
    }
}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    pools_file = tmp_path_factory.mktemp("pools") / "pools.json"
    pools_file.write_text(json.dumps(POOLS))
    with LocalCloud.for_tests(
        claim_runner="job",
        pools_file=pools_file,
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
            "RECLAIM_BACKOFF_BASE_SECONDS": "0.5",
            "RECLAIM_BACKOFF_MAX_SECONDS": "2",
            "RECLAIM_PIPELINE_MODULES": LONG,
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


def submit(cloud: LocalCloud, pipeline: str = "long", **payload: Any) -> str:
    bucket = cloud.config.topology.uploads_bucket
    _batch, (job_id,) = submit_batch(
        cloud.endpoints["jobs"],
        [{"pipeline": pipeline, "payload": {"bucket": bucket, **payload}}],
    )
    return job_id


def runjobs(cloud: LocalCloud, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """A call to the local jobs runner's admin API (GET without a body)."""
    return _call(f"{cloud.endpoints['run_jobs']}{path}", body)


def task_job(pool: str) -> str:
    return f"reclaim-{pool}-task"


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


# --------------------------------------------------------------------------- job pools


def history(record: dict[str, Any], event: str, reason: str = "") -> list[dict[str, Any]]:
    return [e for e in events(record, event) if str(e.get("reason") or "").startswith(reason)]


def no_cost(record: dict[str, Any]) -> None:
    """Every hand-back gave its attempt back, and nothing else ended an attempt (a
    requeue without an error is the sweep's re-ring of a queued job: no attempt)."""
    handbacks = record.get("handbacks", 0)
    assert (record.get("max_attempts") or MAX_ATTEMPTS) == MAX_ATTEMPTS + handbacks
    assert record["attempts"] == handbacks + 1
    assert not events(record, "failed") and not events(record, "rescued")
    assert not [e for e in events(record, "requeued") if e.get("error")]


def quotas(cloud: LocalCloud, **values: Any) -> None:
    runjobs(cloud, "/admin/quotas", values)


def running(cloud: LocalCloud, job: str) -> list[dict[str, Any]]:
    stats = runjobs(cloud, "/admin/stats")
    return [e for e in stats["executions"] if e["job"] == job and "completionTime" not in e]


def test_a_burst_past_the_pools_execution_bound_all_finish_none_failed_for_a_refused_run(
    cloud: LocalCloud,
) -> None:
    """F4: a job pool runs at most its max_executions; the excess waits queued, handed back
    at no cost; a :run Cloud Run refuses (429: the project's running executions) costs no
    attempt either. Every job of the burst finishes."""
    watch = Watch(cloud)
    bucket = cloud.config.topology.uploads_bucket
    _batch, ids = submit_batch(
        cloud.endpoints["jobs"],
        [{"pipeline": "bounded", "payload": {"bucket": bucket}} for _ in range(2 * BOUND)],
    )

    def at_bound() -> list[str] | None:
        records = watch.snapshot(ids)
        holders = [i for i in ids if holding(watch, i, records[i]["attempts"])]
        waiting = [i for i in ids if history(records[i], "handed back", AT_BOUND)]
        return holders if len(holders) == BOUND and waiting else None

    holders = wait_for("the bound's executions holding, the others waiting", at_bound)
    assert len(running(cloud, task_job("bounded"))) <= BOUND
    quotas(cloud, max_running=1)  # the project's quota, now below the pool's bound
    try:
        release(cloud, holders[0])  # a place frees; the next :run meets the quota
        wait_for(
            "a :run refused with 429",
            lambda: any(
                "429" in str(e.get("reason"))
                for r in watch.snapshot(ids).values()
                for e in history(r, "handed back", RUN_REFUSED)
            ),
        )
    finally:
        quotas(cloud, max_running=1000)
    for job_id in ids:
        release(cloud, job_id)
    records = [done(watch, job_id) for job_id in ids]
    for record in records:
        no_cost(record)
        assert len(events(record, "done")) == 1
    assert sum(r.get("handbacks", 0) for r in records) >= 2


def test_a_task_of_an_older_image_hands_a_newer_job_back_at_no_cost(cloud: LocalCloud) -> None:
    """F6: during a deploy the pool's claim knows a pipeline the job's image does not yet;
    the task hands the job back, at no cost, until an execution of the new image runs it
    (as a push claim defers a job its revision lacks)."""
    watch = Watch(cloud)
    for service in ("submit", "claim-skew"):
        revision = cloud.deploy_revision(service, pipeline_modules=[LONG, NEWER])
        wait_for(
            f"{service} serving {revision}",
            lambda s=service, r=revision: cloud.revisions(s)["serving"] == r,
        )
    job_id = submit(cloud, "newer")
    skewed = wait_for(
        "a hand-back to the newer image",
        lambda: history(watch.snapshot([job_id])[job_id], "handed back", SKEWED),
    )
    assert "newer" in skewed[0]["reason"]
    runjobs(
        cloud,
        f"/admin/jobs/{task_job('skew')}",
        {"env": {"RECLAIM_PIPELINE_MODULES": f"{LONG},{NEWER}"}},  # the new image
    )
    wait_for(
        "the new image holding",
        lambda: holding(watch, job_id, watch.snapshot([job_id])[job_id]["attempts"]),
    )
    release(cloud, job_id)
    record = done(watch, job_id)
    no_cost(record)
    last = events(record, "adopted")[-1]
    assert runjobs(cloud, f"/v2/{last['execution']}")["local"]["revision"] == 2


def test_a_task_whose_environment_lacks_its_pool_still_heartbeats_by_its_pools_stale_time(
    cloud: LocalCloud,
) -> None:
    """F7: the job as terraform deployed it before the fix (claim's settings: no
    RECLAIM_POOL, the deployment's stale time, a heartbeat every 20 s); the task reads its
    pool from its job and heartbeats by the pool's 4 s: the sweep never takes it for dead."""
    watch = Watch(cloud)
    runjobs(
        cloud,
        f"/admin/jobs/{task_job('stale')}",
        {"env": {"RECLAIM_POOL": None, "RECLAIM_STALE_SECONDS": str(STALE_S)}},
    )
    job_id = submit(cloud, "stale", hold_s=4 * POOL_STALE_S)
    record = done(watch, job_id)
    assert len(events(record, "adopted")) == 1 and not events(record, "rescued")
    assert record["attempts"] == 1 and record["result"]["state"]["held"]["seconds"] > POOL_STALE_S


def test_a_task_slower_to_start_than_the_pools_stale_time_is_not_rescued(
    cloud: LocalCloud,
) -> None:
    """F9: nothing heartbeats before the task starts; the execution that has not started
    is judged by the pool's start grace (120 s here), not its stale time (4 s), so it is
    not rescued, dispatched again and fenced when it finally starts."""
    watch = Watch(cloud)
    runjobs(cloud, f"/admin/jobs/{task_job('slow')}", {"start_delay_s": 3 * POOL_STALE_S})
    job_id = submit(cloud, "slow", hold_s=0.2)
    record = done(watch, job_id)
    (dispatched,) = events(record, "dispatched")
    (adopted,) = events(record, "adopted")
    assert not events(record, "rescued") and record["attempts"] == 1
    # the premise: the start took longer than the pool's stale time
    slow = (parse_at(adopted["at"]) - parse_at(dispatched["at"])).total_seconds()
    assert slow > POOL_STALE_S
    run = ended(cloud, adopted["execution"])
    assert run["succeededCount"] == 1 and len(runjobs(cloud, "/admin/stats")["executions"]) > 0


def test_a_maintenance_pauses_a_cpu_task_which_runs_on(cloud: LocalCloud) -> None:
    """F10: Cloud Run live-migrates a CPU task (SIGTSTP, a pause, SIGCONT): the job is not
    handed back, the same execution finishes it."""
    watch = Watch(cloud)
    job_id = submit(cloud)
    first = wait_for("the task holding", lambda: holding(watch, job_id, 1))
    name = first["execution"]["name"]
    runjobs(cloud, f"/admin/executions/{short_name(name)}/maintenance", {"pause_s": 1.0})
    release(cloud, job_id)
    record = done(watch, job_id)
    assert not events(record, "handed back") and record["attempts"] == 1
    run = ended(cloud, name)
    assert run["succeededCount"] == 1 and run["local"]["maintenances"] == 1


def test_a_cancel_stops_the_jobs_execution(cloud: LocalCloud) -> None:
    """F11: a stage that never calls check() would bill until it ends; the cancel asks
    Cloud Run to cancel the execution (a terminal hook of the cancel's own write)."""
    watch = Watch(cloud)
    job_id = submit(cloud, sleep_s=300)
    first = wait_for("the task sleeping", lambda: holding(watch, job_id, 1))
    name = first["execution"]["name"]
    answer = _call(f"{cloud.endpoints['admin']}/jobs/{job_id}/cancel", {"reason": "not needed"})
    assert answer["status"] == "cancelled"
    run = ended(cloud, name)
    assert run["cancelledCount"] == 1 and run["local"]["ending"] == "cancel"
    assert watch.snapshot([job_id])[job_id]["status"] == "cancelled"


def test_a_stage_longer_than_its_task_timeout_fails_its_attempts_never_handed_back(
    cloud: LocalCloud,
) -> None:
    """Issue 41, item 10: the local runner gives each pool's job its own task timeout
    (not 600 s for all), and a stage longer than it is a failed attempt (timed out),
    retried with backoff and failed when out of attempts, never handed back at no cost."""
    job = runjobs(
        cloud,
        f"/v2/projects/{cloud.config.topology.project}/locations/local/jobs/{task_job('timed')}",
    )
    assert job["taskTimeout"] == f"{TASK_TIMEOUT_S}s"
    watch = Watch(cloud)
    job_id = submit(cloud, "timed")  # holds until released: never
    record = wait_for(
        f"{job_id} failed",
        lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "failed" and r,
        timeout=180,
    )
    assert record["error"]["type"] == "TimedOut", record["history"]
    assert record["attempts"] == MAX_ATTEMPTS, record["history"]
    assert not events(record, "handed back") and not record.get("handbacks")
    timed_out = [e for e in events(record, "requeued") if e.get("error")]
    assert [e["error"]["type"] for e in timed_out] == ["TimedOut"] * (MAX_ATTEMPTS - 1)
