"""One execution of a local Cloud Run job: a task run as a local process (no Docker).

An execution has one task (reclaim's executions always have one) and no retries (the
job's maxRetries is 0: reclaim counts attempts). Its process runs in its own process
group with the job's environment, the run's overrides and the variables Cloud Run sets
for a job's task (https://cloud.google.com/run/docs/container-contract#jobs-env-vars).

An execution may wait `start_delay_s` before its task starts (pending: no startTime, as
while Cloud Run provisions an instance and pulls the image; a cancel then ends it
without a task), so the sweep's view of a slow start can be tested.

How a task ends, as on Cloud Run:
- it exits: 0 is a succeeded execution, anything else a failed one;
- its task timeout passes: SIGTERM, then SIGKILL after the grace; failed
  (https://cloud.google.com/run/docs/configuring/task-timeout; whether Cloud Run sends
  SIGTERM first there is not documented: a live check, docs/long-stages.md);
- a cancel (the Admin API's executions.cancel): SIGTERM, then SIGKILL after the grace;
  cancelled;
- a platform event (the admin API's "terminate": a host failure that stops the task):
  SIGTERM, then SIGKILL after the grace; the exit code decides;
- the admin API's "kill": SIGKILL at once (a host failure, out of memory): failed.

A maintenance event (the admin API's "maintenance") ends nothing on a CPU task: "Tasks
that don't use GPUs are live migrated during maintenance events. Tasks that use GPUs cannot
be live migrated and are terminated instead" (the task-timeout page). Cloud Run sends
SIGTSTP 10 seconds before the migration and SIGCONT right after it; here a CPU task gets
SIGTSTP, is frozen (SIGSTOP) for the pause, then SIGCONT; a GPU task is terminated.
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
    gpu: bool = False
    """A GPU task: a maintenance event terminates it (a CPU task is paused)."""
    start_delay_s: float = 0.0
    """How long an execution stays pending before its task starts."""
    revision: int = 1
    """Bumped by each update of the job (a new image or environment)."""
    revision_env: str = ""
    """A variable the task gets its job's revision name in (<job>-<revision:05d>), as
    terraform tells a task the revision of the image it runs; "" for none."""

    @property
    def revision_name(self) -> str:
        return f"{self.short}-{self.revision:05d}"

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
        self.state = "pending"  # pending, starting, running, succeeded, failed, cancelled
        self.ending: str | None = None
        """What stopped it from outside: "timeout", "cancel", "terminate", "kill"."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._stop_asked = threading.Event()
        self.maintenances = 0

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
            **({self.job.revision_env: self.job.revision_name} if self.job.revision_env else {}),
        }

    # --- lifecycle

    def run(self, spawn: Spawn, base_env: Mapping[str, str]) -> None:
        """Start the task and watch it to its end (call on a thread of its own: it is the
        thread the child's parent-death signal is tied to)."""
        if self.job.start_delay_s > 0:
            self._stop_asked.wait(self.job.start_delay_s)
        with self._lock:  # a stop from now on finds the task started, or never will
            stopped, ending = self._stop_asked.is_set(), self.ending
            self.state = "starting" if not stopped else self.state
        if stopped:  # cancelled (or killed) before its task started
            self._finish("cancelled" if ending == "cancel" else "failed", None, ending)
            return
        try:
            proc = spawn(list(self.job.command), self.env(base_env), self.log_path)
        except OSError as exc:
            self._finish("failed", None, f"could not start: {exc}")
            return
        with self._lock:
            self.proc, self.started, self.state = proc, _now(), "running"
            held = self.ending if self._stop_asked.is_set() else None
        if held is not None:  # stopped while it was starting: now that there is a task
            self._signal(proc, graceful=held != "kill")
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
            if proc is None and self.completed is None and self.state in ("pending", "starting"):
                self.ending = self.ending or why  # not started yet: run() acts on it
                self._stop_asked.set()
                return True
            if proc is None or self.completed is not None or proc.poll() is not None:
                return False
            if self.ending is None or why == "kill":
                self.ending = why
            self._stop_asked.set()
        self._signal(proc, graceful=graceful)
        return True

    def _signal(self, proc: subprocess.Popen[bytes], *, graceful: bool) -> None:
        if not graceful:
            signal_group(proc, signal.SIGKILL)
            return
        signal_group(proc, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(proc,), daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)

    def maintain(self, pause_s: float) -> bool:
        """A maintenance event (see the module doc): a CPU task is paused `pause_s` and
        resumed; a GPU task is terminated. False if the task is not running."""
        if self.job.gpu:
            return self.stop("terminate", graceful=True)
        with self._lock:
            proc = self.proc
            if proc is None or self.completed is not None or not signal_group(proc, signal.SIGTSTP):
                return False
            self.maintenances += 1
        threading.Thread(target=self._migrate, args=(proc, pause_s), daemon=True).start()
        return True

    def _migrate(self, proc: subprocess.Popen[bytes], pause_s: float) -> None:
        time.sleep(0.2)  # SIGTSTP comes ahead of the pause (10 s on Cloud Run)
        signal_group(proc, signal.SIGSTOP)  # the task is frozen however it took SIGTSTP
        self._ended.wait(pause_s)
        signal_group(proc, signal.SIGCONT)

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
                "reconciling": state in ("pending", "starting", "running"),
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
                "maintenances": self.maintenances,
                "revision": self.job.revision,
            }
            return out
