"""`make dev`: LOCAL_* settings from the environment, then LocalCloud in the foreground.

    python -m reclaim.local.dev            (make dev)
    python -m reclaim.local.dev --help     every LOCAL_* setting with its default

LOCAL_* configure the launcher only; the functions' own RECLAIM_* settings are
read by shared/config.py alone (pass extras through LOCAL_FUNCTION_ENV, or
export RECLAIM_* and they are inherited). Before starting it prints what it
runs: the emulators, each function's Cloud Run sizing, and the settings used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType

from reclaim.local import tools, wiring
from reclaim.local.cloud import (
    DEFAULT_FUNCTIONS,
    PUSH_WINDOWS,
    ROOT,
    CloudConfig,
    FunctionSpec,
    LocalCloud,
    emulator_args,
    pool_service,
)
from reclaim.local.reload import Reloader
from shared import pools
from shared.config import EnvVar, read_env, unknown_names
from shared.config import pools_file as config_pools_file
from shared.cron import schedules
from shared.errors import ConfigError, InvalidInput, PipelineModuleError
from shared.pipelines import load_modules, pipeline_names
from shared.submission import upload_routes


class LaunchConfigError(ValueError):
    """A LOCAL_* variable is malformed; the message names it."""


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError("must be a port within 0..65535 (0 = pick a free one)")
    return value


def _opt_port(raw: str) -> int | None:
    return None if raw.lower() in ("", "off", "none") else _port(raw)


def _opt_int(raw: str) -> int | None:
    return None if raw == "" else int(raw)


def _opt_seconds(raw: str) -> float | None:
    return None if raw == "" else float(raw)


def _window(raw: str) -> str:
    if raw not in PUSH_WINDOWS:
        raise ValueError(f"must be one of {', '.join(PUSH_WINDOWS)}")
    return raw


def _env_pairs(raw: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError("must be KEY=VALUE pairs separated by commas")
        out[key.strip()] = value.strip()
    return out


def _folders(raw: str) -> tuple[Path, ...]:
    return tuple(Path(p).resolve() for p in raw.split(os.pathsep) if p.strip())


def _opt_path(raw: str) -> Path | None:
    return Path(raw).resolve() if raw.strip() else None


def _on_off(raw: str) -> bool:
    if raw.strip().lower() not in ("on", "off"):
        raise ValueError("must be on or off")
    return raw.strip().lower() == "on"


def _sources(raw: str) -> dict[str, FunctionSpec]:
    out = dict(DEFAULT_FUNCTIONS)
    for name, value in _env_pairs(raw).items():
        source, sep, target = value.rpartition(":")
        if name not in DEFAULT_FUNCTIONS or not sep or not source or not target:
            raise ValueError(
                f"{name}={value}: must be one of {sorted(DEFAULT_FUNCTIONS)}=path:target"
            )
        out[name] = FunctionSpec(source, target)
    return out


VARS: tuple[EnvVar, ...] = (
    EnvVar(
        name="LOCAL_HOST",
        field="host",
        default="127.0.0.1",
        parse=str,
        doc="Address every local service binds to.",
    ),
    EnvVar(
        name="LOCAL_PUBSUB_PORT",
        field="pubsub_port",
        default="8085",
        parse=_port,
        doc="Pub/Sub emulator (gRPC).",
    ),
    EnvVar(
        name="LOCAL_EMULATOR_ADMIN_PORT",
        field="emulator_admin_port",
        default="8086",
        parse=_opt_port,
        doc="Emulator GET /stats, POST /faults ('off' to disable).",
    ),
    EnvVar(
        name="LOCAL_GCS_PORT",
        field="gcs_port",
        default="4443",
        parse=_port,
        doc="fake-gcs-server (HTTP).",
    ),
    EnvVar(
        name="LOCAL_SUBMIT_PORT",
        field="submit_port",
        default="8080",
        parse=_port,
        doc="submit function.",
    ),
    EnvVar(
        name="LOCAL_SUBMIT_UPLOAD_PORT",
        field="submit_upload_port",
        default="8081",
        parse=_port,
        doc="submit_upload function.",
    ),
    EnvVar(
        name="LOCAL_CLAIM_PORT",
        field="claim_port",
        default="8082",
        parse=_port,
        doc="The claim function's one URL (its Cloud Run front).",
    ),
    EnvVar(
        name="LOCAL_SWEEP_PORT",
        field="sweep_port",
        default="8083",
        parse=_port,
        doc="sweep function.",
    ),
    EnvVar(
        name="LOCAL_DASHBOARD_PORT",
        field="dashboard_port",
        default="8084",
        parse=_port,
        doc="dashboard function (web UI).",
    ),
    EnvVar(
        name="LOCAL_CLOUDRUN_ADMIN_PORT",
        field="cloudrun_admin_port",
        default="8087",
        parse=_opt_port,
        doc="Local Cloud Run GET /stats and instance actions ('off' to disable).",
    ),
    EnvVar(
        name="LOCAL_CLAIM_MAX_INSTANCES",
        field="max_instances",
        default="2",
        parse=int,
        doc="Claim instances at most (it scales from zero).",
    ),
    EnvVar(
        name="LOCAL_CLAIM_MIN_INSTANCES",
        field="min_instances",
        default="0",
        parse=int,
        doc="Claim instances kept warm.",
    ),
    EnvVar(
        name="LOCAL_CLAIM_CONCURRENCY",
        field="concurrency",
        default="4",
        parse=int,
        doc="Jobs one claim instance serves at once; = THREADS = RECLAIM_MAX_CONCURRENT.",
    ),
    EnvVar(
        name="LOCAL_IDLE_TIMEOUT_SECONDS",
        field="idle_timeout_seconds",
        default="60",
        parse=float,
        doc="An instance without a request for this long is shut down (Cloud Run: up to 15 min).",
    ),
    EnvVar(
        name="LOCAL_SHUTDOWN_GRACE_SECONDS",
        field="shutdown_grace_seconds",
        default="10",
        parse=float,
        doc="SIGTERM, then SIGKILL this much later (Cloud Run: 10).",
    ),
    EnvVar(
        name="LOCAL_PENDING_TIMEOUT_SECONDS",
        field="pending_timeout_seconds",
        default="",
        parse=_opt_seconds,
        doc="Wait for a free instance before the platform's 429 (empty: max(10, 3.5 x start-up)).",
    ),
    EnvVar(
        name="LOCAL_PUSH_WINDOW",
        field="push_window",
        default="adaptive",
        parse=_window,
        doc="Emulator push flow control: adaptive (the service's) or fixed (32 in flight).",
    ),
    EnvVar(
        name="LOCAL_STALE_SECONDS",
        field="stale_seconds",
        default="30",
        parse=float,
        doc="Silence after which a running job's owner is presumed gone.",
    ),
    EnvVar(
        name="LOCAL_SWEEP_INTERVAL_SECONDS",
        field="sweep_interval_seconds",
        default="3",
        parse=float,
        doc="Scheduler tick period (0 = none).",
    ),
    EnvVar(
        name="LOCAL_PROJECT", field="project", default=wiring.PROJECT, parse=str, doc="Project id."
    ),
    EnvVar(
        name="LOCAL_RECORDS_BUCKET",
        field="records_bucket",
        default=wiring.RECORDS_BUCKET,
        parse=str,
        doc="Records bucket.",
    ),
    EnvVar(
        name="LOCAL_UPLOADS_BUCKET",
        field="uploads_bucket",
        default=wiring.UPLOADS_BUCKET,
        parse=str,
        doc="Uploads bucket.",
    ),
    EnvVar(
        name="LOCAL_MIN_BACKOFF_SECONDS",
        field="min_backoff_seconds",
        default=str(wiring.LOCAL_MIN_BACKOFF_SECONDS),
        parse=int,
        doc="Push retry minimum backoff.",
    ),
    EnvVar(
        name="LOCAL_MAX_BACKOFF_SECONDS",
        field="max_backoff_seconds",
        default=str(wiring.LOCAL_MAX_BACKOFF_SECONDS),
        parse=int,
        doc="Push retry maximum backoff.",
    ),
    EnvVar(
        name="LOCAL_DUPLICATE_FRACTION",
        field="duplicate_fraction",
        default="0",
        parse=float,
        doc="Emulator: fraction of deliveries duplicated.",
    ),
    EnvVar(
        name="LOCAL_DROP_PUBLISH_FRACTION",
        field="drop_publish_fraction",
        default="0",
        parse=float,
        doc="Emulator: fraction of publishes silently dropped.",
    ),
    EnvVar(
        name="LOCAL_SEED", field="seed", default="", parse=_opt_int, doc="Emulator fault RNG seed."
    ),
    EnvVar(
        name="LOCAL_LOG_DIR",
        field="log_dir",
        default=".local-cloud/logs",
        parse=str,
        doc="Log directory (relative to the repo root).",
    ),
    EnvVar(
        name="LOCAL_RELOAD",
        field="reload",
        default="on",
        parse=_on_off,
        doc="Roll the functions over when a pipeline module's file changes ('off': never).",
    ),
    EnvVar(
        name="LOCAL_STORAGE_DIR",
        field="storage_dir",
        default="",
        parse=_opt_path,
        doc="Keep the buckets in this folder across restarts (empty: in memory); reclaim dev "
        "sets .reclaim/storage.",
    ),
    EnvVar(
        name="LOCAL_FUNCTIONS_STORAGE_HOST",
        field="functions_storage_host",
        default="",
        parse=str,
        doc="STORAGE_EMULATOR_HOST for the functions (a fault proxy); empty = fake-gcs.",
    ),
    EnvVar(
        name="LOCAL_FUNCTION_SOURCES",
        field="functions",
        default="",
        parse=_sources,
        doc="Run other code for a function: name=path/main.py:target,... (paths from the repo).",
    ),
    EnvVar(
        name="LOCAL_PYTHONPATH",
        field="python_path",
        default="",
        parse=_folders,
        doc="Folders the functions import your pipeline modules from (reclaim dev: the project).",
    ),
    EnvVar(
        name="LOCAL_ENDPOINTS_FILE",
        field="endpoints_file",
        default="",
        parse=_opt_path,
        doc="Once up, write the endpoints here as JSON (removed at stop); reclaim dev sets it.",
    ),
    EnvVar(
        name="LOCAL_FUNCTION_ENV",
        field="function_env",
        default="",
        parse=_env_pairs,
        doc="Extra function env, e.g. RECLAIM_MAX_ATTEMPTS=5,RECLAIM_LOG_LEVEL=DEBUG.",
    ),
)

_TOPOLOGY_FIELDS = (
    "project",
    "records_bucket",
    "uploads_bucket",
    "min_backoff_seconds",
    "max_backoff_seconds",
)


def config_from_env(env: Mapping[str, str]) -> CloudConfig:
    """Build and validate the launcher config; LaunchConfigError names the bad variable."""
    try:
        values = read_env(VARS, env)
    except ConfigError as exc:
        raise LaunchConfigError(str(exc)) from None
    topo_values = {k: values.pop(k) for k in _TOPOLOGY_FIELDS}
    try:
        topology = wiring.Topology(**topo_values)
    except ValueError as exc:
        raise LaunchConfigError(f"LOCAL_* names/backoffs are invalid: {exc}") from None
    values.pop("endpoints_file")  # the launcher's, not the cloud's: run() writes it
    values.pop("reload")  # the launcher's: run() watches the modules
    log_dir = Path(values.pop("log_dir"))
    values["log_dir"] = log_dir if log_dir.is_absolute() else ROOT / log_dir
    values["functions_storage_host"] = values["functions_storage_host"] or None
    config = replace(CloudConfig(), topology=topology, **values)
    config = replace(config, schedules_file=schedules.schedules_file(dict(env)))  # time
    config = replace(config, uploads_file=upload_routes.dev_uploads_file(env))
    modules = env.get("RECLAIM_PIPELINE_MODULES", "")
    config = replace(config, pools_file=config_pools_file(env.get(pools.POOLS_ENV, ""), modules))
    try:
        config.pools()  # a bad pools file stops here, naming the pool (nothing started)
    except ValueError as exc:
        raise LaunchConfigError(str(exc)) from None
    try:
        config.validate()
    except ValueError as exc:
        raise LaunchConfigError(f"{exc} (check the LOCAL_* variables)") from None
    return config


RETIRED = {
    "LOCAL_CLAIM_INSTANCES": "claim scales from zero now: set LOCAL_CLAIM_MAX_INSTANCES "
    "(and LOCAL_CLAIM_MIN_INSTANCES for warm ones)",
    "LOCAL_MAX_CONCURRENT": "use LOCAL_CLAIM_CONCURRENCY (it is also THREADS)",
    "LOCAL_CLAIM_BASE_PORT": "instances listen on free ports behind the claim front",
}
"""Settings of the round-robin launcher that the Cloud Run platform replaced."""


def unknown_vars(env: Mapping[str, str]) -> list[str]:
    """LOCAL_* names that are set but mean nothing here (likely typos)."""
    return [name for name in unknown_names(VARS, env, "LOCAL_") if name not in RETIRED]


def retired_vars(env: Mapping[str, str]) -> list[str]:
    """'NAME: what to use instead' for each retired setting still set."""
    return [f"{k}: {why}" for k, why in RETIRED.items() if k in env]


def busy_ports(config: CloudConfig) -> list[str]:
    """'name=port' for each fixed port something already listens on."""
    fixed = {f"{k}={v}": v for k, v in vars(config).items() if k.endswith("_port") and v}
    busy = []
    for label, port in fixed.items():
        with socket.socket() as s:
            s.settimeout(0.3)
            if s.connect_ex((config.host, port)) == 0:
                busy.append(label)
    return busy


def plan(config: CloudConfig, env: Mapping[str, str]) -> str:
    """What `make dev` runs, said before it starts: processes, sizing and settings."""
    emulator = emulator_args(config, config.pubsub_port, config.emulator_admin_port)
    lines = [
        "local cloud: starting",
        "  Pub/Sub emulator   python " + " ".join(emulator[1:]),
        f"  fake-gcs-server    port {config.gcs_port} (upload notifications on), "
        + (
            f"state kept in {config.storage_dir} (reclaim dev --fresh starts empty)"
            if config.storage_dir is not None
            else "in memory (empty at every start)"
        ),
        "  local Cloud Run    one front per function; instances start on the first request",
    ]
    for name in config.service_names():
        spec, s = config.spec(name), config.service_config(name)
        lines.append(
            f"    {name:<14} {_shown(spec.source)}:{spec.target}  concurrency {s.concurrency} "
            f"(THREADS), instances {s.min_instances}..{s.max_instances}, "
            f"timeout {s.timeout_s:g} s"
        )
    lines.append(
        f"    every instance: idle {config.idle_timeout_seconds:g} s -> SIGTERM, "
        f"{config.shutdown_grace_seconds:g} s grace -> SIGKILL; pending "
        + (
            f"{config.pending_timeout_seconds:g} s"
            if config.pending_timeout_seconds is not None
            else "max(10 s, 3.5 x start-up)"
        )
        + " -> 429"
    )
    lines += pools_lines(config)
    if config.sweep_interval_seconds:
        lines.append(f"  scheduler          POST sweep every {config.sweep_interval_seconds:g} s")
    if config.schedules_file is not None:  # time: docs/time.md
        lines.append(f"  cron               the schedules of {config.schedules_file} (if any)")
    modules = config.function_env.get("RECLAIM_PIPELINE_MODULES") or env.get(
        "RECLAIM_PIPELINE_MODULES", ""
    )
    where = f" (from {', '.join(map(str, config.python_path))})" if config.python_path else ""
    lines.append(f"  your pipelines     {modules or 'none: the built-ins only'}{where}")
    routes = config.uploads_file or "none: every upload becomes an upload-digest job"
    lines.append(f"  upload routes      {routes}")
    changed = [v for v in VARS if v.name in env and env[v.name].strip() != v.default]
    lines.append(
        "  settings           "
        + (", ".join(f"{v.name}={env[v.name].strip()}" for v in changed) or "all defaults")
        + " (python -m reclaim.local.dev --help lists them)"
    )
    return "\n".join(lines)


def pools_lines(config: CloudConfig) -> list[str]:
    """The pools: each one's claim service, topic and pipelines (docs/pools.md)."""
    found = config.pools()
    topic = config.topology.jobs_topic
    if not found.declared:
        where = config.pools_file or "no pools file"
        return [f"  pools              none: claim serves every pipeline ({where})"]
    lines = [f"  pools              {config.pools_file}"]
    for name in found.names:
        pool = found.get(name)
        what = ", ".join(pool.pipelines) if pool.pipelines else "every pipeline no pool names"
        service, pool_topic = pool_service(name), pools.topic_of(topic, name)
        lines.append(
            f"    {name:<14} service {service:<14} topic {pool_topic:<22} "
            f"runner {pool.runner}: {what}"
        )
    return lines


def describe(cloud: LocalCloud) -> str:
    """The banner: endpoints, a client env and a curl to submit a job."""
    e = cloud.endpoints
    lines = ["reclaim local cloud is up.", "", f"  Dashboard: {e['dashboard']}/", ""]
    if cloud.config.storage_dir is not None:
        lines[1:1] = [
            f"Kept state: {cloud.config.storage_dir}; {cloud.rung_at_start} pending job(s) "
            "rung again (the Pub/Sub emulator's messages are in memory)."
        ]
    lines += [f"  {k:<26} {v}" for k, v in e.items()]
    lines += ["", "Client environment (the reclaim CLI run in the project finds it itself):"]
    lines += [f"  export {k}={v}" for k, v in cloud.client_env().items()]
    lines += [
        "",
        "Submit a job:",
        f"  curl -s -X POST {e['jobs']} -H 'Content-Type: application/json' \\",
        '       -d \'{"pipeline": "demo", "payload": {"stages": 3, "sleep_s": 1}}\'',
        "Pause a pipeline (the operator routes are the admin function's):",
        f"  curl -s -X POST -H 'Content-Type: application/json' {e['admin']}/pipelines/demo/pause",
        "Upload a file (becomes a job through the GCS notification):",
        f"  curl -s -X POST --data-binary @README.md '{e['storage_emulator_host']}"
        f"/upload/storage/v1/b/{e['uploads_bucket']}/o?uploadType=media&name=README.md'",
    ]
    if "cloudrun_admin" in e:
        lines += [
            "Watch the platform (instances, cold starts, pending, 429s, billing):",
            f"  curl -s {e['cloudrun_admin']}/stats",
        ]
    lines += [
        "",
        f"Logs: {e['log_dir']}/*.log (cloudrun.log: instance starts and stops)"
        "    Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def _help() -> str:
    rows = [f"  {v.name:<30} default {v.default!r:<22} {v.doc}" for v in VARS]
    return "\n".join([__doc__ or "", *rows])


def _say(line: str) -> None:
    print(f"local cloud: {line}", file=sys.stderr, flush=True)


def _watch(cloud: LocalCloud, reloader: Reloader | None) -> None:
    """Until interrupted: roll the functions over when the pipeline modules change
    (reclaim.local.reload), and say once when a child dies that nobody stopped."""
    reported: set[str] = set()
    while True:
        time.sleep(1.0)
        if reloader is not None:
            reloader.poll()
        for name, rc in cloud.dead_children().items():
            if name not in reported:
                reported.add(name)
                print(
                    f"local cloud: {name} died (exit code {rc}); see its log",
                    file=sys.stderr,
                    flush=True,
                )


def schedules_problem(config: CloudConfig, env: Mapping[str, str]) -> str | None:
    """Why the schedules file would be refused, naming the entry, or None: `make dev`
    does not start on a file `terraform plan` refuses (terraform/schedules.tf), nor on an
    entry naming a pipeline the functions would not load."""
    if config.schedules_file is None:
        return None
    modules = config.function_env.get(
        "RECLAIM_PIPELINE_MODULES", env.get("RECLAIM_PIPELINE_MODULES", "")
    )
    try:
        load_modules(m.strip() for m in modules.split(",") if m.strip())
        schedules.load(config.schedules_file, pipeline_names())
    except InvalidInput as exc:
        return f"{config.schedules_file}: {exc.reason}"
    except PipelineModuleError as exc:
        return str(exc)
    return None


def _prepare(argv: list[str], env: Mapping[str, str]) -> CloudConfig | int:
    """The validated config, or the exit code when there is nothing to start."""
    if argv and argv[0] in ("-h", "--help"):
        print(_help())
        return 0
    try:
        tools.require("the local cloud")
    except tools.MissingTools as exc:
        print(f"local cloud: {exc}", file=sys.stderr)
        return 2
    if argv:
        print(
            f"local cloud: no arguments expected (settings are LOCAL_* variables): {argv}",
            file=sys.stderr,
        )
        return 2
    try:
        config = config_from_env(env)
    except LaunchConfigError as exc:
        print(f"local cloud: {exc}", file=sys.stderr)
        return 2
    problem = schedules_problem(config, env)
    if problem is not None:
        print(f"local cloud: {problem}", file=sys.stderr)
        return 2
    for line in retired_vars(env):
        print(f"local cloud: warning: {line} (ignored)", file=sys.stderr)
    for name in unknown_vars(env):
        print(f"local cloud: warning: {name} is not a launcher setting (ignored)", file=sys.stderr)
    busy = busy_ports(config)
    if busy:
        print(
            f"local cloud: ports already in use: {', '.join(busy)} "
            "(set the LOCAL_*_PORT variables, or 0 to pick free ones)",
            file=sys.stderr,
        )
        return 2
    return config


def _modules_now(config: CloudConfig) -> Callable[[], tuple[str, ...]]:
    """The pipeline modules as the environment names them (the functions' own setting
    first, as they are started)."""

    def now() -> tuple[str, ...]:
        raw = config.function_env.get("RECLAIM_PIPELINE_MODULES") or os.environ.get(
            "RECLAIM_PIPELINE_MODULES", ""
        )
        return tuple(m.strip() for m in raw.split(",") if m.strip())

    return now


def run(
    argv: list[str] | None = None, *, modules: Callable[[], tuple[str, ...]] | None = None
) -> int:
    """Foreground loop; SIGINT/SIGTERM stop every child before returning. `modules`: the
    pipeline modules to serve now, looked at every second (reclaim dev: the project's
    [tool.reclaim]); their edits roll the functions over unless LOCAL_RELOAD=off."""
    prepared = _prepare(sys.argv[1:] if argv is None else argv, os.environ)
    if isinstance(prepared, int):
        return prepared
    stopping = False

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        if not stopping:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    print(plan(prepared, os.environ), flush=True)
    cloud = LocalCloud(prepared)
    endpoints_file = read_env(VARS, os.environ)["endpoints_file"]
    wrote = False  # only ever remove the file this run wrote
    code = 0
    try:
        cloud.start()
        print(describe(cloud), flush=True)
        if endpoints_file is not None:
            write_endpoints(cloud, endpoints_file)
            wrote = True
        reloader = None
        if read_env(VARS, os.environ)["reload"]:
            reloader = Reloader(cloud, modules or _modules_now(prepared), _say)
            watched = len(reloader.seen)
            _say(f"watching {watched} file(s) of your pipeline modules: an edit reloads them")
        _watch(cloud, reloader)
    except KeyboardInterrupt:
        print("\nlocal cloud: stopping...", file=sys.stderr, flush=True)
    except Exception as exc:  # a start failure: say why, in one place
        print(f"local cloud: failed to start: {exc}", file=sys.stderr)
        code = 1
    finally:
        stopping = True
        if wrote and endpoints_file is not None:
            endpoints_file.unlink(missing_ok=True)
        cloud.stop()
    return code


def write_endpoints(cloud: LocalCloud, path: Path) -> None:
    """The endpoints and a client's environment as JSON, for scripts and tests that
    start the local cloud (`reclaim dev`) and must find it; written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    client_env = {**cloud.client_env(), "RECLAIM_SUBMIT_URL": cloud.platform.url("submit")}
    doc = {"endpoints": cloud.endpoints, "client_env": client_env, "pid": os.getpid()}
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def _shown(source: str) -> str:
    """A function's source as a person reads it: relative to the library's folder."""
    path = Path(source)
    return (
        str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else source
    )


if __name__ == "__main__":
    sys.exit(run())
