"""Worker pools: which claim function runs which pipeline, and how it is sized.

A deployment may split its pipelines into pools (pipelines/pools.json, or the file
RECLAIM_POOLS_FILE names), so a 4K render and a 50 ms webhook no longer share one claim
function, one topic and one size. Each pool has its own topic, push subscription (ack
deadline, retry, dead-letter) and claim function (memory, CPU, concurrency, timeout,
instances, stale time); terraform makes them from the same file (terraform/pools.tf).
A pipeline no pool names belongs to the implicit pool ``default``: today's claim, topic
and pending markers, sized by the deployment's own settings.

    {"pools": {"light": {"pipelines": ["webhook"], "concurrency": 8, "stale_seconds": 60},
               "heavy": {"pipelines": ["render"], "memory": "4Gi", "concurrency": 1}}}

The file is checked whole at load: a bad one is a ConfigError naming the pool and the
field, and nothing starts (submit, claim, sweep, `make dev`; terraform refuses the plan).

What depends on a pool, all pure here (docs/pools.md):
- the doorbell's topic (`topic_of`): the deployment's jobs topic for the default pool,
  ``<jobs topic>-<pool>`` for the others;
- where a job's pending marker lives (`marker_of`): ``pending/<id>`` for the default
  pool (so markers written before pools existed are the default pool's), and
  ``pending/<pool>/<id>`` for the others, so each pool's drain lists only its own;
- the stale time the sweep and status reads judge a job by (`stale_seconds_of`).
Per-key concurrency limits and rates are not per pool: their objects are global.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.errors import ConfigError

DEFAULT = "default"
"""The implicit pool of every pipeline no pool names (today's claim function)."""
POOLS_ENV = "RECLAIM_POOLS_FILE"
POOL_ENV = "RECLAIM_POOL"
ROOT = Path(__file__).resolve().parent.parent  # the repo, or a deployed archive's root
DEFAULT_FILE = ROOT / "pipelines" / "pools.json"

NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
MAX_NAME = 20
"""A pool's name goes into its resources' names (``<prefix>-claim-<pool>``: a Cloud Run
service name is at most 49 characters)."""
RUNNERS = ("push", "job")
"""push: stages run inside the push request (as today); job: on a Cloud Run job."""
MEMORY = re.compile(r"[1-9][0-9]*(?:Mi|Gi)")
"""Cloud Run memory as terraform writes it (https://cloud.google.com/run/docs/configuring/services/memory-limits)."""
CPU = re.compile(r"(?:[1-9][0-9]*|0\.[0-9]+)")

MAX_TIMEOUT_S = 3600  # a gen2 function's request timeout (Cloud Run: at most 60 min)

JOB_RULES_FILE = Path(__file__).resolve().with_name("job_sizing.json")
JOB_RULES: Mapping[str, Any] = json.loads(JOB_RULES_FILE.read_text(encoding="utf-8"))
"""The one set of Cloud Run job sizing rules (defaults, bounds, GPU minimums and regions):
this parser checks a job pool against it at start, terraform reads the same file at plan
(terraform/pools.tf, run_jobs.tf), so the plan takes exactly what the code takes."""
_JOB_DEFAULTS: Mapping[str, Any] = JOB_RULES["defaults"]
MAX_TASK_S = int(JOB_RULES["max_task_timeout_seconds"])
"""A Cloud Run job task runs at most 168 h, one with a GPU at most 1 h
(https://cloud.google.com/run/docs/configuring/task-timeout)."""
MAX_GPU_TASK_S = int(JOB_RULES["max_gpu_task_timeout_seconds"])
MAX_EXECUTIONS = int(JOB_RULES["max_executions_per_region"])
"""Running job executions per project and region (https://cloud.google.com/run/quotas):
the job pools' `max_executions` together stay within it."""
GPU_REGIONS: tuple[str, ...] = tuple(JOB_RULES["gpu_regions"])
"""Where Cloud Run jobs offer GPUs (https://cloud.google.com/run/docs/configuring/jobs/gpu)."""


@dataclass(frozen=True)
class Gpu:
    """A GPU for a pool's Cloud Run job (https://cloud.google.com/run/docs/configuring/jobs/gpu)."""

    type: str = "nvidia-l4"
    count: int = 1


@dataclass(frozen=True)
class JobSizing:
    """The Cloud Run job of a pool whose runner is "job" (defaults: shared/job_sizing.json;
    with a GPU, its type's own: at least 4 CPU and 16 GiB for an L4, an hour at most).
    `max_executions` bounds the pool's running executions (the excess waits queued);
    `start_grace_seconds` is how long a dispatched execution may take to start before its
    job counts as stale (the pool's stale time judges it once its task adopted it)."""

    task_timeout_seconds: int = int(_JOB_DEFAULTS["task_timeout_seconds"])
    memory: str = str(_JOB_DEFAULTS["memory"])
    cpu: str = str(_JOB_DEFAULTS["cpu"])
    gpu: Gpu | None = None
    max_executions: int = int(_JOB_DEFAULTS["max_executions"])
    start_grace_seconds: int = int(_JOB_DEFAULTS["start_grace_seconds"])


@dataclass(frozen=True)
class Pool:
    """One pool: its pipelines and its claim function's sizing. Every field but
    `pipelines` has a default: today's claim sizing (terraform's claim_function and
    claim_push defaults); `stale_seconds` None means the deployment's
    RECLAIM_STALE_SECONDS."""

    name: str
    pipelines: tuple[str, ...] = ()
    memory: str = "1Gi"
    cpu: str = "1"
    concurrency: int = 4
    timeout_seconds: int = 1800
    min_instances: int = 0
    max_instances: int = 10
    stale_seconds: float | None = None
    ack_deadline_seconds: int = 600
    max_delivery_attempts: int = 20
    runner: str = "push"
    job: JobSizing | None = None

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT


@dataclass(frozen=True)
class Pools:
    """The declared pools, and the lookups every part of the queue asks of them."""

    declared: Mapping[str, Pool] = field(default_factory=dict)
    _by_pipeline: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, pools: Iterable[Pool]) -> Pools:
        """Pools from already checked Pool values (parse checks a file's)."""
        declared = {p.name: p for p in pools}
        by_pipeline = {name: p.name for p in declared.values() for name in p.pipelines}
        return cls(declared, by_pipeline)

    @property
    def names(self) -> tuple[str, ...]:
        """Every pool, the default first."""
        return (DEFAULT, *sorted(self.declared))

    def get(self, name: str) -> Pool:
        """A pool by name (the default one included); KeyError for an unknown one."""
        if name == DEFAULT:
            return Pool(DEFAULT)
        return self.declared[name]

    def name_of(self, pipeline: object) -> str:
        """The pool that runs a pipeline (the default one for any it does not name)."""
        return self._by_pipeline.get(pipeline, DEFAULT) if isinstance(pipeline, str) else DEFAULT

    def pool_of(self, pipeline: object) -> Pool:
        return self.get(self.name_of(pipeline))

    def marker_of(self, pipeline: object) -> str | None:
        """Where a job of this pipeline keeps its pending marker: None for the default
        pool (pending/<id>, the layout from before pools), else its pool's folder."""
        name = self.name_of(pipeline)
        return None if name == DEFAULT else name

    def stale_seconds_of(self, pipeline: object, fallback: float) -> float:
        """How long a job of this pipeline's owner may stay silent: its pool's stale time,
        or the deployment's (`fallback`)."""
        stale = self.pool_of(pipeline).stale_seconds
        return fallback if stale is None else stale

    def stale_seconds_for(self, job: Mapping[str, Any], fallback: float) -> float:
        """The stale time a job is judged by now: its pool's (stale_seconds_of), or, while
        the Cloud Run execution its claim started has not been adopted by its task yet,
        at least its job pool's start grace: nothing heartbeats before the task starts,
        and provisioning, image pull and queueing for capacity have no documented bound
        (https://cloud.google.com/run/docs/configuring/jobs/gpu: "start in approximately
        5 seconds" once provisioned), so a slow start is not a silent owner."""
        pipeline = job.get("pipeline")
        stale = self.stale_seconds_of(pipeline, fallback)
        sizing = self.pool_of(pipeline).job
        if sizing is not None and awaiting_start(job):
            return max(stale, float(sizing.start_grace_seconds))
        return stale


NO_POOLS = Pools()


def awaiting_start(job: Mapping[str, Any]) -> bool:
    """True while the record's running attempt was dispatched to a Cloud Run execution
    (shared.claim.dispatch) whose task has not adopted it yet (shared.claim.task)."""
    execution = job.get("execution")
    if job.get("status") != "running" or not isinstance(execution, Mapping):
        return False
    attempts = job.get("attempts")
    return (
        execution.get("attempt") == attempts
        and bool(execution.get("dispatched_at"))
        and not execution.get("adopted_at")
    )


def gpu_region_problem(pool: Pool, region: str) -> str | None:
    """Why this pool's Cloud Run job cannot run in `region`, or None (a GPU job only runs
    where Cloud Run offers GPUs: GPU_REGIONS)."""
    if pool.job is None or pool.job.gpu is None or region in GPU_REGIONS:
        return None
    return (
        f"pool {pool.name!r}: a GPU job runs only in {', '.join(GPU_REGIONS)}, not {region!r} "
        "(https://cloud.google.com/run/docs/configuring/jobs/gpu)"
    )


def topic_of(jobs_topic: str, pool: str) -> str:
    """The doorbell topic of a pool: the deployment's jobs topic for the default pool,
    `<jobs topic>-<pool>` for the others (terraform/pools.tf names them alike)."""
    return jobs_topic if pool == DEFAULT else f"{jobs_topic}-{pool}"


def check_name(name: object) -> str:
    """A pool name as resource names need it; ConfigError otherwise."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise ConfigError(
            f"pool name {name!r} must be lowercase letters, digits and single hyphens, "
            f"starting with a letter, at most {MAX_NAME} characters"
        )
    return name


# ------------------------------------------------------------------------- parsing

_INTS: dict[str, tuple[int, int]] = {
    "concurrency": (1, 1000),
    "timeout_seconds": (10, MAX_TIMEOUT_S),
    "min_instances": (0, 1000),
    "max_instances": (1, 1000),
    "ack_deadline_seconds": (10, 600),  # Pub/Sub's bounds of a push's ack deadline
    "max_delivery_attempts": (5, 100),  # dead_letter_policy's bounds
}
_FIELDS = {f for f in Pool.__dataclass_fields__ if f != "name"}
_JOB_FIELDS = set(JobSizing.__dataclass_fields__)


def parse(doc: object) -> Pools:
    """The pools of a decoded file ({"pools": {name: pool}}); ConfigError naming the pool
    and field of the first problem. An empty object means no pools."""
    if not isinstance(doc, dict) or set(doc) - {"pools"}:
        raise ConfigError('the pools file must be an object with one key, "pools"')
    raw = doc.get("pools", {})
    if not isinstance(raw, dict):
        raise ConfigError('"pools" must be an object: pool name -> pool')
    pools = [_pool(name, spec) for name, spec in raw.items()]
    executions = sum(p.job.max_executions for p in pools if p.job is not None)
    if executions > MAX_EXECUTIONS:
        raise ConfigError(
            f"the job pools' max_executions add up to {executions}: a project runs at most "
            f"{MAX_EXECUTIONS} job executions per region (https://cloud.google.com/run/quotas)"
        )
    owner: dict[str, str] = {}
    for pool in pools:
        for pipeline in pool.pipelines:
            if pipeline in owner:
                raise ConfigError(
                    f"pipeline {pipeline!r} is in two pools, {owner[pipeline]!r} and "
                    f"{pool.name!r}: a pipeline runs in one pool"
                )
            owner[pipeline] = pool.name
    return Pools.of(pools)


def _pool(name: object, spec: object) -> Pool:
    check_name(name)
    assert isinstance(name, str)
    if name == DEFAULT:
        raise ConfigError(
            f"pool {DEFAULT!r} is implicit (every pipeline no pool names; sized by the "
            "deployment's claim settings): give your pool another name"
        )
    if not isinstance(spec, dict):
        raise ConfigError(f"pool {name!r} must be an object")
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise ConfigError(f"pool {name!r}: unknown field(s) {unknown}; known: {sorted(_FIELDS)}")
    try:
        pool = _fields(name, spec)
    except ConfigError as exc:
        raise ConfigError(f"pool {name!r}: {exc}") from None
    return pool


def _fields(name: str, spec: dict[str, Any]) -> Pool:
    pipelines = spec.get("pipelines")
    if (
        not isinstance(pipelines, list)
        or not pipelines
        or not all(isinstance(p, str) and p for p in pipelines)
    ):
        raise ConfigError("pipelines must be a non-empty list of pipeline names")
    if len(set(pipelines)) != len(pipelines):
        raise ConfigError("pipelines lists a pipeline twice")
    values: dict[str, Any] = {"pipelines": tuple(pipelines)}
    for key, (low, high) in _INTS.items():
        if key in spec:
            values[key] = _int(key, spec[key], low, high)
    for key, pattern in (("memory", MEMORY), ("cpu", CPU)):
        if key in spec:
            values[key] = _text(key, spec[key], pattern)
    if "stale_seconds" in spec:
        stale = spec["stale_seconds"]
        if isinstance(stale, bool) or not isinstance(stale, int | float) or stale < 3:
            raise ConfigError(f"stale_seconds must be a number >= 3, not {stale!r}")
        values["stale_seconds"] = float(stale)
    runner = spec.get("runner", "push")
    if runner not in RUNNERS:
        raise ConfigError(f"runner must be one of {list(RUNNERS)}, not {runner!r}")
    values["runner"] = runner
    if "job" in spec and runner != "job":
        raise ConfigError('job sizing is only for runner "job"')
    if runner == "job":
        values["job"] = _job(spec.get("job", {}))
    pool = Pool(name, **values)
    _check_together(pool)
    return pool


def _check_together(pool: Pool) -> None:
    """The rules between fields (terraform's preconditions on the function say the same)."""
    if pool.min_instances > pool.max_instances:
        raise ConfigError("min_instances must not exceed max_instances")
    if pool.concurrency > 1 and float(pool.cpu) < 1:
        raise ConfigError("concurrency > 1 needs cpu >= 1 (Cloud Run)")
    if pool.timeout_seconds < pool.ack_deadline_seconds:
        raise ConfigError(
            "timeout_seconds must be >= ack_deadline_seconds (a push waits the ack deadline "
            "for its answer: the function must not be cut off first)"
        )


def _job(spec: object) -> JobSizing:
    """A job pool's `job` object, defaulted from JOB_RULES (a GPU's type has its own
    defaults) and checked as Cloud Run checks a job (terraform/pools.tf says the same)."""
    if not isinstance(spec, dict):
        raise ConfigError("job must be an object")
    unknown = sorted(set(spec) - _JOB_FIELDS)
    if unknown:
        raise ConfigError(f"job: unknown field(s) {unknown}; known: {sorted(_JOB_FIELDS)}")
    gpu = _gpu(spec["gpu"]) if spec.get("gpu") is not None else None
    base: Mapping[str, Any] = JOB_RULES["gpu"][gpu.type] if gpu is not None else _JOB_DEFAULTS
    longest = MAX_GPU_TASK_S if gpu is not None else MAX_TASK_S
    timeout = spec.get("task_timeout_seconds", base["task_timeout_seconds"])
    cpu = _text("job.cpu", spec.get("cpu", base["cpu"]), CPU)
    memory = _text("job.memory", spec.get("memory", base["memory"]), MEMORY)
    sizing = JobSizing(
        task_timeout_seconds=_int("job.task_timeout_seconds", timeout, 1, longest),
        memory=memory,
        cpu=cpu,
        gpu=gpu,
        max_executions=_int(
            "job.max_executions",
            spec.get("max_executions", _JOB_DEFAULTS["max_executions"]),
            1,
            MAX_EXECUTIONS,
        ),
        start_grace_seconds=_int(
            "job.start_grace_seconds",
            spec.get("start_grace_seconds", _JOB_DEFAULTS["start_grace_seconds"]),
            0,
            int(JOB_RULES["max_start_grace_seconds"]),
        ),
    )
    problem = job_resources_problem(sizing)
    if problem is not None:
        raise ConfigError(problem)
    return sizing


def memory_mib(text: str) -> int:
    """A MEMORY value in MiB ("16Gi" -> 16384)."""
    return int(text[:-2]) * (1024 if text.endswith("Gi") else 1)


def job_resources_problem(sizing: JobSizing) -> str | None:
    """Why Cloud Run would refuse this job's CPU and memory, or None: whole CPUs from
    the documented table with their memory range, a fraction of a vCPU from 0.08 with at
    most 512 MiB below 0.5 and 1 GiB below 1, and a GPU type's minimums (JOB_RULES)."""
    cpu, mib = float(sizing.cpu), memory_mib(sizing.memory)
    rows: Mapping[str, list[int]] = JOB_RULES["cpu_memory_mib"]
    if cpu < 1:
        limits = JOB_RULES["fraction_cpu_max_memory_mib"]
        top = limits["below_half"] if cpu < 0.5 else limits["from_half"]
        if cpu < JOB_RULES["fraction_cpu_min"] or len(sizing.cpu) > 5:  # 0.001 steps
            return f"job.cpu {sizing.cpu!r}: a fraction of a vCPU is 0.08..1 in steps of 0.001"
        low = JOB_RULES["min_memory_mib"]
    elif sizing.cpu in rows:
        low, top = rows[sizing.cpu]
    else:
        return f"job.cpu {sizing.cpu!r}: a job has {', '.join(rows)} vCPU, or a fraction below 1"
    if not low <= mib <= top:
        return f"job.memory {sizing.memory!r}: with {sizing.cpu} vCPU a job has {low}..{top} MiB"
    if sizing.gpu is not None:
        rule = JOB_RULES["gpu"][sizing.gpu.type]
        if cpu < rule["min_cpu"] or mib < rule["min_memory_mib"]:
            return (
                f"job: a {sizing.gpu.type} GPU needs at least {rule['min_cpu']} CPU and "
                f"{rule['min_memory_mib'] // 1024} GiB (https://cloud.google.com/run/docs/"
                "configuring/jobs/gpu)"
            )
    return None


def _gpu(spec: object) -> Gpu:
    if not isinstance(spec, dict) or set(spec) - {"type", "count"}:
        raise ConfigError('job.gpu must be an object with "type" and "count"')
    kind = spec.get("type", Gpu.type)
    if not isinstance(kind, str) or kind not in JOB_RULES["gpu"]:
        known = ", ".join(JOB_RULES["gpu"])
        raise ConfigError(
            f"job.gpu.type must be a GPU Cloud Run jobs offer ({known}), not {kind!r}"
        )
    return Gpu(kind, _int("job.gpu.count", spec.get("count", 1), 1, 1))


def _int(key: str, value: object, low: int, high: int) -> int:
    """A whole number within low..high. JSON's 5.0 is 5 (terraform's jsondecode, which
    checks the same file at plan, has one number type and cannot tell them apart)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key} must be a whole number within {low}..{high}, not {value!r}")
    return value


def _text(key: str, value: object, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        like = "1Gi" if key.endswith("memory") else "1"
        raise ConfigError(f"{key} {value!r} is not valid (like {like!r})")
    return value


# ------------------------------------------------------------------------- the file

_CACHE: dict[str, Pools] = {}
_CACHE_LOCK = threading.Lock()


def load_pools(path: Path | None) -> Pools:
    """The pools of a file (none for None), read once per process and path; ConfigError
    naming the file and the problem."""
    if path is None:
        return NO_POOLS
    key = str(path)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{POOLS_ENV}: {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"pools file {path} is not readable JSON: {exc}") from None
    try:
        pools = parse(doc)
    except ConfigError as exc:
        raise ConfigError(f"pools file {path}: {exc}") from None
    with _CACHE_LOCK:
        _CACHE[key] = pools
    return pools
