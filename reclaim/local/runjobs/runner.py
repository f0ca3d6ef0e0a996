"""The local Cloud Run jobs runner: jobs, their executions, and the Admin API's verbs.

It does what the Cloud Run Admin API v2 does for the calls reclaim makes (jobs.run with
overrides, executions.get, executions.list, executions.cancel), on local processes
(reclaim/local/runjobs/execution.py). The HTTP shape is reclaim/local/runjobs/api.py.

And what Cloud Run refuses a :run for, so reclaim's answer to each can be tested:
- the project's running executions, 1,000 per region (https://cloud.google.com/run/quotas),
  `max_running` here: 429 RESOURCE_EXHAUSTED;
- the Admin API's run requests per minute (a quota whose default Google does not state
  on that page: off here unless `runs_per_minute` is set): 429 RESOURCE_EXHAUSTED;
- a caller without run.jobs.run on the job, as while a fresh grant propagates
  (https://cloud.google.com/iam/docs/access-change-propagation): a job `denied` here
  answers 403 PERMISSION_DENIED.
A job can be updated (its environment, as a new image brings new code; its start delay;
its grant): executions started afterwards run the new one.
"""

from __future__ import annotations

import dataclasses
import secrets
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reclaim.local.procs import spawn, stop_all
from reclaim.local.runjobs.execution import Execution, JobSpec

MAX_ENV_OVERRIDES = 100
_OVERRIDE_KEYS = frozenset({"containerOverrides", "taskCount", "timeout"})
_CONTAINER_KEYS = frozenset({"name", "args", "env", "clearArgs"})


class ApiError(Exception):
    """An answer in Google's error shape: {"error": {"code", "message", "status"}}."""

    STATUSES = {
        400: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        405: "METHOD_NOT_ALLOWED",
        409: "FAILED_PRECONDITION",
        413: "INVALID_ARGUMENT",
        429: "RESOURCE_EXHAUSTED",
    }

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    def body(self) -> dict[str, Any]:
        status = self.STATUSES.get(self.code, "UNKNOWN")
        return {"error": {"code": self.code, "message": self.message, "status": status}}


def env_overrides(overrides: object) -> dict[str, str]:
    """The environment a :run's overrides set (pure, checked as Cloud Run would: one
    container, name/value pairs, a task count of 1 for reclaim's one-task jobs)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict) or set(overrides) - _OVERRIDE_KEYS:
        raise ApiError(400, f"overrides may hold only {sorted(_OVERRIDE_KEYS)}")
    if overrides.get("taskCount", 1) != 1:
        raise ApiError(400, "the local runner runs executions of one task (taskCount 1)")
    containers = overrides.get("containerOverrides") or []
    if not isinstance(containers, list) or len(containers) > 1:
        raise ApiError(400, "containerOverrides must list at most one container")
    env: dict[str, str] = {}
    for container in containers:
        if not isinstance(container, dict) or set(container) - _CONTAINER_KEYS:
            raise ApiError(400, f"a container override may hold only {sorted(_CONTAINER_KEYS)}")
        pairs = container.get("env") or []
        if not isinstance(pairs, list) or len(pairs) > MAX_ENV_OVERRIDES:
            raise ApiError(400, f"env must list at most {MAX_ENV_OVERRIDES} name/value pairs")
        for pair in pairs:
            name = pair.get("name") if isinstance(pair, dict) else None
            value = pair.get("value", "") if isinstance(pair, dict) else None
            if not isinstance(name, str) or not name or not isinstance(value, str):
                raise ApiError(400, 'each env override is {"name": str, "value": str}')
            env[name] = value
    return env


class JobsRunner:
    """Jobs by full name, their executions, and the processes behind them."""

    MAX_RUNNING = 1000
    """Running job executions per project and region (https://cloud.google.com/run/quotas)."""

    def __init__(self, log_dir: Path, base_env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.base_env = dict(base_env or {})
        self.jobs: dict[str, JobSpec] = {}
        self._executions: dict[str, Execution] = {}
        self._lock = threading.Lock()
        self.max_running = self.MAX_RUNNING
        self.runs_per_minute: int | None = None
        self.denied: set[str] = set()
        """Jobs whose :run this runner refuses with 403 (a grant not propagated yet)."""
        self._runs: deque[float] = deque()
        self.refused: dict[int, int] = {}
        """How many :run this runner refused, by HTTP status (tests, make dev)."""

    def add_job(self, job: JobSpec) -> None:
        with self._lock:
            self.jobs[job.name] = job

    def job(self, name: str) -> JobSpec:
        if name not in self.jobs:
            raise ApiError(404, f"Resource '{name}' does not exist.")
        return self.jobs[name]

    # --- the Admin API's verbs

    def run(self, job_name: str, body: Mapping[str, Any]) -> Execution:
        """jobs.run: a new execution with the overrides, started at once."""
        job = self.job(job_name)
        unknown = set(body) - {"overrides", "validateOnly", "etag"}
        if unknown:
            raise ApiError(400, f"unknown fields {sorted(unknown)}")
        env = env_overrides(body.get("overrides"))
        name = f"{job.name}/executions/{job.short}-{secrets.token_hex(3)}"
        execution = Execution(job, name, env, self.log_dir)
        with self._lock:
            self._admit(job)
            self._executions[name] = execution
        if body.get("validateOnly") is True:
            return execution
        threading.Thread(
            target=execution.run,
            args=(self._spawn(job), self.base_env),
            name=f"runjobs-{execution.short}",
            daemon=True,
        ).start()
        return execution

    def _admit(self, job: JobSpec) -> None:
        """Refuse a :run as Cloud Run would (see the module doc); call under the lock."""
        if job.name in self.denied:
            self._refuse(403, f"Permission 'run.jobs.run' denied on resource '{job.name}'.")
        running = sum(1 for e in self._executions.values() if e.completed is None)
        if running >= self.max_running:
            self._refuse(
                429,
                f"Quota exceeded for running job executions: {self.max_running} per project "
                "and region.",
            )
        now = time.monotonic()
        while self._runs and now - self._runs[0] >= 60.0:
            self._runs.popleft()
        if self.runs_per_minute is not None and len(self._runs) >= self.runs_per_minute:
            self._refuse(
                429, f"Quota exceeded for job run requests per minute: {self.runs_per_minute}."
            )
        self._runs.append(now)

    def _refuse(self, code: int, message: str) -> None:
        self.refused[code] = self.refused.get(code, 0) + 1
        raise ApiError(code, message)

    def update_job(
        self,
        short: str,
        *,
        env: Mapping[str, str | None] | None = None,
        start_delay_s: float | None = None,
        granted: bool | None = None,
    ) -> JobSpec:
        """A new revision of a job (gcloud run jobs update): environment changes (None
        removes a variable), a start delay, its grant; executions started from now on run
        it. ApiError 404 for an unknown job."""
        with self._lock:
            found = [j for j in self.jobs.values() if j.short == short]
            if not found:
                raise ApiError(404, f"no job {short!r}")
            job = found[0]
            merged = {**job.env, **{k: v for k, v in (env or {}).items() if v is not None}}
            for key, value in (env or {}).items():
                if value is None:
                    merged.pop(key, None)
            new = dataclasses.replace(
                job,
                env=merged,
                start_delay_s=job.start_delay_s if start_delay_s is None else start_delay_s,
                revision=job.revision + (1 if env else 0),
            )
            self.jobs[job.name] = new
            if granted is not None:
                (self.denied.discard if granted else self.denied.add)(job.name)
            return new

    def execution(self, name: str) -> Execution:
        with self._lock:
            found = self._executions.get(name)
        if found is None:
            raise ApiError(404, f"Resource '{name}' does not exist.")
        return found

    def executions(self, job_name: str | None = None) -> list[Execution]:
        """Newest first, as executions.list answers."""
        with self._lock:
            found = [e for e in self._executions.values() if job_name in (None, e.job.name)]
        return found[::-1]

    def cancel(self, name: str) -> Execution:
        execution = self.execution(name)
        if not execution.stop("cancel", graceful=True) and execution.completed:
            raise ApiError(409, f"execution {name} has completed")
        return execution

    # --- the admin API's platform events

    def terminate(self, name: str) -> Execution:
        """A platform event: SIGTERM, the grace, SIGKILL."""
        execution = self.execution(name)
        execution.stop("terminate", graceful=True)
        return execution

    def kill(self, name: str) -> Execution:
        """SIGKILL at once (a host failure, out of memory)."""
        execution = self.execution(name)
        execution.stop("kill", graceful=False)
        return execution

    def maintain(self, name: str, pause_s: float = 2.0) -> Execution:
        """A maintenance event: a CPU task paused and resumed, a GPU task terminated."""
        execution = self.execution(name)
        if not execution.maintain(pause_s):
            raise ApiError(409, f"execution {name} has no running task")
        return execution

    def stop(self) -> None:
        """End every running task (SIGTERM, then SIGKILL): nothing outlives the runner."""
        with self._lock:
            procs = [e.proc for e in self._executions.values() if e.proc is not None]
        stop_all([p for p in procs if p.poll() is None], timeout=2.0)
        for execution in list(self._executions.values()):
            if execution.proc is not None:
                execution.wait(5.0)

    def by_short(self, short: str) -> Execution:
        """An execution by its own id (the last segment of its name)."""
        with self._lock:
            found = [e for e in self._executions.values() if e.short == short]
        if not found:
            raise ApiError(404, f"no execution {short!r}")
        return found[0]

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {e.short: e.proc.pid for e in self._executions.values() if e.proc}

    def _spawn(self, job: JobSpec) -> Any:
        def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
            # from the execution's own thread, which lives as long as the task
            return spawn(
                args,
                env=env,
                log_path=log,
                cwd=job.cwd,
                die_with_parent=True,
                long_lived_thread=True,
            )

        return start
