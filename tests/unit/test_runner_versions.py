"""The runner's I/O around the resume decision (shared.claim.runner, shared.resume), through
the front door on the in-memory store: which stages run, what the record and history say."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from shared import records
from shared.claim.drain import DrainGate
from shared.claim.slots import Slots
from shared.config import Settings
from shared.jobs import JobStatus
from shared.outcome import Outcome
from shared.pipelines import Pipeline, StageContext, register
from shared.pipelines.base import stage_version
from shared.queue import Queue
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock

START = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)
NAME = "versions-under-test"
RAN: list[str] = []


def stage(name: str):  # type: ignore[no-untyped-def]
    def run(ctx: StageContext) -> None:
        RAN.append(name)
        ctx.state.setdefault("seen", []).append(name)
        ctx.result["seen"] = list(ctx.state["seen"])

    return (name, run)


def deploy(*names: str, previous: tuple[Pipeline, ...] = ()) -> Pipeline:
    """Register this revision's version of the pipeline (replacing the last one)."""
    return register(
        Pipeline(NAME, stages=[stage(n) for n in names], previous=previous), replace=True
    )


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[Queue]:
    monkeypatch.setenv("K_REVISION", "claim-00002-new")
    RAN.clear()
    settings = Settings.from_env(
        {}, stale_seconds=30.0, drain_max_jobs=0, min_write_interval_seconds=0.0
    )
    yield Queue(MemoryStore(), Bell(), settings, clock=Clock(START))


def mid_pipeline(
    queue: Queue, old: list[str], done: int, revision: str = "claim-00001-old"
) -> None:
    """A queued job of `old` handed back after `done` stages (as the old revision left it)."""
    record = records.new_record("j", NAME, {}, START)
    record.update(
        attempts=1,
        pipeline_version=stage_version(old),
        pipeline_revision=revision,
        checkpoint={
            "next_stage": done,
            "state": {"seen": old[:done]},
            "version": stage_version(old),
            "completed": old[:done],
        },
    )
    queue.store.create(record)
    queue.store.add_pending("j")


def deliver(queue: Queue) -> Outcome:
    return queue.handle_delivery("j", owner="me", slots=Slots(1), gate=DrainGate())


def test_an_inserted_stage_runs_and_no_completed_stage_runs_again(queue: Queue) -> None:
    mid_pipeline(queue, ["a", "b", "c"], 2)
    deploy("a", "b", "x", "c")
    assert deliver(queue).kind == "done"
    assert RAN == ["x", "c"]
    job = queue.store.read("j").record
    assert job["result"] == {"seen": ["a", "b", "x", "c"]}
    claimed = [e for e in job["history"] if e["event"] == "claimed"][-1]
    assert claimed["resume"] == "by name" and claimed["from_version"] == stage_version(
        ["a", "b", "c"]
    )
    assert job["pipeline_version"] == stage_version(["a", "b", "x", "c"])


def test_a_removed_stage_ends_the_job_unrun_and_a_retry_runs_it_from_the_start(
    queue: Queue,
) -> None:
    mid_pipeline(queue, ["a", "b", "c"], 2)
    deploy("a", "c")
    outcome = deliver(queue)
    assert outcome.kind == "failed" and RAN == []
    job = queue.store.read("j").record
    assert job["status"] == JobStatus.FAILED and job["attempts"] == 1  # no attempt spent
    assert job["error"]["type"] == "PipelineChanged"
    assert "retry the job" in job["error"]["message"]
    assert job["checkpoint"] == {"next_stage": 0, "state": {}}
    queue.retry("j", by="test")
    assert deliver(queue).kind == "done" and RAN == ["a", "c"]


def test_an_old_version_still_registered_finishes_its_jobs(queue: Queue) -> None:
    old = Pipeline(NAME, stages=[stage(n) for n in ("a", "b", "c")])
    mid_pipeline(queue, ["a", "b", "c"], 2)
    deploy("a", "c", previous=(old,))
    assert deliver(queue).kind == "done" and RAN == ["c"]
    claimed = [e for e in queue.store.read("j").record["history"] if e["event"] == "claimed"][-1]
    assert claimed["resume"] == "own version" and claimed["version"] == old.version_for({})


def test_a_job_stamped_by_a_newer_revision_is_handed_back_at_no_cost(queue: Queue) -> None:
    mid_pipeline(queue, ["a", "b", "c"], 2, revision="claim-00003-newer")
    deploy("a", "c")  # this revision (00002) has an older version of the pipeline
    outcome = deliver(queue)
    assert outcome.kind == "deferred" and outcome.redeliver and RAN == []
    job = queue.store.read("j").record
    assert job["status"] == JobStatus.QUEUED and job["attempts"] == 1
    assert job["history"][-1]["event"] == "deferred"
    assert deliver(queue).kind == "deferred"  # noted once: the bound counts from the first
    assert [e["event"] for e in queue.store.read("j").record["history"]].count("deferred") == 1


def test_checkpoints_carry_their_version_and_completed_names(queue: Queue) -> None:
    p = deploy("a", "b")
    queue.store.create(records.new_record("j", NAME, {}, START))
    queue.store.add_pending("j")
    assert deliver(queue).kind == "done"
    job = queue.store.read("j").record
    checkpoints = [e for e in job["history"] if e["event"] == "checkpoint"]
    assert checkpoints and all(e["version"] == p.version_for({}) for e in checkpoints)
    assert job["pipeline_revision"] == "claim-00002-new"
