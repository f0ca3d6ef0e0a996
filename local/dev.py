"""`make dev`: LOCAL_* settings from the environment, then LocalCloud in the foreground.

    python -m local.dev            (make dev)
    python -m local.dev --help     every LOCAL_* setting with its default

LOCAL_* configure the launcher only; the functions' own RECLAIM_* settings are
read by shared/config.py alone (pass extras through LOCAL_FUNCTION_ENV, or
export RECLAIM_* and they are inherited). Before starting it prints what it
runs: the emulators, each function's Cloud Run sizing, and the settings used.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from local import wiring
from local.cloud import (
    DEFAULT_FUNCTIONS,
    PUSH_WINDOWS,
    ROOT,
    CloudConfig,
    FunctionSpec,
    LocalCloud,
    emulator_args,
)


class LaunchConfigError(ValueError):
    """A LOCAL_* variable is malformed; the message names it."""


@dataclass(frozen=True)
class _Var:
    name: str
    field: str
    default: str
    parse: Callable[[str], Any]
    doc: str


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


VARS: tuple[_Var, ...] = (
    _Var("LOCAL_HOST", "host", "127.0.0.1", str, "Address every local service binds to."),
    _Var("LOCAL_PUBSUB_PORT", "pubsub_port", "8085", _port, "Pub/Sub emulator (gRPC)."),
    _Var(
        "LOCAL_EMULATOR_ADMIN_PORT",
        "emulator_admin_port",
        "8086",
        _opt_port,
        "Emulator GET /stats, POST /faults ('off' to disable).",
    ),
    _Var("LOCAL_GCS_PORT", "gcs_port", "4443", _port, "fake-gcs-server (HTTP)."),
    _Var("LOCAL_SUBMIT_PORT", "submit_port", "8080", _port, "submit function."),
    _Var(
        "LOCAL_SUBMIT_UPLOAD_PORT", "submit_upload_port", "8081", _port, "submit_upload function."
    ),
    _Var(
        "LOCAL_CLAIM_PORT",
        "claim_port",
        "8082",
        _port,
        "The claim function's one URL (its Cloud Run front).",
    ),
    _Var("LOCAL_SWEEP_PORT", "sweep_port", "8083", _port, "sweep function."),
    _Var("LOCAL_DASHBOARD_PORT", "dashboard_port", "8084", _port, "dashboard function (web UI)."),
    _Var(
        "LOCAL_CLOUDRUN_ADMIN_PORT",
        "cloudrun_admin_port",
        "8087",
        _opt_port,
        "Local Cloud Run GET /stats and instance actions ('off' to disable).",
    ),
    _Var(
        "LOCAL_CLAIM_MAX_INSTANCES",
        "max_instances",
        "2",
        int,
        "Claim instances at most (it scales from zero).",
    ),
    _Var("LOCAL_CLAIM_MIN_INSTANCES", "min_instances", "0", int, "Claim instances kept warm."),
    _Var(
        "LOCAL_CLAIM_CONCURRENCY",
        "concurrency",
        "4",
        int,
        "Requests (jobs) one claim instance serves at once; = THREADS = RECLAIM_MAX_CONCURRENT.",
    ),
    _Var(
        "LOCAL_IDLE_TIMEOUT_SECONDS",
        "idle_timeout_seconds",
        "60",
        float,
        "An instance without a request for this long is shut down (Cloud Run: up to 15 min).",
    ),
    _Var(
        "LOCAL_SHUTDOWN_GRACE_SECONDS",
        "shutdown_grace_seconds",
        "10",
        float,
        "SIGTERM, then SIGKILL this much later (Cloud Run: 10).",
    ),
    _Var(
        "LOCAL_PENDING_TIMEOUT_SECONDS",
        "pending_timeout_seconds",
        "",
        _opt_seconds,
        "Wait for a free instance before the platform's 429 (empty: max(10, 3.5 x start-up)).",
    ),
    _Var(
        "LOCAL_PUSH_WINDOW",
        "push_window",
        "adaptive",
        _window,
        "Emulator push flow control: adaptive (the service's) or fixed (32 in flight).",
    ),
    _Var(
        "LOCAL_STALE_SECONDS",
        "stale_seconds",
        "30",
        float,
        "Silence after which a running job's owner is presumed gone.",
    ),
    _Var(
        "LOCAL_SWEEP_INTERVAL_SECONDS",
        "sweep_interval_seconds",
        "3",
        float,
        "Scheduler tick period (0 = none).",
    ),
    _Var("LOCAL_PROJECT", "project", wiring.PROJECT, str, "Project id."),
    _Var("LOCAL_RECORDS_BUCKET", "records_bucket", wiring.RECORDS_BUCKET, str, "Records bucket."),
    _Var("LOCAL_UPLOADS_BUCKET", "uploads_bucket", wiring.UPLOADS_BUCKET, str, "Uploads bucket."),
    _Var(
        "LOCAL_MIN_BACKOFF_SECONDS",
        "min_backoff_seconds",
        str(wiring.LOCAL_MIN_BACKOFF_SECONDS),
        int,
        "Push retry minimum backoff.",
    ),
    _Var(
        "LOCAL_MAX_BACKOFF_SECONDS",
        "max_backoff_seconds",
        str(wiring.LOCAL_MAX_BACKOFF_SECONDS),
        int,
        "Push retry maximum backoff.",
    ),
    _Var(
        "LOCAL_DUPLICATE_FRACTION",
        "duplicate_fraction",
        "0",
        float,
        "Emulator: fraction of deliveries duplicated.",
    ),
    _Var(
        "LOCAL_DROP_PUBLISH_FRACTION",
        "drop_publish_fraction",
        "0",
        float,
        "Emulator: fraction of publishes silently dropped.",
    ),
    _Var("LOCAL_SEED", "seed", "", _opt_int, "Emulator fault RNG seed."),
    _Var(
        "LOCAL_LOG_DIR",
        "log_dir",
        ".local-cloud/logs",
        str,
        "Log directory (relative to the repo root).",
    ),
    _Var(
        "LOCAL_FUNCTIONS_STORAGE_HOST",
        "functions_storage_host",
        "",
        str,
        "STORAGE_EMULATOR_HOST for the functions (a fault proxy); empty = fake-gcs.",
    ),
    _Var(
        "LOCAL_FUNCTION_SOURCES",
        "functions",
        "",
        _sources,
        "Run other code for a function: name=path/main.py:target,... (paths from the repo).",
    ),
    _Var(
        "LOCAL_FUNCTION_ENV",
        "function_env",
        "",
        _env_pairs,
        "Extra function env, e.g. RECLAIM_MAX_ATTEMPTS=5,RECLAIM_LOG_LEVEL=DEBUG.",
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
    values: dict[str, Any] = {}
    for var in VARS:
        raw = env.get(var.name, var.default).strip()
        try:
            values[var.field] = var.parse(raw)
        except ValueError as exc:
            raise LaunchConfigError(f"{var.name}={raw!r} is invalid: {exc}") from None
    topo_values = {k: values.pop(k) for k in _TOPOLOGY_FIELDS}
    try:
        topology = wiring.Topology(**topo_values)
    except ValueError as exc:
        raise LaunchConfigError(f"LOCAL_* names/backoffs are invalid: {exc}") from None
    log_dir = Path(values.pop("log_dir"))
    values["log_dir"] = log_dir if log_dir.is_absolute() else ROOT / log_dir
    values["functions_storage_host"] = values["functions_storage_host"] or None
    config = replace(CloudConfig(), topology=topology, **values)
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
    known = {v.name for v in VARS}
    return sorted(k for k in env if k.startswith("LOCAL_") and k not in known | set(RETIRED))


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
        f"  fake-gcs-server    port {config.gcs_port} (upload notifications on)",
        "  local Cloud Run    one front per function; instances start on the first request",
    ]
    for name, spec in config.functions.items():
        s = config.service_config(name)
        lines.append(
            f"    {name:<14} {spec.source}:{spec.target}  concurrency {s.concurrency} "
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
    if config.sweep_interval_seconds:
        lines.append(f"  scheduler          POST sweep every {config.sweep_interval_seconds:g} s")
    changed = [v for v in VARS if v.name in env and env[v.name].strip() != v.default]
    lines.append(
        "  settings           "
        + (", ".join(f"{v.name}={env[v.name].strip()}" for v in changed) or "all defaults")
        + " (python -m local.dev --help lists them)"
    )
    return "\n".join(lines)


def describe(cloud: LocalCloud) -> str:
    """The banner: endpoints, a client env and a curl to submit a job."""
    e = cloud.endpoints
    lines = ["reclaim local cloud is up.", "", f"  Dashboard: {e['dashboard']}/", ""]
    lines += [f"  {k:<26} {v}" for k, v in e.items()]
    lines += ["", "Client environment (for the reclaim CLI):"]
    lines += [f"  export {k}={v}" for k, v in cloud.client_env().items()]
    lines += [
        "",
        "Submit a job:",
        f"  curl -s -X POST {e['jobs']} -H 'Content-Type: application/json' \\",
        '       -d \'{"pipeline": "demo", "payload": {"stages": 3, "sleep_s": 1}}\'',
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


def _watch(cloud: LocalCloud) -> None:
    """Until interrupted: say once when a child dies that nobody stopped."""
    reported: set[str] = set()
    while True:
        time.sleep(1.0)
        for name, rc in cloud.dead_children().items():
            if name not in reported:
                reported.add(name)
                print(
                    f"local cloud: {name} died (exit code {rc}); see its log",
                    file=sys.stderr,
                    flush=True,
                )


def _prepare(argv: list[str], env: Mapping[str, str]) -> CloudConfig | int:
    """The validated config, or the exit code when there is nothing to start."""
    if argv and argv[0] in ("-h", "--help"):
        print(_help())
        return 0
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


def run(argv: list[str] | None = None) -> int:
    """Foreground loop; SIGINT/SIGTERM stop every child before returning."""
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
    code = 0
    try:
        cloud.start()
        print(describe(cloud), flush=True)
        _watch(cloud)
    except KeyboardInterrupt:
        print("\nlocal cloud: stopping...", file=sys.stderr, flush=True)
    except Exception as exc:  # a start failure: say why, in one place
        print(f"local cloud: failed to start: {exc}", file=sys.stderr)
        code = 1
    finally:
        stopping = True
        cloud.stop()
    return code


if __name__ == "__main__":
    sys.exit(run())
