"""The local cloud: emulators, wiring, functions and a scheduler, as one object.

``LocalCloud`` is what ``make dev``, the integration tests, the demo and the
chaos test share, so they all run the same topology as terraform deploys:
fake-gcs-server (with upload notifications), the Pub/Sub emulator, every
function as a service of the local Cloud Run platform (reclaim/local/cloudrun: one URL
per function, instances under functions-framework started from zero on demand,
capped at their concurrency, queued, scaled in and reclaimed as Cloud Run does),
and a tick that POSTs to sweep like Cloud Scheduler. With a pools file (docs/pools.md),
each pool gets its own claim service, ``claim-<pool>``, fed by its own topic and push
subscription, as terraform deploys them; ``claim`` stays the default pool's.

    with LocalCloud.for_tests(max_instances=2, concurrency=4) as cloud:
        requests.post(cloud.endpoints["submit"] + "/jobs", json={...})
        claim = cloud.service("claim")
        claim.reclaim(next(iter(claim.pids())), graceful=False)
        cloud.deploy_revision("claim", env={"RECLAIM_LOG_LEVEL": "DEBUG"})  # a rollout

Every child runs in its own process group; stop() ends the groups, so no
gunicorn worker outlives its instance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from reclaim.install import LIBRARY, part
from reclaim.local import wiring
from reclaim.local.cloudrun import ConfigError, Platform, Revision, Service, ServiceConfig
from reclaim.local.collector import CollectorServer
from reclaim.local.gcs import start_fake_gcs
from reclaim.local.procs import free_port, function_args, spawn, stop_all, wait_for_port
from reclaim.local.runjobs.cloud import LocalJobs
from shared import pools
from shared.errors import ConfigError as SettingsError
from shared.errors import InvalidInput, PipelineModuleError
from shared.submission import upload_routes
from shared.submission.upload_routes import Routes
from shared.traces.export import COLLECTOR_ENV
from shared.traces.export import ENDPOINT_ENV as TRACES_ENDPOINT_ENV

ROOT = LIBRARY
"""The folder holding reclaim/ and shared/: the functions' working directory and import root."""
FUNCTIONS = part("functions")
SCHEDULER_USER_AGENT = "Google-Cloud-Scheduler"
SCHEDULER_ATTEMPT_DEADLINE_SECONDS = 180  # Cloud Scheduler's default for HTTP targets
PUSH_WINDOWS = ("adaptive", "fixed")
MAX_LOCAL_INSTANCES = 64


@dataclass(frozen=True)
class FunctionSpec:
    """Where functions-framework finds a function (paths relative to the repo root)."""

    source: str
    target: str


DEFAULT_FUNCTIONS: Mapping[str, FunctionSpec] = {
    "submit": FunctionSpec(str(FUNCTIONS / "submit" / "main.py"), "submit"),
    "submit_upload": FunctionSpec(str(FUNCTIONS / "submit" / "main.py"), "submit_upload"),
    "claim": FunctionSpec(str(FUNCTIONS / "claim" / "main.py"), "claim"),
    "sweep": FunctionSpec(str(FUNCTIONS / "sweep" / "main.py"), "sweep"),
    "dashboard": FunctionSpec(str(FUNCTIONS / "dashboard" / "main.py"), "dashboard"),
    "admin": FunctionSpec(str(FUNCTIONS / "admin" / "main.py"), "admin"),  # the operator routes
    # waits: POST /waitpoints/<token> (docs/waiting.md)
    "waitpoints": FunctionSpec(str(FUNCTIONS / "waitpoints" / "main.py"), "waitpoints"),
}


POOL_SERVICE_PREFIX = "claim-"


def pool_service(pool: str) -> str:
    """The claim service of a declared pool (terraform: <prefix>-claim-<pool>); the
    default pool's is "claim"."""
    return "claim" if pool == pools.DEFAULT else f"{POOL_SERVICE_PREFIX}{pool}"


@dataclass(frozen=True)
class Sizing:
    """A function's Cloud Run sizing (terraform: concurrency, min/max instances, timeout)."""

    concurrency: int
    max_instances: int
    min_instances: int = 0
    timeout_seconds: float = 60.0


CLAIM_TIMEOUT_SECONDS = 1800.0
"""terraform's claim_function.timeout_seconds default (above the 600 s ack deadline)."""

DEFAULT_SIZING: Mapping[str, Sizing] = {
    # terraform's concurrency and timeouts; fewer instances than its max, on a laptop
    "submit": Sizing(concurrency=8, max_instances=2, timeout_seconds=180),
    "submit_upload": Sizing(concurrency=16, max_instances=1, timeout_seconds=60),
    "sweep": Sizing(concurrency=1, max_instances=1, timeout_seconds=120),
    "dashboard": Sizing(concurrency=8, max_instances=1, timeout_seconds=60),
    "admin": Sizing(concurrency=8, max_instances=1, timeout_seconds=60),
    "waitpoints": Sizing(concurrency=16, max_instances=1, timeout_seconds=60),
}
"""Sizing of the functions other than claim (claim's is CloudConfig's own fields)."""


@dataclass(frozen=True)
class CloudConfig:
    """Everything a LocalCloud needs; a port of 0 means "pick a free one"."""

    host: str = "127.0.0.1"
    pubsub_port: int = 0
    gcs_port: int = 0
    submit_port: int = 0
    submit_upload_port: int = 0
    claim_port: int = 0
    """The claim service's one URL (its front), as Cloud Functions gives."""
    sweep_port: int = 0
    dashboard_port: int = 0
    admin_port: int = 0
    """The admin function (the operator routes), not an emulator's admin port."""
    waitpoints_port: int = 0
    """The waitpoints function (POST /waitpoints/<token>)."""
    emulator_admin_port: int | None = None
    """The emulator's GET /stats, POST /faults port (None: off, 0: free)."""
    cloudrun_admin_port: int | None = None
    """The platform's GET /stats and instance actions (None: off, 0: free)."""
    topology: wiring.Topology = field(default_factory=wiring.Topology)
    max_instances: int = 2
    """Claim's max instances (it starts from zero; min_instances stay warm)."""
    min_instances: int = 0
    concurrency: int = 4
    """Claim's max_instance_request_concurrency; also THREADS and RECLAIM_MAX_CONCURRENT,
    as terraform sets them: one number."""
    sizing: Mapping[str, Sizing] = field(default_factory=lambda: dict(DEFAULT_SIZING))
    """The other functions' sizing (submit, submit_upload, sweep, dashboard, admin,
    waitpoints)."""
    idle_timeout_seconds: float = 60.0
    """An instance without a request for this long is shut down (Cloud Run: up to ~15 min)."""
    shutdown_grace_seconds: float = 10.0
    """SIGTERM, then SIGKILL this much later (Cloud Run: 10 s)."""
    pending_timeout_seconds: float | None = None
    """How long a request waits for a free instance before the platform's 429
    (None: Cloud Run's rule, max(10 s, 3.5 x the average start-up time))."""
    push_window: str = "adaptive"
    """The emulator's push flow control: "adaptive" (the service's) or "fixed"."""
    push_max_window: int = 32
    """The most pushes of one subscription in flight at once (the emulator's
    --push-concurrency: the adaptive window's ceiling, the fixed window's size)."""
    claim_timeout_seconds: float = CLAIM_TIMEOUT_SECONDS
    """Claim's request timeout: the front answers 504 past it while the instance goes on."""
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
    storage_dir: Path | None = None
    """Where fake-gcs-server keeps the buckets (its filesystem backend), so the records,
    indexes and outputs outlive a restart (`reclaim dev`: the project's .reclaim/storage);
    None: in memory, empty at every start (the tests). The Pub/Sub emulator keeps its
    messages in memory either way: a start with kept state rings the pending index once
    (ring_pending)."""
    functions: Mapping[str, FunctionSpec] = field(default_factory=lambda: dict(DEFAULT_FUNCTIONS))
    python_path: tuple[Path, ...] = ()
    """Folders the functions import your pipeline modules from, after the library's
    (`reclaim dev`: the project's; the repository's pipelines/ need none)."""
    start_timeout: float = 30.0
    schedules_file: Path | None = None
    """Cron schedules ticked as Cloud Scheduler would (time); None: no ticks
    (tests); `make dev`: pipelines/schedules.json or $RECLAIM_SCHEDULES_FILE."""
    claim_runner: str = "push"
    """"job": claim runs gates and the claim, and its stages run on the local Cloud Run jobs
    runner (reclaim/local/runjobs; RECLAIM_RUNNER=job, docs/long-stages.md)."""
    job_task_timeout_seconds: float = 600.0
    """The local Cloud Run job's task timeout (Cloud Run's default: 10 minutes)."""
    uploads_file: Path | None = None
    """Upload routes (docs/pipelines.md, "Uploads"): checked at start, handed to the
    functions as RECLAIM_UPLOADS_FILE, and fake-gcs-server notifies what they need; None:
    no routes, every upload of the uploads bucket becomes an upload-digest job."""
    pools_file: Path | None = None
    """Worker pools (docs/pools.md): checked at construction, handed to every function as
    RECLAIM_POOLS_FILE; each pool gets a claim service `claim-<pool>` sized by the file
    (its topic and subscription too); None: one claim for every pipeline."""

    def pools(self) -> pools.Pools:
        """The pools of pools_file; ValueError naming the problem."""
        try:
            return pools.load_pools(self.pools_file)
        except SettingsError as exc:
            raise ValueError(str(exc)) from None

    def service_names(self) -> list[str]:
        """Every function's service: the five, then one claim per declared pool."""
        return [*DEFAULT_FUNCTIONS, *(pool_service(p) for p in self.pools().declared)]

    def spec(self, name: str) -> FunctionSpec:
        """Where functions-framework finds a service's function (a pool's: claim's)."""
        return self.functions[name if name in self.functions else "claim"]

    def validate(self) -> None:
        """Raise ValueError with a clear message for a setting that cannot work."""
        ports = {f.name: getattr(self, f.name) for f in fields(self) if f.name.endswith("_port")}
        for name, port in ports.items():
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name}={port} must be within 0..65535")
        if not 1 <= self.max_instances <= MAX_LOCAL_INSTANCES:
            raise ValueError(
                f"max_instances={self.max_instances} must be within 1..{MAX_LOCAL_INSTANCES}"
            )
        if self.stale_seconds < 3:
            raise ValueError(f"stale_seconds={self.stale_seconds} must be >= 3")
        if self.sweep_interval_seconds < 0:
            raise ValueError("sweep_interval_seconds must be >= 0")
        if self.push_window not in PUSH_WINDOWS:
            raise ValueError(f"push_window={self.push_window!r} must be one of {PUSH_WINDOWS}")
        if self.claim_runner not in ("push", "job"):
            raise ValueError(f"claim_runner={self.claim_runner!r} must be 'push' or 'job'")
        if self.push_max_window < 1:
            raise ValueError(f"push_max_window={self.push_max_window} must be >= 1")
        for name in ("duplicate_fraction", "drop_publish_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be within 0..1")
        self._check_functions()
        fixed = [p for p in ports.values() if p]
        if len(fixed) != len(set(fixed)):
            raise ValueError(f"ports collide: {sorted(fixed)}")

    def _check_functions(self) -> None:
        missing = set(DEFAULT_FUNCTIONS) - set(self.functions)
        if missing:
            raise ValueError(f"functions lacks {sorted(missing)}")
        unknown = set(self.sizing) - set(DEFAULT_SIZING)
        if unknown:
            raise ValueError(f"sizing names unknown functions {sorted(unknown)}")
        for name in self.service_names():
            try:
                self.service_config(name).validate()
            except ConfigError as exc:
                raise ValueError(str(exc)) from None

    def service_config(self, name: str) -> ServiceConfig:
        """The Cloud Run settings of one function on the local platform."""
        common = {
            "idle_timeout_s": self.idle_timeout_seconds,
            "shutdown_grace_s": self.shutdown_grace_seconds,
            "pending_timeout_s": self.pending_timeout_seconds,
            "start_timeout_s": self.start_timeout,
        }
        if name == "claim":
            return ServiceConfig(
                "claim",
                concurrency=self.concurrency,
                max_instances=self.max_instances,
                min_instances=self.min_instances,
                timeout_s=self.claim_timeout_seconds,
                **common,  # type: ignore[arg-type]
            )
        if name.startswith(POOL_SERVICE_PREFIX):  # a pool's claim, sized by the pools file
            pool = self.pools().get(name[len(POOL_SERVICE_PREFIX) :])
            return ServiceConfig(
                name,
                concurrency=pool.concurrency,
                max_instances=min(pool.max_instances, MAX_LOCAL_INSTANCES),
                min_instances=pool.min_instances,
                timeout_s=min(pool.timeout_seconds, self.claim_timeout_seconds),
                **common,  # type: ignore[arg-type]
            )
        size = self.sizing.get(name, DEFAULT_SIZING[name])
        return ServiceConfig(
            name,
            concurrency=size.concurrency,
            max_instances=size.max_instances,
            min_instances=size.min_instances,
            timeout_s=size.timeout_seconds,
            **common,  # type: ignore[arg-type]
        )


TEST_SHARDS_ENV = "RECLAIM_TEST_SHARDS"
"""How many record buckets LocalCloud.for_tests gives a cloud that names none (default 1):
`RECLAIM_TEST_SHARDS=2 pytest tests/integration` runs the suite on two shards."""


def shards_for_tests() -> int:
    """RECLAIM_TEST_SHARDS as a shard count (1 when unset); ValueError when not one."""
    raw = os.environ.get(TEST_SHARDS_ENV, "").strip() or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= 8:
        raise ValueError(f"{TEST_SHARDS_ENV}={raw!r} must be a shard count from 1 to 8")
    return int(raw)


class LocalCloud:
    """The whole local stack; start() brings it up, stop() leaves nothing behind."""

    def __init__(self, config: CloudConfig | None = None) -> None:
        self.config = config or CloudConfig()
        self.config.validate()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, int] = {}
        self._platform: Platform | None = None
        self._scheduler: threading.Thread | None = None
        self._stop_tick = threading.Event()
        self.sweep_ticks: list[int] = []
        """HTTP status of each scheduler tick (-1: no answer), newest last."""
        self.started = False
        self.routes = Routes()
        self.run_jobs: LocalJobs | None = None
        """The local Cloud Run jobs runner (claim_runner "job"), else None."""
        self.collector: CollectorServer | None = None
        """The OTLP receiver the functions export a job's spans to (reclaim.local.collector)."""
        self.pools = self.config.pools()
        self.topology = wiring.with_pools(self.config.topology, self.pools)
        """The wiring with every pool's topic and subscription (terraform's)."""
        self.rung_at_start = 0
        """Jobs of the kept pending index rung when the cloud started (storage_dir)."""

    # ------------------------------------------------------------ factories

    @classmethod
    def for_tests(cls, **overrides: Any) -> LocalCloud:
        """Free ports, a unique log dir, both admin APIs on; start with ``with``.

        overrides are CloudConfig fields or Topology fields (e.g. min_backoff_seconds).
        """
        topo_names = {f.name for f in fields(wiring.Topology)}
        topo = {k: overrides.pop(k) for k in list(overrides) if k in topo_names}
        base = CloudConfig(
            log_dir=ROOT / ".local-cloud" / "test-logs" / f"cloud-{uuid.uuid4().hex[:8]}",
            emulator_admin_port=0,
            cloudrun_admin_port=0,
        )
        shards = shards_for_tests()
        if shards > 1 and "shard_buckets" not in topo:
            records = topo.get("records_bucket", base.topology.records_bucket)
            topo["shard_buckets"] = tuple(f"{records}-shard-{i}" for i in range(1, shards))
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
        """Emulators, topics, buckets, the platform's fronts, subscriptions, the scheduler.

        No function instance starts here (unless min_instances asks for warm ones):
        the first request to each function is its cold start, as on Cloud Run.
        """
        if self.started:
            raise RuntimeError("already started")
        self.started = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        c, t = self.config, self.topology
        self.routes = self._load_routes()  # a bad routes file stops here, naming the route
        c.log_dir.mkdir(parents=True, exist_ok=True)
        self._resolve_ports()
        # before any function (their env names it), on a port of this run's lane
        self.collector = CollectorServer(c.host, free_port())
        self.collector.start()
        self._start_emulator()
        pub, sub = wiring.pubsub_admin_clients(self.pubsub_host)
        try:
            # fake-gcs publishes upload notifications: its topic must exist first.
            wiring.ensure_topics(t, pub)
            scope = wiring.notification_scope(self.routes.notifications(t.uploads_bucket))
            self._procs["fake-gcs"] = start_fake_gcs(
                c.host,
                self._ports["gcs"],
                pubsub_emulator_host=self.pubsub_host,
                event_project=t.project,
                event_topic=t.uploads_topic if scope is not None else None,
                event_bucket=scope[0] if scope else None,
                event_prefix=scope[1] if scope else None,
                log_path=c.log_dir / "fake-gcs.log",
                root=c.storage_dir,
            )
            storage = wiring.storage_client(self.gcs_url, t.project)
            wiring.ensure_buckets(t, storage, extra=self.routes.buckets)
            self._start_run_jobs()
            self._start_platform()
            wiring.ensure_subscriptions(t, sub, self.function_urls())
            if c.storage_dir is not None:  # kept state: its doorbells were in memory
                self.rung_at_start = self.ring_pending(storage, pub)
        finally:
            pub.transport.close()
            sub.transport.close()
        if c.sweep_interval_seconds > 0:
            self._stop_tick.clear()
            self._scheduler = threading.Thread(
                target=self._tick_loop, name="scheduler", daemon=True
            )
            self._scheduler.start()
        if c.schedules_file is not None:  # time
            self._start_cron(c.schedules_file)

    def ring_pending(self, storage: Any, publisher: Any) -> int:
        """Ring every job of the pending index once, on its pool's topic; how many.

        The records survive a restart (storage_dir) but the emulator's messages do not:
        without this a queued job would wait for the sweep to find its doorbell lost (a
        stale time). A ring the job does not need costs one delivery the claim acks
        (its record says it is not claimable: running, or not due yet)."""
        from shared.doorbell import message_for
        from shared.stores.gcs import GcsStore

        t, rung = self.topology, 0
        for bucket in t.records_buckets:
            for entry in GcsStore(bucket, storage).list_pending():
                pool = self.pools.name_of(entry.pipeline) if entry.pipeline else pools.DEFAULT
                data, attrs = message_for(entry.job_id)
                topic = t.topic_path(pools.topic_of(t.jobs_topic, pool))
                publisher.publish(
                    request={"topic": topic, "messages": [{"data": data, "attributes": attrs}]}
                )
                rung += 1
        return rung

    def _load_routes(self) -> Routes:
        """The upload routes, checked against the pipelines the functions will import (the
        RECLAIM_PIPELINE_MODULES they are given); ValueError naming the route."""
        from shared.pipelines import load_modules, pipeline_names

        path = self.config.uploads_file
        if path is None:
            return Routes()
        env = {**_child_env(), **self.config.function_env}
        modules = [m.strip() for m in env.get("RECLAIM_PIPELINE_MODULES", "").split(",")]
        try:
            load_modules(tuple(m for m in modules if m))
            return upload_routes.load(path, pipeline_names())
        except (InvalidInput, PipelineModuleError) as exc:
            raise ValueError(f"upload routes {path}: {getattr(exc, 'reason', exc)}") from None

    def _start_cron(self, path: Path) -> None:
        """The cron schedules of the file, ticked as Cloud Scheduler would."""
        from reclaim.local.cron_ticker import CronTicker
        from shared.cron.schedules import load

        self._cron = CronTicker(
            self.platform.url("submit"), load(path), self.config.log_dir / "scheduler.log"
        )
        self._cron.start()

    def stop(self) -> None:
        """Stop the tick, the platform (every instance) and the emulators; safe twice."""
        self._stop_tick.set()
        if getattr(self, "_cron", None) is not None:
            self._cron.stop()
        if self._platform is not None:
            # functions first (they talk to the emulators), then the emulators. Every
            # service at once, beside the platform's own stop (which closes the fronts one
            # by one, then finds the services stopping and waits for them): each service
            # waits out its instances' SIGTERM, and one after the other those waits and
            # the fronts' added up to seconds per cloud.
            services = list(self._platform.services.values())
            with ThreadPoolExecutor(len(services) + 1) as pool:
                stops = [pool.submit(service.stop) for service in services]
                stops.append(pool.submit(self._platform.stop))
                for done in stops:
                    done.result()
        if self.run_jobs is not None:  # its tasks talk to the emulators too
            self.run_jobs.stop()
        stop_all([self._procs[n] for n in ("fake-gcs", "pubsub") if n in self._procs])
        if self.collector is not None:  # the functions' last exports are in by now
            self.collector.stop()
            self.collector = None
        if self._scheduler is not None:  # its POST ended with the sweep front
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
        """The one URL of each function (and pool's claim): its front on the local Cloud Run."""
        return {name: self.platform.url(name) for name in self.config.service_names()}

    @property
    def endpoints(self) -> dict[str, str]:
        """Addresses and names a client, test or demo needs."""
        t = self.config.topology
        out = {
            **self.function_urls(),
            "jobs": self.platform.url("submit") + "/jobs",
            "pubsub_emulator_host": self.pubsub_host,
            "storage_emulator_host": self.gcs_url,
            "functions_storage_host": self.config.functions_storage_host or self.gcs_url,
            "project": t.project,
            "records_bucket": t.records_bucket,
            "shard_buckets": ",".join(t.shard_buckets),
            "uploads_bucket": t.uploads_bucket,
            "jobs_topic": t.jobs_topic,
            "uploads_topic": t.uploads_topic,
            "dead_letter_topic": t.dead_letter_topic,
            "dead_letter_subscription": wiring.DEAD_LETTER_SUBSCRIPTION,
            "log_dir": str(self.config.log_dir),
        }
        if "admin" in self._ports:
            out["emulator_admin"] = self._url("admin")
        if self.platform.admin_url is not None:
            out["cloudrun_admin"] = self.platform.admin_url
        if self.run_jobs is not None:
            out["run_jobs"] = self.run_jobs.url
        if self.collector is not None:  # GET /v1/traces/<trace id>: a job's exported spans
            out["trace_collector"] = self.collector.url
        return out

    def client_env(self) -> dict[str, str]:
        """Environment for a client process (the reclaim CLI, a test) to reach this cloud."""
        t = self.config.topology
        return {
            "PUBSUB_EMULATOR_HOST": self.pubsub_host,
            "STORAGE_EMULATOR_HOST": self.gcs_url,
            "GOOGLE_CLOUD_PROJECT": t.project,
            "RECLAIM_PROJECT": t.project,
            **t.records_env(),
            "RECLAIM_JOBS_TOPIC": t.jobs_topic,
            "RECLAIM_STALE_SECONDS": str(self.config.stale_seconds),
            "RECLAIM_MAX_CONCURRENT": str(self.config.concurrency),
            **self._pools_env(),
        }

    def _pools_env(self) -> dict[str, str]:
        """RECLAIM_POOLS_FILE, when there is one: every ringer routes by it."""
        path = self.config.pools_file
        return {} if path is None else {pools.POOLS_ENV: str(path.resolve())}

    # ------------------------------------------------------------ the platform

    @property
    def platform(self) -> Platform:
        """The local Cloud Run (fronts, instances, autoscaling, reclaim)."""
        if self._platform is None:
            raise RuntimeError("not started")
        return self._platform

    def service(self, name: str) -> Service:
        """One function's service: its instances, stats, reclaim/pause/resume."""
        return self.platform.service(name)

    def deploy_revision(
        self,
        name: str,
        env: Mapping[str, str | None] | None = None,
        *,
        pipeline_modules: Sequence[str] | None = None,
        function: FunctionSpec | None = None,
        drain_timeout_seconds: float | None = None,
    ) -> str:
        """Deploy a new revision of one function, as `gcloud run deploy` or a terraform
        apply does, mid-batch if need be; its name (``claim-00002-xyz``). Returns at once:
        the new revision takes the traffic when its first instance listens, the previous
        one's instances finish their requests, then get SIGTERM, the grace, SIGKILL
        (reclaim/local/cloudrun/revision.py; wait on `revisions(name)` for either state).

        env: changes to the function's environment, kept by later revisions (None
        removes a variable); pipeline_modules: sets RECLAIM_PIPELINE_MODULES (the
        pipelines this revision registers); function: new code (source and target);
        drain_timeout_seconds: SIGTERM the previous revision's busy instances after this
        long (default: the request timeout, as on Cloud Run). ValueError for a
        setting Cloud Run would refuse; nothing is deployed then.
        """
        changes: dict[str, str | None] = dict(env or {})
        if pipeline_modules is not None:
            changes["RECLAIM_PIPELINE_MODULES"] = ",".join(pipeline_modules)
        service = self.service(name)
        launcher = None
        if function is not None:
            if not (ROOT / function.source).exists():
                raise ValueError(f"{name}: {ROOT / function.source} does not exist")
            launcher = self._launcher(name, service.config.concurrency, function)
        try:
            revision = service.deploy(
                changes, launcher=launcher, drain_timeout_s=drain_timeout_seconds
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return revision.name

    def revisions(self, name: str) -> dict[str, Any]:
        """One function's revisions: ``serving`` (the one with the traffic), ``latest``,
        and ``revisions``, oldest first, each with its state (deploying, serving,
        retired, failed), ``drained``, ``in_flight`` and ``instances`` by state."""
        return self.service(name).revisions()

    def revision(self, name: str, revision: str) -> dict[str, Any]:
        """One revision of a function, as in `revisions(name)`; KeyError if unknown."""
        for view in self.revisions(name)["revisions"]:
            if view["name"] == revision:
                return dict(view)
        raise KeyError(f"{name} has no revision {revision!r}")

    def pids(self) -> dict[str, int]:
        """name -> pid of every child started (running or not), for orphan checks."""
        out = {name: p.pid for name, p in self._procs.items()}
        if self._platform is not None:
            out.update(self._platform.all_pids())
        if self.run_jobs is not None:
            out.update(self.run_jobs.runner.pids())
        return out

    def dead_children(self) -> dict[str, int | None]:
        """name -> exit code of children that died although nobody stopped them
        (an emulator, or a function instance that crashed)."""
        out: dict[str, int | None] = {
            n: p.returncode for n, p in self._procs.items() if p.poll() is not None
        }
        if self._platform is not None:
            out.update(self._platform.crashed())
        return out

    # ------------------------------------------------------------ internals

    def _resolve_ports(self) -> None:
        c = self.config
        wanted = {"pubsub": c.pubsub_port, "gcs": c.gcs_port}
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

    def _start_run_jobs(self) -> None:
        """The local Cloud Run jobs runner, when claim or a pool runs on a job (a separate
        hook): a job for each, its task with that claim's environment."""
        c = self.config
        job_pools = [n for n, p in self.pools.declared.items() if p.runner == "job"]
        if c.claim_runner != "job" and not job_pools:
            return
        self.run_jobs = LocalJobs(
            c.host,
            c.topology.project,
            c.log_dir,
            task_timeout_s=c.job_task_timeout_seconds,
            grace_s=c.shutdown_grace_seconds,
        )
        self.run_jobs.start()
        if c.claim_runner == "job":
            self.run_jobs.add(self._function_env(threads=1))
        for pool in job_pools:  # with its pool's job sizing (its task timeout, its GPU)
            env = self._function_env(1, pool_service(pool))
            self.run_jobs.add(env, pool, sizing=self.pools.get(pool).job)

    def _start_platform(self) -> None:
        c = self.config
        log = c.log_dir / "cloudrun.log"

        def _write(line: str) -> None:
            with open(log, "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {line}\n")

        self._platform = Platform(c.host, admin_port=c.cloudrun_admin_port, log=_write)
        ports = {
            "submit": c.submit_port,
            "submit_upload": c.submit_upload_port,
            "claim": c.claim_port,
            "sweep": c.sweep_port,
            "dashboard": c.dashboard_port,
            "admin": c.admin_port,
            "waitpoints": c.waitpoints_port,
        }
        for name in c.service_names():
            source = ROOT / c.spec(name).source
            if not source.exists():
                raise FileNotFoundError(f"{name}: {source} does not exist (yet?)")
            config = c.service_config(name)
            launcher = self._launcher(name, config.concurrency)
            self._platform.add(config, launcher, ports.get(name, 0))
        self._platform.start()

    def _launcher(
        self, name: str, threads: int, function: FunctionSpec | None = None
    ) -> Callable[[int, str, Revision], subprocess.Popen[bytes]]:
        """How the platform starts one instance of `name`: functions-framework on `port`,
        with its revision's environment (K_REVISION included)."""
        c = self.config
        spec = function or c.spec(name)

        def launch(port: int, label: str, revision: Revision) -> subprocess.Popen[bytes]:
            args = function_args(ROOT / spec.source, spec.target, c.host, port)
            return spawn(
                args,
                env=revision.instance_env(self._function_env(threads, name), port),
                log_path=c.log_dir / f"{label}.log",
                cwd=ROOT,
                die_with_parent=True,
                long_lived_thread=True,  # the platform's spawner thread
            )

        return launch

    def _function_env(self, threads: int, name: str = "") -> dict[str, str]:
        """Every instance's environment before its revision's (which adds K_REVISION); a
        pool's claim gets its pool's, as terraform sets it (pool_env)."""
        c, t = self.config, self.config.topology
        env = _child_env()
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *c.python_path))),
                "PYTHONUNBUFFERED": "1",
                "PUBSUB_EMULATOR_HOST": self.pubsub_host,
                "STORAGE_EMULATOR_HOST": c.functions_storage_host or self.gcs_url,
                "GOOGLE_CLOUD_PROJECT": t.project,
                "RECLAIM_PROJECT": t.project,
                **t.records_env(),
                "RECLAIM_JOBS_TOPIC": t.jobs_topic,
                "RECLAIM_MAX_CONCURRENT": str(c.concurrency),
                "RECLAIM_STALE_SECONDS": str(c.stale_seconds),
                # as terraform: a push's deadline is the claim subscription's ack deadline
                "RECLAIM_PUSH_DEADLINE_SECONDS": str(t.claim_ack_deadline_seconds),
                # SIGTERM to SIGKILL here (Cloud Run's is 10 s): what a stage may finish in
                "RECLAIM_SHUTDOWN_GRACE_SECONDS": str(c.shutdown_grace_seconds),
                # the dashboard: its dead letters, and its charts from the functions' logs
                "RECLAIM_DEAD_LETTER_SUBSCRIPTION": wiring.DEAD_LETTER_SUBSCRIPTION,
                "RECLAIM_METRICS_SOURCE": f"logs:{c.log_dir}",
                # functions-framework 3.10 reads these for its gunicorn: one worker and
                # exactly one thread per concurrent request, as terraform sets THREADS.
                "WORKERS": "1",
                "THREADS": str(threads),
            }
        )
        if self.collector is not None:  # a job's spans (shared.traces.export), and the
            # dashboard's waterfall reads them back (shared.dashboard.waterfall)
            env[TRACES_ENDPOINT_ENV] = self.collector.traces_endpoint
            env[COLLECTOR_ENV] = self.collector.url
        if c.uploads_file is not None:  # the same file the launcher checked
            env["RECLAIM_UPLOADS_FILE"] = str(c.uploads_file.resolve())
        env["RECLAIM_UPLOADS_BUCKET"] = t.uploads_bucket
        env.update(self._pools_env())
        if name != "waitpoints" and self._platform is not None:  # waits: completion URLs
            env["RECLAIM_WAITPOINT_URL"] = self.platform.url("waitpoints")
        if self.run_jobs is not None:  # the sweep reads executions through it
            env["RECLAIM_RUN_API"] = self.run_jobs.url
        if self.run_jobs is not None and c.claim_runner == "job":
            env.update(self.run_jobs.env)  # RECLAIM_RUNNER, RECLAIM_RUN_JOB
        env.update(c.function_env)
        if name.startswith(POOL_SERVICE_PREFIX):
            env.update(self.pool_env(name[len(POOL_SERVICE_PREFIX) :]))
        return env

    def pool_env(self, name: str) -> dict[str, str]:
        """What a pool's claim is told (terraform/pools.tf sets the same): its pool, its
        concurrency (= THREADS), its stale time and its push's deadline; for a pool whose
        runner is "job", its Cloud Run job (RECLAIM_RUNNER, RECLAIM_RUN_JOB)."""
        pool = self.pools.get(name)
        stale = pool.stale_seconds if pool.stale_seconds is not None else self.config.stale_seconds
        env = {
            pools.POOL_ENV: name,
            "RECLAIM_MAX_CONCURRENT": str(pool.concurrency),
            "THREADS": str(pool.concurrency),
            "RECLAIM_STALE_SECONDS": str(stale),
            "RECLAIM_PUSH_DEADLINE_SECONDS": str(pool.ack_deadline_seconds),
        }
        if pool.runner == "job" and self.run_jobs is not None:
            env.update(self.run_jobs.env_for(name))
        return env

    def _tick_loop(self) -> None:
        """POST to sweep every interval, as Cloud Scheduler does (ticks never overlap)."""
        c = self.config
        log = c.log_dir / "scheduler.log"
        url = self.platform.url("sweep")
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
        "reclaim.local.pubsub_emulator",
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
    args += ["--push-window", config.push_window]
    args += ["--push-concurrency", str(config.push_max_window)]
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
