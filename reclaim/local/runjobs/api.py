"""The local jobs runner over HTTP: the Admin API v2 shape reclaim calls, and an admin API.

Cloud Run Admin API v2 (https://cloud.google.com/run/docs/reference/rest/v2/projects.locations.jobs):

    POST /v2/projects/<p>/locations/<r>/jobs/<j>:run       {"overrides": {...}} -> Operation
    GET  /v2/projects/<p>/locations/<r>/jobs/<j>           the job
    GET  /v2/projects/<p>/locations/<r>/jobs/<j>/executions   {"executions": [...]}
    GET  /v2/<execution>                                   the Execution
    POST /v2/<execution>:cancel                            Operation (SIGTERM, grace, SIGKILL)

An Operation's metadata is the Execution, as jobs.run's is. Errors have Google's shape,
{"error": {"code", "message", "status"}}.

The admin API (never part of Cloud Run's; like the local platform's,
reclaim/local/cloudrun/admin.py):

    GET  /admin/stats                          every job and execution, the quotas, refusals
    POST /admin/executions/<id>/terminate      a platform event: SIGTERM, the grace, SIGKILL
    POST /admin/executions/<id>/kill           SIGKILL at once
    POST /admin/executions/<id>/maintenance    {"pause_s"?}: a CPU task paused then resumed
                                               (SIGTSTP, frozen, SIGCONT); a GPU task ended
    POST /admin/jobs/<job>                     {"env"?, "start_delay_s"?, "granted"?}: a new
                                               revision of the job (its image's environment,
                                               a start delay, its :run grant)
    POST /admin/quotas                         {"max_running"?, "runs_per_minute"?}

Bad input to the admin API gets a 4xx JSON {"error", "reason"} and changes nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from reclaim.local.json_api import JsonApiServer, Refused, json_object
from reclaim.local.runjobs.execution import Execution
from reclaim.local.runjobs.runner import ApiError, JobsRunner

MAX_BODY = 64 * 1024
EXECUTION_TYPE = "type.googleapis.com/google.cloud.run.v2.Execution"
_ADMIN_ACTIONS = ("terminate", "kill", "maintenance")


def operation(execution: Execution) -> dict[str, Any]:
    """A long-running Operation whose metadata is the execution (jobs.run's answer)."""
    location = execution.job.name.split("/jobs/", 1)[0]
    return {
        "name": f"{location}/operations/{uuid.uuid4()}",
        "metadata": {"@type": EXECUTION_TYPE, **execution.resource()},
        "done": False,
    }


def _body(raw: bytes) -> dict[str, Any]:
    return json_object(raw, lambda reason: ApiError(400, reason))


def api_route(runner: JobsRunner, method: str, path: str, raw: bytes) -> dict[str, Any]:
    """One Admin API v2 call (path starts with /v2/)."""
    name = path[len("/v2/") :]
    verb = None
    if ":" in name.rsplit("/", 1)[-1]:
        name, verb = name.rsplit(":", 1)
    if method == "POST" and verb == "run":
        return operation(runner.run(name, _body(raw)))
    if method == "POST" and verb == "cancel":
        return operation(runner.cancel(name))
    if verb is not None or method != "GET":
        raise ApiError(405 if verb is None else 400, f"{method} {path} is not served here")
    if "/executions/" in name:
        return runner.execution(name).resource()
    if name.endswith("/executions"):
        job = runner.job(name.rsplit("/", 1)[0])
        return {"executions": [e.resource() for e in runner.executions(job.name)]}
    job = runner.job(name)
    return {"name": job.name, "taskTimeout": f"{job.task_timeout_s:g}s", "maxRetries": 0}


def admin_route(runner: JobsRunner, method: str, path: str, raw: bytes = b"") -> dict[str, Any]:
    """One admin call (path starts with /admin/)."""
    parts = [p for p in path.split("/") if p]
    if method == "GET" and parts == ["admin", "stats"]:
        return {
            "jobs": sorted(runner.jobs),
            "executions": [e.resource() for e in runner.executions()],
            "quotas": {
                "max_running": runner.max_running,
                "runs_per_minute": runner.runs_per_minute,
            },
            "refused": {str(k): v for k, v in sorted(runner.refused.items())},
            "denied": sorted(runner.denied),
        }
    if method != "POST" and len(parts) >= 2 and parts[1] in ("executions", "jobs", "quotas"):
        raise Refused(405, "method not allowed", "actions are POST")
    body = json_object(raw, lambda reason: Refused(400, "bad body", reason))
    if len(parts) == 4 and parts[1] == "executions":
        if parts[3] not in _ADMIN_ACTIONS:
            raise Refused(404, "no such action", f"choose one of {', '.join(_ADMIN_ACTIONS)}")
        try:
            execution = runner.by_short(parts[2])
        except ApiError as exc:
            raise Refused(404, "no such execution", exc.message) from None
        if parts[3] == "maintenance":
            pause = _number(body, "pause_s", 2.0, 0.0, 600.0)
            return _answered(lambda: runner.maintain(execution.name, pause).resource())
        act = runner.terminate if parts[3] == "terminate" else runner.kill
        return act(execution.name).resource()
    if len(parts) == 3 and parts[1] == "jobs":
        return _update_job(runner, parts[2], body)
    if parts == ["admin", "quotas"]:
        _only(body, {"max_running", "runs_per_minute"})
        if "max_running" in body:
            runner.max_running = int(_number(body, "max_running", 0, 0, 100000))
        if "runs_per_minute" in body:
            per = body["runs_per_minute"]
            runner.runs_per_minute = (
                None if per is None else int(_number(body, "runs_per_minute", 0, 0, 100000))
            )
        return {"max_running": runner.max_running, "runs_per_minute": runner.runs_per_minute}
    raise Refused(404, "no such path", path)


def _update_job(runner: JobsRunner, short: str, body: dict[str, Any]) -> dict[str, Any]:
    _only(body, {"env", "start_delay_s", "granted"})
    env = body.get("env")
    if env is not None and not (
        isinstance(env, dict)
        and all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in env.items())
    ):
        raise Refused(400, "bad env", "env maps names to strings (null removes one)")
    granted = body.get("granted")
    if granted is not None and not isinstance(granted, bool):
        raise Refused(400, "bad granted", "granted is true or false")
    delay = _number(body, "start_delay_s", None, 0.0, 3600.0)
    try:
        job = runner.update_job(short, env=env, start_delay_s=delay, granted=granted)
    except ApiError as exc:
        raise Refused(404, "no such job", exc.message) from None
    return {
        "name": job.name,
        "revision": job.revision,
        "start_delay_s": job.start_delay_s,
        "granted": job.name not in runner.denied,
    }


def _only(body: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise Refused(400, "unknown fields", f"{unknown}; known: {sorted(known)}")


def _number(body: dict[str, Any], key: str, default: Any, low: float, high: float) -> Any:
    if key not in body:
        return default
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Refused(400, f"bad {key}", f"{key} is a number within {low:g}..{high:g}")
    return value


def _answered(act: Any) -> dict[str, Any]:
    try:
        return dict(act())
    except ApiError as exc:
        raise Refused(409, "not running", exc.message) from None


def _route(runner: JobsRunner, method: str, path: str, raw: bytes) -> tuple[int, Any]:
    try:
        if path.startswith("/v2/"):
            return 200, api_route(runner, method, path, raw)
        return 200, admin_route(runner, method, path, raw)
    except ApiError as exc:  # Google's error shape on the Admin API's side
        return exc.code, exc.body()


class RunJobsServer(JsonApiServer):
    """The runner's HTTP API on its own port and daemon thread."""

    def __init__(self, runner: JobsRunner, host: str, port: int = 0) -> None:
        self.runner = runner
        super().__init__(
            lambda method, path, raw: _route(runner, method, path, raw),
            host,
            port,
            name="runjobs-api",
            max_body=MAX_BODY,
        )

    def stop(self) -> None:
        """Stop serving, then end every task."""
        super().stop()
        self.runner.stop()
