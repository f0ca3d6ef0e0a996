"""The jobs runner beside a local cloud: one Cloud Run job that runs claim's task entry
point, as terraform/run_jobs.tf deploys one per job pool.

LocalCloud starts it (CloudConfig.claim_runner = "job") before its functions, so their
environment can name it: RECLAIM_RUNNER=job, RECLAIM_RUN_JOB and RECLAIM_RUN_API (the
pools contract's variables). The task runs with the functions' own environment, as the
Cloud Run job runs with the claim function's settings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from local.runjobs.api import RunJobsServer
from local.runjobs.execution import JobSpec
from local.runjobs.runner import JobsRunner

ROOT = Path(__file__).resolve().parents[2]
LOCATION = "local"
JOB = "reclaim-tasks"
TASK_ENTRY = ROOT / "functions" / "claim" / "task.py"


def job_name(project: str, job: str = JOB) -> str:
    return f"projects/{project}/locations/{LOCATION}/jobs/{job}"


class LocalJobs:
    """The runner's server and its one job; `env` is what the functions are told."""

    def __init__(
        self,
        host: str,
        project: str,
        log_dir: Path,
        *,
        task_timeout_s: float,
        grace_s: float,
    ) -> None:
        self.name = job_name(project)
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

    @property
    def env(self) -> dict[str, str]:
        """The pools contract's variables for a claim service on this job."""
        return {"RECLAIM_RUNNER": "job", "RECLAIM_RUN_JOB": self.name, "RECLAIM_RUN_API": self.url}

    def start(self, task_env: Mapping[str, str]) -> None:
        """Define the job (its task: claim's task entry point, with `task_env`) and serve."""
        self.runner.add_job(
            JobSpec(
                self.name,
                (sys.executable, str(TASK_ENTRY)),
                env={**task_env, **self.env},
                task_timeout_s=self._timeout_s,
                grace_s=self._grace_s,
                cwd=ROOT,
            )
        )
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
