"""Entry point of a pool's Cloud Run job (RECLAIM_RUNNER=job): one execution adopts one
claim and runs its stages (shared.claim.task; docs/long-stages.md).

The job runs the claim function's own image with this file as its command
(terraform/run_jobs.tf), so the stages run on the same code and pipelines as claim.
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
        task = TaskEnv.from_env(env, run_jobs.RunSettings.from_env(env))
    except (ConfigError, PipelineModuleError) as exc:
        log.error("the task is misconfigured", reason=str(exc))
        return EXIT_MISCONFIGURED
    # the task's main thread runs the stage, so the handler runs there, between bytecodes
    signal.signal(signal.SIGTERM, lambda _sig, _frame: SHUTDOWN.begin("SIGTERM (the task)"))
    outcome = run_task(Queue.from_settings(settings).ctx, task)
    log.info(
        "task finished",
        **{k: v for k, v in outcome.to_json().items() if k != "job_id"},
        job_id=task.job_id,
    )
    sys.stdout.write(json.dumps(outcome.to_json(), sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
