"""Cloud Run jobs, the pure parts: the runner settings, the Admin API shapes, adoption by
CAS (a task on MemoryStore), and which execution the sweep watches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue, run_jobs
from shared.claim.dispatch import task_env
from shared.claim.task import TaskEnv, run_task
from shared.errors import ConfigError
from shared.features.executions import current_execution
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.storage import Stored
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, settings, submit

JOB = "projects/p/locations/r/jobs/heavy"
NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


# --- settings and shapes


def test_runner_settings_default_to_push_and_job_needs_a_job_name() -> None:
    assert run_jobs.RunSettings.from_env({}) == run_jobs.RunSettings()
    assert not run_jobs.RunSettings.from_env({}).on_jobs
    with pytest.raises(ConfigError, match="RECLAIM_RUN_JOB"):
        run_jobs.RunSettings.from_env({"RECLAIM_RUNNER": "job"})
    on = run_jobs.RunSettings.from_env(
        {"RECLAIM_RUNNER": "job", "RECLAIM_RUN_JOB": JOB, "RECLAIM_RUN_API": "http://h:1/"}
    )
    assert on.on_jobs and on.job == JOB and on.api == "http://h:1"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RECLAIM_RUNNER", "batch"),
        ("RECLAIM_RUN_JOB", "jobs/heavy"),
        ("RECLAIM_RUN_JOB", "projects/p/locations/r/jobs/Heavy"),
        ("RECLAIM_RUN_API", "run.googleapis.com"),
    ],
)
def test_a_bad_runner_setting_is_named(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        run_jobs.RunSettings.from_env({name: value})


def test_a_run_overrides_the_environment_of_one_container() -> None:
    body = run_jobs.run_request({"B": "2", "A": "1"})
    assert body == {
        "overrides": {
            "containerOverrides": [
                {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
            ]
        }
    }


def test_the_execution_is_read_from_the_operations_metadata() -> None:
    name = f"{JOB}/executions/heavy-x1"
    op = {"name": "projects/p/locations/r/operations/1", "metadata": {"name": name}}
    assert run_jobs.execution_of_operation(op) == name
    for bad in ({}, {"metadata": {"name": JOB}}, {"metadata": "x"}):
        with pytest.raises(run_jobs.RunJobsError):
            run_jobs.execution_of_operation(bad)
    assert run_jobs.short_name(name) == "heavy-x1"


@pytest.mark.parametrize(
    ("execution", "state"),
    [
        ({"runningCount": 1}, "running"),
        ({"completionTime": "t", "succeededCount": 1}, "succeeded"),
        ({"completionTime": "t", "failedCount": 1}, "failed"),
        ({"completionTime": "t", "cancelledCount": 1, "failedCount": 1}, "cancelled"),
        (
            {
                "completionTime": "t",
                "conditions": [{"type": "Completed", "state": "CONDITION_FAILED"}],
            },
            "failed",
        ),
    ],
)
def test_an_execution_is_running_until_it_completes(execution: dict[str, Any], state: str) -> None:
    assert run_jobs.execution_state(execution) == state


# --- adoption (a task on MemoryStore)


def claimed(store: MemoryStore, job_id: str, owner: str = "claim-1.1") -> Stored:
    stored = store.read(job_id)
    fields = job_queue.claim_fields(stored.record, owner, NOW)
    return store.update({**stored.record, **fields}, stored.generation)


def dispatched(store: MemoryStore, claim: Stored, execution: str) -> Stored:
    fields = job_queue.dispatched_fields(
        claim.record, NOW, job_name=JOB, execution=execution, claim_generation=claim.generation
    )
    return store.update({**claim.record, **fields}, claim.generation)


def task(claim: Stored, short: str) -> TaskEnv:
    env = {**task_env(claim), "CLOUD_RUN_EXECUTION": short}
    return TaskEnv.from_env(env, run_jobs.RunSettings(runner="job", job=JOB))


def ctx(store: MemoryStore) -> Any:
    return context(store, Bell(), settings(), lambda: NOW + timedelta(seconds=1))


def test_a_task_adopts_the_claim_untouched_since_and_runs_it_to_done() -> None:
    store = MemoryStore()
    job_id = submit(store, payload={"stages": 2})
    claim = claimed(store, job_id)
    outcome = run_task(ctx(store), task(claim, "heavy-a"))
    assert outcome.kind == OutcomeKind.DONE and outcome.owner == "heavy-a"
    job = store.read(job_id).record
    assert job["status"] == "done" and job["attempts"] == 1 and job["owner"] == "heavy-a"
    (adopted,) = [e for e in job["history"] if e["event"] == "adopted"]
    assert adopted["took_over_from"] == "claim-1.1" and adopted["attempt"] == 1
    assert job["execution"]["name"] == f"{JOB}/executions/heavy-a"
    assert job["execution"]["claim_generation"] == claim.generation


def test_a_task_adopts_a_claim_that_recorded_its_execution() -> None:
    store = MemoryStore()
    job_id = submit(store)
    claim = claimed(store, job_id)
    dispatched(store, claim, f"{JOB}/executions/heavy-a")
    assert run_task(ctx(store), task(claim, "heavy-a")).kind == OutcomeKind.DONE


def test_a_second_execution_for_the_same_claim_is_fenced_and_writes_nothing() -> None:
    store = MemoryStore()
    job_id = submit(store)
    claim = claimed(store, job_id)
    dispatched(store, claim, f"{JOB}/executions/heavy-a")
    first = task(claim, "heavy-a")
    stored = store.read(job_id)
    fields = job_queue.adopted_fields(
        stored.record,
        NOW,
        owner=first.owner,
        job_name=JOB,
        execution=first.execution,
        claim_generation=claim.generation,
    )
    adopted = store.update({**stored.record, **fields}, stored.generation)
    outcome = run_task(ctx(store), task(claim, "heavy-b"))
    assert outcome.kind == OutcomeKind.FENCED and "adopted this claim already" in outcome.detail
    assert store.read(job_id).generation == adopted.generation  # nothing written


def test_an_execution_of_an_older_claim_or_an_ended_job_is_fenced() -> None:
    store = MemoryStore()
    job_id = submit(store)
    old = claimed(store, job_id)
    requeue = job_queue.requeue_fields(old.record, NOW)
    back = store.update({**old.record, **requeue}, old.generation)
    assert run_task(ctx(store), task(old, "heavy-a")).kind == OutcomeKind.FENCED  # queued
    again = claimed(store, back.record["id"], owner="claim-2.1")
    assert again.generation != old.generation
    outcome = run_task(ctx(store), task(old, "heavy-a"))
    assert outcome.kind == OutcomeKind.FENCED and "claimed again" in outcome.detail
    assert store.read(job_id).generation == again.generation


def test_adoption_refusals_are_pure() -> None:
    running: dict[str, Any] = {"status": "running", "execution": None}
    assert job_queue.adoption_refused(running, 5, 5) is None
    assert job_queue.adoption_refused(running, 6, 5) == "the job was claimed again since"
    named = {**running, "execution": {"claim_generation": 5, "name": "e"}}
    assert job_queue.adoption_refused(named, 6, 5) is None
    taken = {**running, "execution": {"claim_generation": 5, "name": "e", "adopted_at": "t"}}
    assert "adopted" in str(job_queue.adoption_refused(taken, 7, 5))
    assert "queued" in str(job_queue.adoption_refused({"status": "queued"}, 5, 5))


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"RECLAIM_TASK_JOB_ID": "../x", "RECLAIM_TASK_CLAIM_GENERATION": "1"},
        {"RECLAIM_TASK_JOB_ID": "j", "RECLAIM_TASK_CLAIM_GENERATION": "0"},
        {"RECLAIM_TASK_JOB_ID": "j", "RECLAIM_TASK_CLAIM_GENERATION": "1"},  # no execution
    ],
)
def test_a_task_without_its_overrides_is_misconfigured(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        TaskEnv.from_env(env, run_jobs.RunSettings(runner="job", job=JOB))


# --- what the sweep watches


def test_the_sweep_watches_the_execution_of_the_current_attempt_only() -> None:
    store = MemoryStore()
    job_id = submit(store)
    claim = claimed(store, job_id)
    assert current_execution(claim) is None  # not dispatched: a push claim's
    name = f"{JOB}/executions/heavy-a"
    recorded = dispatched(store, claim, name)
    assert current_execution(recorded) == name
    requeue = job_queue.requeue_fields(recorded.record, NOW)
    back = store.update({**recorded.record, **requeue}, recorded.generation)
    assert current_execution(back) is None  # queued
    push = claimed(store, job_id, owner="claim-2.1")  # a push claim of attempt 2
    assert push.record["execution"]["name"] == name and current_execution(push) is None
