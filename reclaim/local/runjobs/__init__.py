"""The local Cloud Run jobs runner: executions as local processes, no Docker.

Modules: execution (one execution's process: task timeout, cancel, SIGTERM then SIGKILL
on a platform event), runner (jobs, executions and the Admin API's verbs), api (the
Admin API v2 REST shape reclaim calls, and an admin API to terminate or kill a task),
cloud (how the local cloud starts it beside a claim service with RECLAIM_RUNNER=job).
docs/long-stages.md describes what it follows.
"""

from reclaim.local.runjobs.api import RunJobsServer
from reclaim.local.runjobs.execution import Execution, JobSpec
from reclaim.local.runjobs.runner import ApiError, JobsRunner

__all__ = ["ApiError", "Execution", "JobSpec", "JobsRunner", "RunJobsServer"]
