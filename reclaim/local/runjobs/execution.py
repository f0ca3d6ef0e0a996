"""One execution of a local Cloud Run job: a task run as a local process (no Docker).

An execution has one task (reclaim's executions always have one) and no retries (the
job's maxRetries is 0: reclaim counts attempts). Its process runs in its own process
group with the job's environment, the run's overrides and the variables Cloud Run sets
for a job's task (https://cloud.google.com/run/docs/container-contract#jobs-env-vars).

How a task ends, as on Cloud Run:
- it exits: 0 is a succeeded execution, anything else a failed one;
- its task timeout passes: SIGTERM, then SIGKILL after the grace; failed
  (https://cloud.google.com/run/docs/configuring/task-timeout);
- a cancel (the Admin API's executions.cancel): SIGTERM, then SIGKILL after the grace;
  cancelled;
- a platform event (the admin API's "terminate": a maintenance event or host failure
  that stops the task): SIGTERM, then SIGKILL after the grace; the exit code decides;
- the admin API's "kill": SIGKILL at once (a host failure, out of memory): failed.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reclaim.local.procs import reap, signal_group

Spawn = Callable[[list[str], dict[str, str], Path], "subprocess.Popen[bytes]"]
"""(argv, env, log path) -> the started task process, leader of its own group."""


@dataclass(frozen=True)
class JobSpec:
    """A local Cloud Run job: what its task runs, with what, for how long at most."""

    name: str
    """projects/<p>/locations/<r>/jobs/<j>."""
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    task_timeout_s: float = 600.0
    """Cloud Run's default task timeout is 10 minutes."""
    grace_s: float = 10.0
    """SIGTERM to SIGKILL."""
    cwd: Path | None = None

    @property
    def short(self) -> str:
        return self.name.rsplit("/", 1)[-1]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Execution:
    """One execution: its process, its state and the Execution resource the API shows."""

    def __init__(self, job: JobSpec, name: str, overrides: Mapping[str, str], log_dir: Path):
        self.job = job
        self.name = name
        self.overrides = dict(overrides)
        self.log_path = log_dir / f"{self.short}.log"
        self.created = _now()
        self.started: str | None = None
        self.completed: str | None = None
        self.exit_code: int | None = None
        self.state = "pending"  # pending, running, succeeded, failed, cancelled
        self.ending: str | None = None
        """What stopped it from outside: "timeout", "cancel", "terminate", "kill"."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._stop_asked = threading.Event()

    @property
    def short(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The task's environment: the job's, the run's overrides, Cloud Run's own."""
        return {
            **base,
            **self.job.env,
            **self.overrides,
            "CLOUD_RUN_JOB": self.job.short,
            "CLOUD_RUN_EXECUTION": self.short,
            "CLOUD_RUN_TASK_INDEX": "0",
            "CLOUD_RUN_TASK_ATTEMPT": "0",
            "CLOUD_RUN_TASK_COUNT": "1",
        }

    # --- lifecycle

    def run(self, spawn: Spawn, base_env: Mapping[str, str]) -> None:
        """Start the task and watch it to its end (call on a thread of its own: it is the
        thread the child's parent-death signal is tied to)."""
        try:
            proc = spawn(list(self.job.command), self.env(base_env), self.log_path)
        except OSError as exc:
            self._finish("failed", None, f"could not start: {exc}")
            return
        with self._lock:
            self.proc, self.started, self.state = proc, _now(), "running"
        deadline = time.monotonic() + self.job.task_timeout_s
        while proc.poll() is None:
            if time.monotonic() >= deadline and not self._stop_asked.is_set():
                self.stop("timeout", graceful=True)
            self._ended.wait(0.02)
        reap(proc)
        code = proc.returncode
        with self._lock:
            ending = self.ending
        if ending == "cancel":
            state = "cancelled"
        elif ending in ("timeout", "kill") or code != 0:
            state = "failed"
        else:
            state = "succeeded"
        self._finish(state, code, ending)

    def stop(self, why: str, *, graceful: bool) -> bool:
        """SIGTERM then SIGKILL after the grace (graceful), or SIGKILL at once; False if
        the task is not running."""
        with self._lock:
            proc = self.proc
            if proc is None or self.completed is not None or proc.poll() is not None:
                return False
            if self.ending is None or why == "kill":
                self.ending = why
            self._stop_asked.set()
        if not graceful:
            signal_group(proc, signal.SIGKILL)
            return True
        signal_group(proc, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(proc,), daemon=True).start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)

    def _kill_after_grace(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(self.job.grace_s)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)

    def _finish(self, state: str, code: int | None, ending: str | None) -> None:
        with self._lock:
            self.state, self.exit_code, self.completed = state, code, _now()
            self.ending = ending
        self._ended.set()

    # --- the Admin API's view

    def resource(self) -> dict[str, Any]:
        """The Execution resource (the fields reclaim and a person read), v2 REST shape
        (https://cloud.google.com/run/docs/reference/rest/v2/projects.locations.jobs.executions)."""
        with self._lock:
            state, code = self.state, self.exit_code
            out: dict[str, Any] = {
                "name": self.name,
                "uid": self.short,
                "job": self.job.short,
                "createTime": self.created,
                "taskCount": 1,
                "parallelism": 1,
                "runningCount": 1 if state == "running" else 0,
                "succeededCount": 1 if state == "succeeded" else 0,
                "failedCount": 1 if state == "failed" else 0,
                "cancelledCount": 1 if state == "cancelled" else 0,
                "retriedCount": 0,
                "reconciling": state in ("pending", "running"),
            }
            if self.started:
                out["startTime"] = self.started
            if self.completed:
                out["completionTime"] = self.completed
                condition = "CONDITION_SUCCEEDED" if state == "succeeded" else "CONDITION_FAILED"
                out["conditions"] = [{"type": "Completed", "state": condition}]
            # not part of Cloud Run's resource: what the local task did (tests, make dev)
            out["local"] = {
                "state": state,
                "exit_code": code,
                "ending": self.ending,
                "pid": self.proc.pid if self.proc else None,
                "log": str(self.log_path),
            }
            return out
