"""Cloud Run jobs, the pure policy of issue 42: what a refused :run says, a hand-back
before any execution started (no attempt spent, due later, why), the bounds counted from
the first refusal or skew in a row, the task's own deadline below its task timeout, and a
GPU pool's region."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import pools, run_jobs
from shared.claim import dispatch
from shared.claim.task import SKEWED, TaskEnv, skewed_since
from shared.config import Settings

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _refused(status: int | None) -> run_jobs.RunJobsError:
    exc = run_jobs.RunJobsError("refused")
    if status is not None:
        exc.status = status  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (None, "transient"),  # no answer, a timeout
        (429, "transient"),  # the run quota, the project's running executions
        (500, "transient"),
        (503, "transient"),
        (403, "grant"),  # a grant still propagating
        (404, "grant"),  # a job the same apply just made
        (400, "permanent"),
        (409, "permanent"),
    ],
)
def test_what_a_refused_run_says(status: int | None, kind: str) -> None:
    assert run_jobs.refusal_kind(_refused(status)) == kind


def _running(**over: Any) -> dict[str, Any]:
    return {
        "id": "j",
        "status": "running",
        "attempts": 2,
        "owner": "o",
        "history": [{"at": "2026-12-06T11:00:00Z", "event": "claimed", "attempt": 2}],
        **over,
    }


def test_a_hand_back_before_an_execution_gives_the_attempt_back_and_is_due_later() -> None:
    fields = dispatch.held_back_fields(
        _running(), NOW, max_attempts=3, delay_s=5.0, why=f"{dispatch.RUN_REFUSED} (transient)"
    )
    assert fields["status"] == "queued" and fields["max_attempts"] == 4
    assert fields["handbacks"] == 1 and fields["owner"] is None
    due = (NOW + timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    entry = fields["history"][-1]
    assert entry["event"] == "handed back" and entry["reason"].startswith(dispatch.RUN_REFUSED)
    assert fields["not_before"] and entry["not_before"] == fields["not_before"]
    assert fields["not_before"][:19] == due[:19]


def _history(*entries: tuple[str, str, str]) -> dict[str, Any]:
    return {"history": [{"event": e, "reason": r, "at": a} for e, r, a in entries]}


def test_the_refusal_bound_counts_from_the_first_refusal_in_a_row() -> None:
    job = _history(
        ("adopted", "", "2026-12-06T10:00:00Z"),  # an execution started: the streak starts after
        ("handed back", f"{dispatch.RUN_REFUSED} (grant): 403", "2026-12-06T11:40:00Z"),
        ("claimed", "", "2026-12-06T11:41:00Z"),
        ("handed back", f"{dispatch.AT_BOUND} (2) executions already", "2026-12-06T11:42:00Z"),
        ("claimed", "", "2026-12-06T11:43:00Z"),
        ("handed back", f"{dispatch.RUN_REFUSED} (grant): 403", "2026-12-06T11:50:00Z"),
    )
    assert len(dispatch.held_back_streak(job)) == 3
    assert not dispatch.refused_too_long(job, NOW, bound_s=1500)  # 20 min < 25
    assert dispatch.refused_too_long(job, NOW, bound_s=1200)
    fresh = _history(("adopted", "", "2026-12-06T11:59:00Z"))
    assert dispatch.held_back_streak(fresh) == [] and not dispatch.refused_too_long(fresh, NOW, 0)


def test_the_skew_bound_counts_from_the_first_hand_back_to_a_newer_image() -> None:
    job = _history(
        ("handed back", "the instance is shutting down", "2026-12-06T09:00:00Z"),
        ("handed back", f"{SKEWED}: pipeline 'x'", "2026-12-06T11:00:00Z"),
        ("claimed", "", "2026-12-06T11:00:10Z"),
        ("dispatched", "", "2026-12-06T11:00:11Z"),
        ("adopted", "", "2026-12-06T11:00:20Z"),
        ("handed back", f"{SKEWED}: pipeline 'x'", "2026-12-06T11:30:00Z"),
    )
    first = skewed_since(job)
    assert first is not None and first.isoformat().startswith("2026-12-06T11:00:00")
    assert skewed_since(_history(("done", "", "2026-12-06T11:00:00Z"))) is None


def test_the_task_ends_its_attempt_before_its_task_timeout_and_takes_a_late_sigterm_for_it() -> (
    None
):
    run = run_jobs.RunSettings(runner="job", job="projects/p/locations/r/jobs/j")
    env = {
        "RECLAIM_TASK_JOB_ID": "j1",
        "RECLAIM_TASK_CLAIM_GENERATION": "7",
        "CLOUD_RUN_EXECUTION": "j-abc",
        "RECLAIM_TASK_TIMEOUT_SECONDS": "100",
        "RECLAIM_TASK_REVISION": "j-00003",
    }
    started = 1000.0
    task = TaskEnv.from_env(env, run, started=started)
    assert task.task.revision == "j-00003" and task.margin_s == 5.0  # 5 % of 100 s
    import shared.claim.task as task_module

    clock = {"now": started + 10}
    real = task_module.time.monotonic
    task_module.time.monotonic = lambda: clock["now"]  # type: ignore[assignment]
    try:
        assert task.remaining_s() == pytest.approx(85.0) and not task.at_timeout()
        clock["now"] = started + 91  # a SIGTERM in the last margin: the timeout's
        assert task.at_timeout()
        clock["now"] = started + 200
        assert task.limit_s() == 0.1 and task.at_timeout()
    finally:
        task_module.time.monotonic = real  # type: ignore[assignment]
    no_timeout = TaskEnv.from_env({**env, "RECLAIM_TASK_TIMEOUT_SECONDS": "0"}, run)
    assert no_timeout.limit_s() is None and not no_timeout.at_timeout()
    with pytest.raises(Exception, match="RECLAIM_TASK_PLACE"):
        TaskEnv.from_env({**env, "RECLAIM_TASK_PLACE": "nowhere@x"}, run)


def test_a_gpu_pool_is_refused_at_start_outside_the_gpu_regions(tmp_path: Any) -> None:
    path = tmp_path / "pools.json"
    path.write_text(
        '{"pools": {"gpu": {"pipelines": ["r"], "runner": "job", '
        '"job": {"gpu": {"type": "nvidia-l4"}}}}}'
    )
    settings = Settings.from_env({"RECLAIM_POOLS_FILE": str(path), "RECLAIM_POOL": "gpu"})
    east = run_jobs.RunSettings(runner="job", job="projects/p/locations/us-east1/jobs/j")
    central = run_jobs.RunSettings(runner="job", job="projects/p/locations/us-central1/jobs/j")
    problem = run_jobs.gpu_region_problem(settings, east)
    assert problem is not None and "us-east1" in problem and "us-central1" in problem
    assert run_jobs.gpu_region_problem(settings, central) is None
    local = run_jobs.RunSettings(
        runner="job", job="projects/p/locations/local/jobs/j", api="http://127.0.0.1:1"
    )
    assert run_jobs.gpu_region_problem(settings, local) is None  # the local runner
    assert "us-central1" in pools.GPU_REGIONS
