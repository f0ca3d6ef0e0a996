"""The jobs runner beside a local cloud: a Cloud Run job that runs claim's task entry
point for the default claim (CloudConfig.claim_runner = "job") and one per pool whose
runner is "job", as terraform/run_jobs.tf deploys one per job pool.

LocalCloud starts it before its functions, so their environment can name it:
RECLAIM_RUNNER=job, RECLAIM_RUN_JOB and RECLAIM_RUN_API (the pools contract's
variables; the sweep reads executions through RECLAIM_RUN_API). The task runs with its
claim's own environment, as the Cloud Run job runs with its pool claim's (terraform's
pool_env), plus the task's own: RECLAIM_TASK_TIMEOUT_SECONDS (the job's task timeout) and
RECLAIM_TASK_REVISION (the job's revision, bumped by each update). Each pool's job takes
its pool's `job` sizing: its task timeout (not the cloud's one for all), and whether it
has a GPU (a maintenance event then ends its task instead of pausing it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from reclaim.install import LIBRARY, part
from reclaim.local.runjobs.api import RunJobsServer
from reclaim.local.runjobs.execution import JobSpec
from reclaim.local.runjobs.runner import JobsRunner
from shared.pools import JobSizing
from shared.run_jobs import TASK_ENV_VARS

LOCATION = "local"
JOB = "reclaim-tasks"
TASK_ENTRY = part("functions") / "claim" / "task.py"


def job_name(project: str, job: str = JOB) -> str:
    return f"projects/{project}/locations/{LOCATION}/jobs/{job}"


class LocalJobs:
    """The runner's server and its jobs; `env_for(pool)` is what a claim is told."""

    def __init__(
        self,
        host: str,
        project: str,
        log_dir: Path,
        *,
        task_timeout_s: float,
        grace_s: float,
    ) -> None:
        self._project = project
        self.name = job_name(project)
        """The default claim's job (a pool's: job_of(pool))."""
        self._timeout_s = task_timeout_s
        self._grace_s = grace_s
        self._dir = log_dir / "run-jobs"
        self._dir.mkdir(parents=True, exist_ok=True)
        self.server = RunJobsServer(JobsRunner(self._dir), host)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def runner(self) -> JobsRunner:
        return self.server.runner

    def job_of(self, pool: str | None) -> str:
        return self.name if pool is None else job_name(self._project, f"reclaim-{pool}-task")

    def env_for(self, pool: str | None = None) -> dict[str, str]:
        """The pools contract's variables for a claim service on this pool's job."""
        return {
            "RECLAIM_RUNNER": "job",
            "RECLAIM_RUN_JOB": self.job_of(pool),
            "RECLAIM_RUN_API": self.url,
        }

    @property
    def env(self) -> dict[str, str]:
        return self.env_for(None)

    def add(
        self, task_env: Mapping[str, str], pool: str | None = None, sizing: JobSizing | None = None
    ) -> None:
        """Define a job (its task: claim's task entry point, with `task_env`); a pool's
        job takes its pool's `job` sizing (its task timeout, its GPU), the default
        claim's the cloud's job_task_timeout_seconds."""
        timeout = float(sizing.task_timeout_seconds) if sizing is not None else self._timeout_s
        revision, timeout_var = (v.name for v in TASK_ENV_VARS)
        self.runner.add_job(
            JobSpec(
                self.job_of(pool),
                (sys.executable, str(TASK_ENTRY)),
                env={**task_env, **self.env_for(pool), timeout_var: f"{timeout:g}"},
                task_timeout_s=timeout,
                grace_s=self._grace_s,
                cwd=LIBRARY,
                gpu=sizing is not None and sizing.gpu is not None,
                revision_env=revision,
            )
        )

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
