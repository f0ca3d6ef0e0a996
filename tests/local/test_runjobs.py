"""The local Cloud Run jobs runner over HTTP, through reclaim's own Admin API client: a
:run with overrides starts a process with them; the exit code, the task timeout, a
cancel, a platform event and a kill end it as Cloud Run would; bad input is refused in
Google's error shape and creates nothing. Tasks are tiny Python programs."""

from __future__ import annotations

import functools
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.runjobs import JobSpec, JobsRunner, RunJobsServer
from shared.run_jobs import RunJobs, RunJobsError, execution_state
from tests import polling

JOB = "projects/p/locations/local/jobs/tiny"
# prints its environment's RECLAIM_* and CLOUD_RUN_* as JSON, then does what MODE says
TASK = """
import json, os, signal, sys, time
mode = os.environ.get("MODE", "exit0")
if mode == "signals":
    signal.signal(signal.SIGTSTP, lambda *a: print("got TSTP", flush=True))
    signal.signal(signal.SIGCONT, lambda *a: print("got CONT", flush=True))
    mode = "sleep"
seen = {k: v for k, v in os.environ.items() if k.startswith(("RECLAIM_", "CLOUD_RUN_"))}
print(json.dumps(seen), flush=True)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda *a: print("term ignored", flush=True))
if mode == "exit3":
    sys.exit(3)
if mode in ("sleep", "ignore-term"):
    for _ in range(600):
        time.sleep(0.05)
"""

wait_for = functools.partial(polling.wait_for, interval=0.05, timeout=30)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[RunJobs, str]]:
    runner = JobsRunner(tmp_path)
    runner.add_job(
        JobSpec(
            JOB, (sys.executable, "-c", TASK), env={"MODE": "exit0"}, task_timeout_s=60, grace_s=0.5
        )
    )
    runner.add_job(
        JobSpec(
            JOB + "-short",
            (sys.executable, "-c", TASK),
            env={"MODE": "ignore-term"},
            task_timeout_s=1.0,
            grace_s=0.5,
        )
    )
    runner.add_job(
        JobSpec(
            JOB + "-gpu",
            (sys.executable, "-c", TASK),
            env={"MODE": "signals"},
            task_timeout_s=60,
            grace_s=0.5,
            gpu=True,
        )
    )
    server = RunJobsServer(runner, "127.0.0.1")
    server.start()
    try:
        yield RunJobs(server.url), server.url
    finally:
        server.stop()


def ended(client: RunJobs, name: str) -> dict[str, Any]:
    return wait_for(
        f"{name} completed", lambda: (e := client.execution(name)).get("completionTime") and e
    )


def printed_env(execution: dict[str, Any]) -> dict[str, str]:
    first = Path(execution["local"]["log"]).read_text().splitlines()[0]
    return dict(json.loads(first))


def test_a_run_with_overrides_starts_a_task_with_them_and_exit_0_succeeds(
    api: tuple[RunJobs, str],
) -> None:
    client, _ = api
    name = client.run(JOB, {"RECLAIM_TASK_JOB_ID": "j1", "RECLAIM_TASK_CLAIM_GENERATION": "7"})
    assert name.startswith(JOB + "/executions/tiny-")
    done = ended(client, name)
    assert execution_state(done) == "succeeded" and done["succeededCount"] == 1
    env = printed_env(done)
    assert env["RECLAIM_TASK_JOB_ID"] == "j1" and env["RECLAIM_TASK_CLAIM_GENERATION"] == "7"
    assert env["CLOUD_RUN_EXECUTION"] == name.rsplit("/", 1)[-1]
    assert env["CLOUD_RUN_JOB"] == "tiny" and env["CLOUD_RUN_TASK_COUNT"] == "1"
    listed = [e["name"] for e in client._call("GET", f"{JOB}/executions")["executions"]]
    assert listed == [name]


def test_a_nonzero_exit_fails_the_execution(api: tuple[RunJobs, str]) -> None:
    client, _ = api
    done = ended(client, client.run(JOB, {"MODE": "exit3"}))
    assert execution_state(done) == "failed" and done["local"]["exit_code"] == 3


def test_the_task_timeout_sends_sigterm_then_sigkill_after_the_grace(
    api: tuple[RunJobs, str],
) -> None:
    client, _ = api
    done = ended(client, client.run(JOB + "-short", {}))
    assert execution_state(done) == "failed" and done["local"]["ending"] == "timeout"
    assert done["local"]["exit_code"] == -9  # it ignored the SIGTERM
    assert "term ignored" in Path(done["local"]["log"]).read_text()


def test_a_cancel_stops_the_task_and_cancels_the_execution(api: tuple[RunJobs, str]) -> None:
    client, _ = api
    name = client.run(JOB, {"MODE": "sleep"})
    wait_for("the task running", lambda: client.execution(name)["runningCount"] == 1)
    client.cancel(name)
    done = ended(client, name)
    assert execution_state(done) == "cancelled" and done["cancelledCount"] == 1
    with pytest.raises(RunJobsError, match="409"):
        client.cancel(name)


@pytest.mark.parametrize(("action", "code"), [("terminate", -15), ("kill", -9)])
def test_the_admin_api_ends_a_task_by_a_platform_event_or_a_kill(
    api: tuple[RunJobs, str], action: str, code: int
) -> None:
    client, url = api
    name = client.run(JOB, {"MODE": "sleep"})
    wait_for("the task running", lambda: client.execution(name)["runningCount"] == 1)
    short = name.rsplit("/", 1)[-1]
    _post(f"{url}/admin/executions/{short}/{action}")
    done = ended(client, name)
    assert execution_state(done) == "failed" and done["local"]["exit_code"] == code
    assert done["local"]["ending"] == action


@pytest.mark.parametrize(
    "body",
    [
        {"overrides": {"taskCount": 2}},
        {"overrides": {"containerOverrides": [{"env": [{"name": 1}]}]}},
        {"overrides": {"containerOverrides": [{}, {}]}},
        {"overrides": {"nope": 1}},
        {"surprise": True},
    ],
)
def test_a_bad_run_is_refused_in_googles_shape_and_starts_nothing(
    api: tuple[RunJobs, str], body: dict[str, Any]
) -> None:
    client, url = api
    status, answer = _post(f"{url}/v2/{JOB}:run", body)
    assert status == 400 and answer["error"]["status"] == "INVALID_ARGUMENT"
    assert client._call("GET", f"{JOB}/executions")["executions"] == []


def test_unknown_jobs_executions_and_admin_paths_are_404(api: tuple[RunJobs, str]) -> None:
    client, url = api
    with pytest.raises(RunJobsError, match="404"):
        client.run(JOB + "-nope", {})
    with pytest.raises(RunJobsError, match="404"):
        client.execution(JOB + "/executions/none")
    status, answer = _post(f"{url}/admin/executions/none/kill")
    assert status == 404 and set(answer) == {"error", "reason"}
    status, answer = _post(f"{url}/admin/executions/none/explode")
    assert status == 404 and answer["error"] == "no such action"


def _post(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body or {}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _log(execution: dict[str, Any]) -> str:
    """The task's log so far: empty until the runner has started the task and made it."""
    log = Path(execution["local"]["log"])
    return log.read_text() if log.exists() else ""


def test_the_project_quota_of_running_executions_refuses_a_run_with_429(
    api: tuple[RunJobs, str],
) -> None:
    """F10 (and F4's test double): Cloud Run runs at most 1,000 executions per project and
    region; past the quota a :run answers 429 RESOURCE_EXHAUSTED and starts nothing."""
    client, url = api
    assert _post(f"{url}/admin/quotas", {"max_running": 1})[0] == 200
    first = client.run(JOB, {"MODE": "sleep"})
    status, answer = _post(f"{url}/v2/{JOB}:run", {})
    assert status == 429 and answer["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert [e["name"] for e in client._call("GET", f"{JOB}/executions")["executions"]] == [first]
    client.cancel(first)
    ended(client, first)
    assert execution_state(ended(client, client.run(JOB, {}))) == "succeeded"  # room again
    stats = _get(f"{url}/admin/stats")
    assert stats["refused"] == {"429": 1} and stats["quotas"]["max_running"] == 1


def test_the_run_request_quota_refuses_the_excess_of_a_minute(api: tuple[RunJobs, str]) -> None:
    client, url = api
    assert _post(f"{url}/admin/quotas", {"runs_per_minute": 2})[0] == 200
    client.run(JOB, {})
    client.run(JOB, {})
    with pytest.raises(RunJobsError, match="429") as err:
        client.run(JOB, {})
    assert getattr(err.value, "status", None) == 429
    assert _post(f"{url}/admin/quotas", {"runs_per_minute": "x"})[0] == 400


def test_a_run_without_the_grant_is_refused_with_403_until_it_is_granted(
    api: tuple[RunJobs, str],
) -> None:
    client, url = api
    status, job = _post(f"{url}/admin/jobs/tiny", {"granted": False})
    assert status == 200 and job["granted"] is False
    status, answer = _post(f"{url}/v2/{JOB}:run", {})
    assert status == 403 and answer["error"]["status"] == "PERMISSION_DENIED"
    assert client._call("GET", f"{JOB}/executions")["executions"] == []
    _post(f"{url}/admin/jobs/tiny", {"granted": True})
    assert execution_state(ended(client, client.run(JOB, {}))) == "succeeded"


def test_a_start_delay_keeps_an_execution_pending_and_a_cancel_ends_it_before_its_task(
    api: tuple[RunJobs, str],
) -> None:
    """F9's test double: a pending execution has no startTime and no task yet."""
    client, url = api
    _post(f"{url}/admin/jobs/tiny", {"start_delay_s": 30})
    name = client.run(JOB, {"MODE": "sleep"})
    pending = client.execution(name)
    assert execution_state(pending) == "running" and "startTime" not in pending
    assert pending["runningCount"] == 0 and pending["local"]["pid"] is None
    client.cancel(name)
    done = ended(client, name)
    assert execution_state(done) == "cancelled" and done["local"]["pid"] is None


def test_a_maintenance_pauses_a_cpu_task_and_ends_a_gpu_task(api: tuple[RunJobs, str]) -> None:
    """F10: Cloud Run live-migrates a CPU task (SIGTSTP before, SIGCONT after) and ends a
    GPU task (https://cloud.google.com/run/docs/configuring/task-timeout)."""
    client, url = api
    cpu = client.run(JOB, {"MODE": "signals"})
    wait_for("the task's handlers", lambda: _log(client.execution(cpu)).startswith("{"))
    status, _ = _post(
        f"{url}/admin/executions/{cpu.rsplit('/', 1)[-1]}/maintenance", {"pause_s": 0.5}
    )
    assert status == 200
    wait_for("SIGCONT", lambda: "got CONT" in _log(client.execution(cpu)))
    assert "got TSTP" in _log(client.execution(cpu))
    running = client.execution(cpu)
    assert execution_state(running) == "running" and running["local"]["maintenances"] == 1
    gpu = client.run(JOB + "-gpu", {})
    wait_for("the GPU task running", lambda: client.execution(gpu)["runningCount"] == 1)
    _post(f"{url}/admin/executions/{gpu.rsplit('/', 1)[-1]}/maintenance")
    done = ended(client, gpu)
    assert done["local"]["ending"] == "terminate" and done["local"]["exit_code"] == -15
    client.cancel(cpu)


def test_an_updated_job_runs_its_new_environment_and_revision(api: tuple[RunJobs, str]) -> None:
    client, url = api
    before = ended(client, client.run(JOB, {}))
    status, job = _post(f"{url}/admin/jobs/tiny", {"env": {"RECLAIM_NEW": "1", "MODE": None}})
    assert status == 200 and job["revision"] == 2
    after = ended(client, client.run(JOB, {}))
    assert "RECLAIM_NEW" not in printed_env(before) and printed_env(after)["RECLAIM_NEW"] == "1"
    assert (before["local"]["revision"], after["local"]["revision"]) == (1, 2)
    assert _post(f"{url}/admin/jobs/none", {})[0] == 404
    assert _post(f"{url}/admin/jobs/tiny", {"env": {"A": 1}})[0] == 400
    assert _post(f"{url}/admin/jobs/tiny", {"surprise": 1})[0] == 400


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return dict(json.loads(resp.read()))
