"""Entry point of a pool's Cloud Run job (RECLAIM_RUNNER=job): one execution adopts one
claim and runs its stages (shared.claim.task; docs/long-stages.md).

The job runs the claim function's own image with this file as its command, exec'd by the
buildpacks launcher as a direct process (`launcher -- python3 task.py`,
terraform/run_jobs.tf), so Python is the container's process and gets Cloud Run's
signals, and the stages run on the same code and pipelines as claim. SIGTERM (a cancel, a
GPU task's maintenance) hands the job back; SIGTSTP and SIGCONT, which bracket a CPU
task's live migration ("SIGTSTP ... sent 10 seconds before a task is migrated ... SIGCONT
... immediately after", https://cloud.google.com/run/docs/configuring/task-timeout), are
logged and nothing more: the task is paused, not taken away.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping

from shared import logs, run_jobs
from shared.claim.shutdown import SHUTDOWN
from shared.claim.task import EXIT_MISCONFIGURED, TaskEnv, run_task
from shared.config import Settings
from shared.errors import ConfigError, PipelineModuleError
from shared.logs import get_logger
from shared.pipelines import load_modules
from shared.queue import Queue

log = get_logger("task")


def main(env: Mapping[str, str] | None = None) -> int:
    """The task's process: settings, the SIGTERM hand-back, one job. Exit 0 for every
    ending the task decided; 2 when misconfigured (the execution fails, the sweep
    rescues the job); an exception (storage down) fails the execution likewise."""
    env = os.environ if env is None else env
    try:
        settings = Settings.from_env(env)
        logs.configure(settings.log_level, project=settings.project)
        load_modules(settings.pipeline_modules)
        run = run_jobs.RunSettings.from_env(env)
        task = TaskEnv.from_env(env, run)
        problem = run_jobs.gpu_region_problem(settings, run)
        if problem is not None:
            raise ConfigError(problem)
    except (ConfigError, PipelineModuleError) as exc:
        log.error("the task is misconfigured", reason=str(exc))
        return EXIT_MISCONFIGURED
    # the task's main thread runs the stage, so the handlers run there, between bytecodes
    signal.signal(signal.SIGTERM, lambda _sig, _frame: _terminated(task))
    signal.signal(signal.SIGTSTP, lambda _sig, _frame: _noted("maintenance: a pause", task))
    signal.signal(signal.SIGCONT, lambda _sig, _frame: _noted("resumed after a pause", task))
    outcome = run_task(Queue.from_settings(settings).ctx, task)
    log.info(
        "task finished",
        **{k: v for k, v in outcome.to_json().items() if k != "job_id"},
        job_id=task.job_id,
    )
    sys.stdout.write(json.dumps(outcome.to_json(), sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


def _terminated(task: TaskEnv) -> None:
    """SIGTERM: a cancel (or a GPU task's maintenance) hands the job back at its next
    boundary; at the task timeout it is the attempt's end, which the task's own deadline
    writes as a timed-out stage (a hand-back would start it again at no cost, forever)."""
    if task.at_timeout():
        log.warning("SIGTERM at the task timeout: the attempt ends timed out", job_id=task.job_id)
        return
    SHUTDOWN.begin("SIGTERM (the task)")


def _noted(what: str, task: TaskEnv) -> None:
    """A CPU task's maintenance is a pause, not a reclaim: note it and run on."""
    log.info(what, job_id=task.job_id, execution=task.execution)


if __name__ == "__main__":
    sys.exit(main())
