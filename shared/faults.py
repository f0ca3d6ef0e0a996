"""Test-only fault points: a process killed at a chosen line, to prove a repair path.

``RECLAIM_FAULT_KILL=<point>:<job id>`` SIGKILLs the process at that point for that job
(only), e.g. ``after-terminal:wf-victim`` right after the job's terminal write and before
what follows it (shared.finish), as a platform kill could. Unset in every deployment
(terraform never sets it); tests/integration/test_workflows_http.py sets it on its own
local cloud. Reading one environment variable is all it costs otherwise.
"""

from __future__ import annotations

import os
import signal

ENV = "RECLAIM_FAULT_KILL"


def kill_if(point: str, job_id: str) -> None:
    """SIGKILL this process when the fault setting names this point and job."""
    wanted = os.environ.get(ENV)
    if wanted and wanted == f"{point}:{job_id}":
        os.kill(os.getpid(), signal.SIGKILL)
