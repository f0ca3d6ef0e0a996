"""Cloud Run jobs: the runner setting of a claim instance and the Admin API v2 client.

A claim instance whose pool runs on a Cloud Run job (RECLAIM_RUNNER=job) claims as
always, then starts an execution of RECLAIM_RUN_JOB whose one task runs the stages
(shared.claim.dispatch, shared.claim.task). Each execution carries the job's id and
the claim's generation as environment overrides:

    POST {RECLAIM_RUN_API}/v2/{job}:run
    {"overrides": {"containerOverrides": [{"env": [{"name": ..., "value": ...}]}]}}

(https://cloud.google.com/run/docs/reference/rest/v2/projects.locations.jobs/run,
https://cloud.google.com/run/docs/execute/jobs-with-overrides). The answer is a
long-running Operation whose metadata is the Execution it created (the run method's
metadata type, google.cloud.run.v2.Execution), so its name is known at once. The sweep
reads an execution back (GET {api}/v2/{execution}) to notice one that ended while the
record still shows it running (shared.features.executions).

The calls go through google-auth's AuthorizedSession (Application Default Credentials,
cloud-platform scope); the local jobs runner (reclaim/local/runjobs) serves the same REST shape
without credentials, so a non-Google base URL gets an anonymous session.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shared import pools
from shared.config import EnvVar, Settings, read_env
from shared.errors import ConfigError, ReclaimError

RUNNERS = ("push", "job")
GOOGLE_API = "https://run.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 30.0
"""One Admin API call's deadline (a :run answers once the execution is created)."""

JOB_ID_ENV = "RECLAIM_TASK_JOB_ID"
"""The override naming the reclaim job an execution runs."""
CLAIM_GENERATION_ENV = "RECLAIM_TASK_CLAIM_GENERATION"
"""The override carrying the generation the claim's CAS gave the record: the task adopts
only that claim (shared.claim.task)."""
PLACE_ENV = "RECLAIM_TASK_PLACE"
"""The override naming the execution place the claim took for this execution (its pool's
max_executions bound, shared.features.executions): the task frees it when it ends."""

_JOB_NAME = re.compile(r"projects/[^/\s]+/locations/[^/\s]+/jobs/[a-z]([-a-z0-9]*[a-z0-9])?")
_EXECUTION_NAME = re.compile(_JOB_NAME.pattern + r"/executions/[^/\s]+")

State = Literal["running", "succeeded", "failed", "cancelled"]


class RunJobsError(ReclaimError):
    """The Admin API refused a call or could not be reached."""


def _runner(value: str) -> str:
    if value not in RUNNERS:
        raise ValueError(f"must be one of {', '.join(RUNNERS)}")
    return value


def _job_name(value: str) -> str:
    if value and not _JOB_NAME.fullmatch(value):
        raise ValueError("must be projects/<project>/locations/<region>/jobs/<job>, or empty")
    return value


def _base_url(value: str) -> str:
    if not value.startswith(("https://", "http://")):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


RUN_ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        name="RECLAIM_RUNNER",
        field="runner",
        default="push",
        parse=_runner,
        doc="Where this claim function's stages run: push (inside the push request) or job "
        "(a Cloud Run job execution started after the claim; docs/long-stages.md).",
    ),
    EnvVar(
        name="RECLAIM_RUN_JOB",
        field="job",
        default="",
        parse=_job_name,
        doc="With RECLAIM_RUNNER=job: the Cloud Run job's full name, "
        "projects/<project>/locations/<region>/jobs/<job>.",
    ),
    EnvVar(
        name="RECLAIM_RUN_API",
        field="api",
        default=GOOGLE_API,
        parse=_base_url,
        doc="The Cloud Run Admin API v2 base URL (the local jobs runner serves the same "
        "shape at a local URL); the sweep reads executions through it.",
    ),
)


def _revision(value: str) -> str:
    if value and ("/" in value or any(c.isspace() for c in value)):
        raise ValueError("must be a revision name (no '/' or spaces), or empty")
    return value


def _seconds(value: str) -> float:
    seconds = float(value)
    if not seconds >= 0:  # NaN too
        raise ValueError("must be a number of seconds >= 0")
    return seconds


TASK_ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        name="RECLAIM_TASK_REVISION",
        field="revision",
        default="",
        parse=_revision,
        doc="A Cloud Run job's task: the revision of the image it runs (terraform: the "
        "task-image service's latest ready revision); it names what the task runs in its "
        "log lines and in the reason it hands a job of newer code back for.",
    ),
    EnvVar(
        name="RECLAIM_TASK_TIMEOUT_SECONDS",
        field="task_timeout_seconds",
        default="0",
        parse=_seconds,
        doc="A Cloud Run job's task: the job's task timeout (0: none known). The task ends "
        "its attempt as a timed-out stage shortly before it, so a stage longer than the "
        "task timeout is a failed attempt, not a platform's hand-back repeated forever.",
    ),
)


@dataclass(frozen=True)
class TaskSettings:
    """What a Cloud Run job's definition tells its task (TASK_ENV_VARS)."""

    revision: str = ""
    task_timeout_seconds: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TaskSettings:
        return cls(**read_env(TASK_ENV_VARS, env))


Refusal = Literal["transient", "grant", "permanent"]


def refusal_kind(exc: RunJobsError) -> Refusal:
    """What a failed :run says about trying again (docs/long-stages.md):

    - "transient": no answer, a timeout, 429 (the run-request quota, or the 1,000 running
      executions a project has per region: https://cloud.google.com/run/quotas) or 5xx;
      it costs the job nothing and it is tried again after a backoff;
    - "grant": 403 or 404, which a fresh grant or a job the same apply just made answers
      while it propagates ("typically 2 minutes, potentially 7 minutes or longer":
      https://cloud.google.com/iam/docs/access-change-propagation); free for a bounded
      while, then a failed attempt (a misnamed job or a missing grant ends the job);
    - "permanent": anything else (400: a request Cloud Run will never take), an attempt.
    """
    status = getattr(exc, "status", None)
    if status is None or status == 429 or (isinstance(status, int) and status >= 500):
        return "transient"
    if status in (403, 404):
        return "grant"
    return "permanent"


@dataclass(frozen=True)
class RunSettings:
    """The runner settings of one process (a pool's claim function, the sweep, a task)."""

    runner: str = "push"
    job: str = ""
    api: str = GOOGLE_API

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunSettings:
        """Read and check them; ConfigError names the bad variable."""
        values = read_env(RUN_ENV_VARS, os.environ if env is None else env)
        settings = cls(**values)
        if settings.runner == "job" and not settings.job:
            raise ConfigError("RECLAIM_RUNNER=job needs RECLAIM_RUN_JOB (the Cloud Run job)")
        return settings

    @property
    def on_jobs(self) -> bool:
        return self.runner == "job"


def region_of(job: str) -> str:
    """The region of a job's full name (projects/<p>/locations/<region>/jobs/<j>)."""
    parts = job.split("/")
    return parts[3] if len(parts) > 3 else ""


def gpu_region_problem(settings: Settings, run: RunSettings) -> str | None:
    """Why this process's pool cannot run its GPU job where RECLAIM_RUN_JOB says, or None
    (Google's API only: the local runner's location is not a region). terraform refuses
    the same at plan (pool_problems); this is the check at start."""
    if not run.on_jobs or run.api != GOOGLE_API or settings.pool not in settings.pools.names:
        return None
    return pools.gpu_region_problem(settings.pools.get(settings.pool), region_of(run.job))


@functools.cache
def run_settings() -> RunSettings:
    """This process's (read once; a bad value raises ConfigError at every call)."""
    return RunSettings.from_env()


# --------------------------------------------------------------------------- pure shapes


def run_request(env: Mapping[str, str]) -> dict[str, Any]:
    """The body of a jobs :run that overrides the task's environment with `env`."""
    pairs = [{"name": k, "value": v} for k, v in sorted(env.items())]
    return {"overrides": {"containerOverrides": [{"env": pairs}]}}


def execution_of_operation(operation: Mapping[str, Any]) -> str:
    """The execution name a :run's Operation carries in its metadata; RunJobsError if
    it carries none."""
    metadata = operation.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not _EXECUTION_NAME.fullmatch(name):
        raise RunJobsError(f"the :run answer names no execution: {dict(operation)!r:.300}")
    return name


def execution_state(execution: Mapping[str, Any]) -> State:
    """Where an Execution stands: running until it has a completionTime, then cancelled,
    failed or succeeded by its task counts (an execution of one task: the reclaim job's)
    (https://cloud.google.com/run/docs/reference/rest/v2/projects.locations.jobs.executions).
    """
    if not execution.get("completionTime"):
        return "running"
    for state, counter in (("cancelled", "cancelledCount"), ("failed", "failedCount")):
        count = execution.get(counter)
        if isinstance(count, int) and count > 0:
            return state  # type: ignore[return-value]
    for condition in execution.get("conditions") or []:
        if isinstance(condition, Mapping) and (
            condition.get("type"),
            condition.get("state"),
        ) == ("Completed", "CONDITION_FAILED"):
            return "failed"
    return "succeeded"


def is_execution_name(value: object) -> bool:
    return isinstance(value, str) and _EXECUTION_NAME.fullmatch(value) is not None


def short_name(execution: str) -> str:
    """The execution's own id (the last path segment), as CLOUD_RUN_EXECUTION gives it."""
    return execution.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- the client


class RunJobs:
    """The few Admin API v2 calls reclaim makes, over one authorized session."""

    def __init__(self, api: str = GOOGLE_API, session: Any | None = None) -> None:
        self.api = api.rstrip("/")
        self._session = session if session is not None else _session(self.api)

    def run(self, job: str, env: Mapping[str, str]) -> str:
        """Start an execution of `job` with `env` overridden; its full name."""
        body = self._call("POST", f"{job}:run", run_request(env))
        return execution_of_operation(body)

    def execution(self, name: str) -> dict[str, Any]:
        """The Execution resource; RunJobsError (with .status 404) if it is unknown."""
        return self._call("GET", name)

    def cancel(self, name: str) -> dict[str, Any]:
        """Ask the platform to stop an execution (its task gets SIGTERM)."""
        return self._call("POST", f"{name}:cancel", {})

    def _call(self, method: str, path: str, body: Any | None = None) -> dict[str, Any]:
        import requests

        url = f"{self.api}/v2/{path}"
        try:
            resp = self._session.request(method, url, json=body, timeout=TIMEOUT_S)
        except (requests.RequestException, OSError) as exc:
            raise RunJobsError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            error = RunJobsError(f"{method} {url}: HTTP {resp.status_code} {resp.text[:300]}")
            error.status = resp.status_code  # type: ignore[attr-defined]
            raise error
        try:
            data = resp.json()
        except ValueError as exc:
            raise RunJobsError(f"{method} {url}: not JSON: {resp.text[:200]}") from exc
        if not isinstance(data, dict):
            raise RunJobsError(f"{method} {url}: not a JSON object")
        return data


def _session(api: str) -> Any:
    """ADC for Google's API; an anonymous one for a local runner (no credentials there)."""
    from google.auth.transport.requests import AuthorizedSession

    if api.startswith("https://") and api.endswith(".googleapis.com"):
        import google.auth

        credentials, _ = google.auth.default(scopes=[SCOPE])
    else:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    return AuthorizedSession(credentials)


_CLIENTS: dict[str, RunJobs] = {}
_CLIENTS_LOCK = threading.Lock()


def client(api: str) -> RunJobs:
    """The process's client for one API base URL (its session is reused)."""
    with _CLIENTS_LOCK:
        if api not in _CLIENTS:
            _CLIENTS[api] = RunJobs(api)
        return _CLIENTS[api]
