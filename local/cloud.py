"""The local cloud: emulators, wiring, functions and a scheduler, as one object.

``LocalCloud`` is what ``make dev``, the integration tests, the demo and the
chaos test share, so they all run the same topology as terraform deploys:
fake-gcs-server (with upload notifications), the Pub/Sub emulator, each
function under functions-framework on its own port, several claim instances
behind one round-robin URL, and a tick that POSTs to sweep like Cloud Scheduler.

    with LocalCloud.for_tests(claim_instances=2) as cloud:
        requests.post(cloud.endpoints["submit"] + "/jobs", json={...})
        cloud.kill_claim(0)

Every child runs in its own process group; stop() ends the groups, so no
gunicorn worker outlives its instance.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from local import wiring
from local.balancer import Balancer
from local.gcs import start_fake_gcs
from local.procs import (
    free_port,
    function_args,
    signal_group,
    spawn,
    stop,
    stop_all,
    wait_for_port,
    wait_group_stopped,
)

ROOT = Path(__file__).resolve().parent.parent
SCHEDULER_USER_AGENT = "Google-Cloud-Scheduler"
SCHEDULER_ATTEMPT_DEADLINE_SECONDS = 180  # Cloud Scheduler's default for HTTP targets


@dataclass(frozen=True)
class FunctionSpec:
    """Where functions-framework finds a function (paths relative to the repo root)."""

    source: str
    target: str


DEFAULT_FUNCTIONS: Mapping[str, FunctionSpec] = {
    "submit": FunctionSpec("functions/submit/main.py", "submit"),
    "submit_upload": FunctionSpec("functions/submit/main.py", "submit_upload"),
    "claim": FunctionSpec("functions/claim/main.py", "claim"),
    "sweep": FunctionSpec("functions/sweep/main.py", "sweep"),
    "dashboard": FunctionSpec("functions/dashboard/main.py", "dashboard"),
}


@dataclass(frozen=True)
class CloudConfig:
    """Everything a LocalCloud needs; a port of 0 means "pick a free one"."""

    host: str = "127.0.0.1"
    pubsub_port: int = 0
    gcs_port: int = 0
    submit_port: int = 0
    submit_upload_port: int = 0
    claim_port: int = 0
    """The load balancer: the claim function's one URL, as Cloud Functions gives."""
    claim_base_port: int = 0
    """Claim instance i listens on claim_base_port + i (0: free ports)."""
    sweep_port: int = 0
    dashboard_port: int = 0
    emulator_admin_port: int | None = None
    """The emulator's GET /stats, POST /faults port (None: off, 0: free)."""
    topology: wiring.Topology = field(default_factory=wiring.Topology)
    claim_instances: int = 2
    max_concurrent: int = 4
    threads: int | None = None
    """gunicorn threads per function process (None: max_concurrent + 4, so a
    full instance can still answer 429 at once)."""
    stale_seconds: float = 30.0
    sweep_interval_seconds: float = 3.0
    """Scheduler tick period; 0 = no tick (a test calls sweep itself)."""
    function_env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for every function (e.g. RECLAIM_MAX_ATTEMPTS)."""
    duplicate_fraction: float = 0.0
    drop_publish_fraction: float = 0.0
    seed: int | None = None
    log_dir: Path = ROOT / ".local-cloud" / "logs"
    functions_storage_host: str | None = None
    """STORAGE_EMULATOR_HOST the functions see (a fault proxy); None: fake-gcs itself."""
    functions: Mapping[str, FunctionSpec] = field(default_factory=lambda: dict(DEFAULT_FUNCTIONS))
    start_timeout: float = 30.0

    def validate(self) -> None:
        """Raise ValueError with a clear message for a setting that cannot work."""
        ports = {f.name: getattr(self, f.name) for f in fields(self) if f.name.endswith("_port")}
        for name, port in ports.items():
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name}={port} must be within 0..65535")
        if not 0 <= self.claim_instances <= 64:
            raise ValueError(f"claim_instances={self.claim_instances} must be within 0..64")
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent={self.max_concurrent} must be >= 1")
        if self.threads is not None and self.threads < self.max_concurrent:
            raise ValueError("threads must be >= max_concurrent")
        if self.stale_seconds < 3:
            raise ValueError(f"stale_seconds={self.stale_seconds} must be >= 3")
        if self.sweep_interval_seconds < 0:
            raise ValueError("sweep_interval_seconds must be >= 0")
        for name in ("duplicate_fraction", "drop_publish_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be within 0..1")
        missing = set(DEFAULT_FUNCTIONS) - set(self.functions)
        if missing:
            raise ValueError(f"functions lacks {sorted(missing)}")
        fixed = [p for p in ports.values() if p]
        fixed += [
            self.claim_base_port + i for i in range(1, self.claim_instances) if self.claim_base_port
        ]
        if len(fixed) != len(set(fixed)):
            raise ValueError(f"ports collide: {sorted(fixed)}")


@dataclass
class _Instance:
    index: int
    port: int
    proc: subprocess.Popen[bytes]
    paused: bool = False


class LocalCloud:
    """The whole local stack; start() brings it up, stop() leaves nothing behind."""

    def __init__(self, config: CloudConfig | None = None) -> None:
        self.config = config or CloudConfig()
        self.config.validate()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._claims: dict[int, _Instance] = {}
        self._ports: dict[str, int] = {}
        self._balancer: Balancer | None = None
        self._scheduler: threading.Thread | None = None
        self._stop_tick = threading.Event()
        self._lock = threading.Lock()
        self.sweep_ticks: list[int] = []
        """HTTP status of each scheduler tick (-1: no answer), newest last."""
        self.started = False

    # ------------------------------------------------------------ factories

    @classmethod
    def for_tests(cls, **overrides: Any) -> LocalCloud:
        """Free ports, a unique log dir, the emulator admin API on; start with ``with``.

        overrides are CloudConfig fields or Topology fields (e.g. min_backoff_seconds).
        """
        topo_names = {f.name for f in fields(wiring.Topology)}
        topo = {k: overrides.pop(k) for k in list(overrides) if k in topo_names}
        base = CloudConfig(
            log_dir=ROOT / ".local-cloud" / "test-logs" / f"cloud-{uuid.uuid4().hex[:8]}",
            emulator_admin_port=0,
        )
        if topo:
            overrides["topology"] = replace(overrides.get("topology", base.topology), **topo)
        return cls(replace(base, **overrides))

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalCloud:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Emulators, topics, buckets, functions, subscriptions, then the scheduler tick."""
        if self.started:
            raise RuntimeError("already started")
        self.started = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        c, t = self.config, self.config.topology
        c.log_dir.mkdir(parents=True, exist_ok=True)
        self._resolve_ports()
        self._start_emulator()
        pub, sub = wiring.pubsub_admin_clients(self.pubsub_host)
        try:
            # fake-gcs publishes upload notifications: its topic must exist first.
            wiring.ensure_topics(t, pub)
            self._procs["fake-gcs"] = start_fake_gcs(
                c.host,
                self._ports["gcs"],
                pubsub_emulator_host=self.pubsub_host,
                event_project=t.project,
                event_topic=t.uploads_topic,
                event_bucket=t.uploads_bucket,
                log_path=c.log_dir / "fake-gcs.log",
            )
            wiring.ensure_buckets(t, wiring.storage_client(self.gcs_url, t.project))
            self._start_functions()
            wiring.ensure_subscriptions(t, sub, self.function_urls())
        finally:
            pub.transport.close()
            sub.transport.close()
        if c.sweep_interval_seconds > 0:
            self._stop_tick.clear()
            self._scheduler = threading.Thread(
                target=self._tick_loop, name="scheduler", daemon=True
            )
            self._scheduler.start()

    def stop(self) -> None:
        """Stop the tick, the balancer and every child group; safe to call twice."""
        self._stop_tick.set()
        if self._balancer is not None:
            self._balancer.stop()
            self._balancer = None
        with self._lock:
            functions = [inst.proc for inst in self._claims.values()]
        functions += [
            self._procs[n]
            for n in ("submit", "submit_upload", "sweep", "dashboard")
            if n in self._procs
        ]
        # functions first (they talk to the emulators), then the emulators.
        stop_all(functions)
        stop_all([self._procs[n] for n in ("fake-gcs", "pubsub") if n in self._procs])
        if self._scheduler is not None:  # its POST ended with the sweep process
            self._scheduler.join(timeout=10)
            self._scheduler = None
        self.started = False

    # ------------------------------------------------------------ addresses

    @property
    def pubsub_host(self) -> str:
        return f"{self.config.host}:{self._ports['pubsub']}"

    @property
    def gcs_url(self) -> str:
        return f"http://{self.config.host}:{self._ports['gcs']}"

    def _url(self, key: str) -> str:
        return f"http://{self.config.host}:{self._ports[key]}"

    def function_urls(self) -> dict[str, str]:
        """The one URL of each function (claim: the balancer)."""
        names = ("submit", "submit_upload", "claim", "sweep", "dashboard")
        return {name: self._url(name) for name in names}

    @property
    def endpoints(self) -> dict[str, str]:
        """Addresses and names a client, test or demo needs."""
        t = self.config.topology
        out = {
            **self.function_urls(),
            "jobs": self._url("submit") + "/jobs",
            "pubsub_emulator_host": self.pubsub_host,
            "storage_emulator_host": self.gcs_url,
            "functions_storage_host": self.config.functions_storage_host or self.gcs_url,
            "project": t.project,
            "records_bucket": t.records_bucket,
            "uploads_bucket": t.uploads_bucket,
            "jobs_topic": t.jobs_topic,
            "uploads_topic": t.uploads_topic,
            "dead_letter_topic": t.dead_letter_topic,
            "dead_letter_subscription": wiring.DEAD_LETTER_SUBSCRIPTION,
            "log_dir": str(self.config.log_dir),
        }
        if "admin" in self._ports:
            out["emulator_admin"] = self._url("admin")
        return out

    def client_env(self) -> dict[str, str]:
        """Environment for a client process (the reclaim CLI, a test) to reach this cloud."""
        t = self.config.topology
        return {
            "PUBSUB_EMULATOR_HOST": self.pubsub_host,
            "STORAGE_EMULATOR_HOST": self.gcs_url,
            "GOOGLE_CLOUD_PROJECT": t.project,
            "RECLAIM_PROJECT": t.project,
            "RECLAIM_RECORDS_BUCKET": t.records_bucket,
            "RECLAIM_JOBS_TOPIC": t.jobs_topic,
            "RECLAIM_STALE_SECONDS": str(self.config.stale_seconds),
            "RECLAIM_MAX_CONCURRENT": str(self.config.max_concurrent),
        }

    # ------------------------------------------------------------ claim instances

    def claim_pids(self) -> dict[int, int]:
        """index -> pid (= process group) of every claim instance still running."""
        with self._lock:
            return {
                i: inst.proc.pid for i, inst in self._claims.items() if inst.proc.poll() is None
            }

    def claim_urls(self) -> dict[int, str]:
        """index -> direct URL of each running instance (bypassing the balancer)."""
        with self._lock:
            return {
                i: f"http://{self.config.host}:{inst.port}"
                for i, inst in self._claims.items()
                if inst.proc.poll() is None
            }

    @property
    def balancer(self) -> Balancer:
        if self._balancer is None:
            raise RuntimeError("not started")
        return self._balancer

    def start_claim(self) -> int:
        """Start a fresh claim instance behind the balancer; returns its index."""
        with self._lock:
            index = max(self._claims, default=-1) + 1
        c = self.config
        port = c.claim_base_port + index if c.claim_base_port else free_port()
        proc = self._spawn_function("claim", port, f"claim-{index}", instance=index)
        with self._lock:
            self._claims[index] = _Instance(index, port, proc)
        self._wait_function(f"claim-{index}", port, proc)
        self.balancer.add(index, c.host, port)
        return index

    def kill_claim(self, index: int, sig: int = signal.SIGKILL) -> None:
        """The platform takes instance `index` away: unroute it, then signal its group."""
        inst = self._instance(index)
        self.balancer.remove(index)
        signal_group(inst.proc, sig)
        if sig == signal.SIGKILL:
            inst.proc.wait()
            stop(inst.proc)  # reaps any member that survived

    def pause_claim(self, index: int, *, unroute: bool = False) -> None:
        """Freeze instance `index` (SIGSTOP): a silent owner that still holds its jobs.

        By default it stays routed, like an instance that hangs; unroute=True
        also takes it out of the balancer.
        """
        inst = self._instance(index)
        if unroute:
            self.balancer.remove(index)
        if signal_group(inst.proc, signal.SIGSTOP):
            wait_group_stopped(inst.proc.pid, True)
        inst.paused = True

    def resume_claim(self, index: int) -> None:
        """Wake instance `index` (SIGCONT) and route to it again."""
        inst = self._instance(index)
        if signal_group(inst.proc, signal.SIGCONT):
            wait_group_stopped(inst.proc.pid, False)
        inst.paused = False
        if inst.proc.poll() is None:
            self.balancer.add(index, self.config.host, inst.port)

    def _instance(self, index: int) -> _Instance:
        with self._lock:
            if index not in self._claims:
                raise KeyError(f"no claim instance {index}")
            return self._claims[index]

    def pids(self) -> dict[str, int]:
        """name -> pid of every child started (running or not), for orphan checks."""
        out = {name: p.pid for name, p in self._procs.items()}
        with self._lock:
            out.update({f"claim-{i}": inst.proc.pid for i, inst in self._claims.items()})
        return out

    def dead_children(self) -> dict[str, int]:
        """name -> exit code of children that exited although nobody stopped them."""
        out = {n: p.returncode for n, p in self._procs.items() if p.poll() is not None}
        with self._lock:
            out.update(
                {
                    f"claim-{i}": inst.proc.returncode
                    for i, inst in self._claims.items()
                    if inst.proc.poll() is not None
                }
            )
        return out

    # ------------------------------------------------------------ internals

    def _resolve_ports(self) -> None:
        c = self.config
        wanted = {
            "pubsub": c.pubsub_port,
            "gcs": c.gcs_port,
            "submit": c.submit_port,
            "submit_upload": c.submit_upload_port,
            "claim": c.claim_port,
            "sweep": c.sweep_port,
            "dashboard": c.dashboard_port,
        }
        if c.emulator_admin_port is not None:
            wanted["admin"] = c.emulator_admin_port
        self._ports = {k: v or free_port() for k, v in wanted.items()}

    def _start_emulator(self) -> None:
        c = self.config
        args = emulator_args(c, self._ports["pubsub"], self._ports.get("admin"))
        log = c.log_dir / "pubsub-emulator.log"
        proc = spawn(args, env=_child_env(), log_path=log, cwd=ROOT, die_with_parent=True)
        self._procs["pubsub"] = proc
        _wait_logged(c.host, self._ports["pubsub"], proc, log, c.start_timeout)
        if "admin" in self._ports:
            _wait_logged(c.host, self._ports["admin"], proc, log, c.start_timeout)

    def _start_functions(self) -> None:
        c = self.config
        self._balancer = Balancer(
            c.host, self._ports["claim"], read_timeout=c.topology.claim_ack_deadline_seconds + 60
        )
        self._balancer.start()
        waiting = []
        for name in ("submit", "submit_upload", "sweep", "dashboard"):
            proc = self._spawn_function(name, self._ports[name], name)
            self._procs[name] = proc
            waiting.append((name, self._ports[name], proc))
        for index in range(c.claim_instances):
            port = c.claim_base_port + index if c.claim_base_port else free_port()
            proc = self._spawn_function("claim", port, f"claim-{index}", instance=index)
            self._claims[index] = _Instance(index, port, proc)
            waiting.append((f"claim-{index}", port, proc))
        for label, port, proc in waiting:  # they start in parallel; wait for each
            self._wait_function(label, port, proc)
        for index, inst in self._claims.items():
            self._balancer.add(index, c.host, inst.port)

    def _function_env(self, name: str, instance: int | None) -> dict[str, str]:
        c, t = self.config, self.config.topology
        env = _child_env()
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "PUBSUB_EMULATOR_HOST": self.pubsub_host,
                "STORAGE_EMULATOR_HOST": c.functions_storage_host or self.gcs_url,
                "GOOGLE_CLOUD_PROJECT": t.project,
                "RECLAIM_PROJECT": t.project,
                "RECLAIM_RECORDS_BUCKET": t.records_bucket,
                "RECLAIM_JOBS_TOPIC": t.jobs_topic,
                "RECLAIM_MAX_CONCURRENT": str(c.max_concurrent),
                "RECLAIM_STALE_SECONDS": str(c.stale_seconds),
                # the dashboard: its dead letters, and its charts from the functions' logs
                "RECLAIM_DEAD_LETTER_SUBSCRIPTION": wiring.DEAD_LETTER_SUBSCRIPTION,
                "RECLAIM_METRICS_SOURCE": f"logs:{c.log_dir}",
                # functions-framework 3.10 reads these for its gunicorn (one worker,
                # a thread per concurrent request), like Cloud Run's concurrency.
                "WORKERS": "1",
                "THREADS": str(c.threads or c.max_concurrent + 4),
                "K_SERVICE": name,
                "K_REVISION": f"{name}-local" if instance is None else f"{name}-local-{instance}",
            }
        )
        env.update(c.function_env)
        return env

    def _spawn_function(
        self, name: str, port: int, label: str, instance: int | None = None
    ) -> subprocess.Popen[bytes]:
        c = self.config
        spec = c.functions[name]
        source = ROOT / spec.source
        if not source.exists():
            raise FileNotFoundError(f"{name}: {source} does not exist (yet?)")
        args = function_args(source, spec.target, c.host, port)
        return spawn(
            args,
            env=self._function_env(name, instance),
            log_path=c.log_dir / f"{label}.log",
            cwd=ROOT,
            die_with_parent=True,
        )

    def _wait_function(self, label: str, port: int, proc: subprocess.Popen[bytes]) -> None:
        c = self.config
        _wait_logged(c.host, port, proc, c.log_dir / f"{label}.log", c.start_timeout)

    def _tick_loop(self) -> None:
        """POST to sweep every interval, as Cloud Scheduler does (ticks never overlap)."""
        c = self.config
        log = c.log_dir / "scheduler.log"
        url = self._url("sweep")
        body = json.dumps({"source": "local-scheduler"}).encode()
        while not self._stop_tick.wait(c.sweep_interval_seconds):
            status, text = _post(url, body, timeout=SCHEDULER_ATTEMPT_DEADLINE_SECONDS)
            self.sweep_ticks.append(status)
            del self.sweep_ticks[:-1000]
            with open(log, "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} POST {url} -> {status} {text[:300]}\n")


def emulator_args(config: CloudConfig, port: int, admin_port: int | None) -> list[str]:
    """The emulator's command line: address, admin API and fault knobs."""
    args = [
        sys.executable,
        "-m",
        "local.pubsub_emulator",
        "--host",
        config.host,
        "--port",
        str(port),
    ]
    if admin_port is not None:
        args += ["--admin-port", str(admin_port)]
    if config.duplicate_fraction:
        args += ["--duplicate-fraction", str(config.duplicate_fraction)]
    if config.drop_publish_fraction:
        args += ["--drop-publish-fraction", str(config.drop_publish_fraction)]
    if config.seed is not None:
        args += ["--seed", str(config.seed)]
    return args


def _post(url: str, body: bytes, timeout: float) -> tuple[int, str]:
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": SCHEDULER_USER_AGENT},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except OSError as exc:
        return -1, f"{type(exc).__name__}: {exc}"


def _child_env() -> dict[str, str]:
    """The parent's environment minus emulator pointers a test may have set for itself."""
    drop = {"PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _wait_logged(
    host: str, port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    """wait_for_port, with the tail of the child's log in the error."""
    try:
        wait_for_port(host, port, timeout=timeout, proc=proc)
    except (RuntimeError, TimeoutError) as exc:
        tail = ""
        if log.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{exc}\n--- {log} (tail) ---\n{tail}") from None


def main(argv: list[str] | None = None) -> int:
    """`python -m local.cloud` (make dev): run the local cloud in the foreground."""
    from local.dev import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
