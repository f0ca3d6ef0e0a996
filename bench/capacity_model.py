"""How many jobs/s a reclaim deployment carries, from the platform's documented limits.

Pure: no I/O, no services. bench/capacity.py replays bursts against it and
docs/capacity.md explains it. A job's record and its pending marker are objects in
Cloud Storage, so every job asks a bucket for a fixed number of object writes and
reads (measured by bench/calls.py); a bucket starts at about 1,000 writes/s and
5,000 reads/s and may double its rate no faster than every 20 minutes. A "shard" is
either a bucket of its own ("buckets": each has that start and that ramp) or a hashed
prefix in one bucket ("prefixes": they spread the object-key index hotspot but share
one bucket's start and ramp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

CHECKED = "2026-12-02"
REQUEST_RATE = "https://cloud.google.com/storage/docs/request-rate"
GCS_QUOTAS = "https://cloud.google.com/storage/quotas"
PUBSUB_QUOTAS = "https://cloud.google.com/pubsub/quotas"
RUN_QUOTAS = "https://cloud.google.com/run/quotas"
RUN_MAX_INSTANCES = "https://cloud.google.com/run/docs/configuring/max-instances-limits"
RUN_TIMEOUT = "https://cloud.google.com/run/docs/configuring/request-timeout"

LIMITS: dict[str, dict[str, Any]] = {
    "bucket_writes_per_s": {
        "value": 1000.0,
        "shown": "~1,000 object writes/s per bucket, uploads, updates and deletes included",
        "source": REQUEST_RATE,
        "confirmed": True,
    },
    "bucket_reads_per_s": {
        "value": 5000.0,
        "shown": "~5,000 object reads/s per bucket, listings and metadata reads included",
        "source": REQUEST_RATE,
        "confirmed": True,
    },
    "ramp_doubling_s": {
        "value": 1200.0,
        "shown": "past those rates, double the request rate no faster than every 20 minutes",
        "source": REQUEST_RATE,
        # read in the page's stored translations (zh-CN, ja, de); the stored English copy
        # stops before that section
        "confirmed": True,
    },
    "object_writes_per_s": {
        "value": 1.0,
        "shown": "about one write per second to the same object name",
        "source": GCS_QUOTAS,
        "confirmed": True,
    },
    "sequential_names": {
        "value": None,
        "shown": "sequential names (timestamps, counters) make index-range scaling slow: "
        "new key ranges need the same gradual ramp",
        "source": REQUEST_RATE,
        "confirmed": True,
    },
    "pubsub_publish_bytes_per_s": {
        "value": 200e6,
        "shown": "publisher throughput 12,000,000 kB/min (200 MB/s) per large region "
        "(europe-west1, us-central1, us-east1); 50 MB/s elsewhere",
        "source": PUBSUB_QUOTAS,
        "confirmed": True,
    },
    "pubsub_push_rate": {
        "value": None,
        "shown": "push delivery has no fixed rate: Pub/Sub adjusts it to the rate of "
        "success responses (so it follows Cloud Run's capacity)",
        "source": "https://cloud.google.com/pubsub/docs/push",
        "confirmed": True,
    },
    "run_concurrency_max": {
        "value": 1000,
        "shown": "at most 1,000 concurrent requests per instance",
        "source": RUN_QUOTAS,
        "confirmed": True,
    },
    "run_instances_max": {
        "value": 1000,
        "shown": "max instances = regional vCPU (or memory) quota / the service's size: "
        "1,000 for a 1-vCPU service at a 1,000-vCPU baseline (quota can be raised)",
        "source": RUN_MAX_INSTANCES,
        "confirmed": True,
    },
    "run_request_timeout_s": {
        "value": 3600.0,
        "shown": "a request may run up to 60 minutes (default 5)",
        "source": RUN_TIMEOUT,
        "confirmed": True,
    },
}


def limit(name: str) -> float:
    value = LIMITS[name]["value"]
    if value is None:
        raise KeyError(f"{name} is a documented caveat without a figure")
    return float(value)


# Measured per job (bench/calls.py, results.json): a job of S stages costs S+4 mutations
# (S+3 writes, one delete), 1.1-1.5 object reads and 1-2 listings, one publish.
READS_PER_JOB = 1.5
LISTS_PER_JOB = 2.0
PUBLISHES_PER_JOB = 1.0
DOORBELL_BYTES = 1000
"""A doorbell (a job id) is far smaller; counted as 1,000 bytes, Pub/Sub's billing minimum
per request, so the quota figure errs on the safe side."""
PLACE_WRITES_PER_JOB = 2
"""Flow control: a keyed job writes its place object twice (take, release)."""


@dataclass(frozen=True)
class JobOps:
    """Object requests one job asks of Cloud Storage, as the request-rate guidance counts."""

    writes: float  # uploads, updates and deletes
    reads: float  # object reads, metadata reads and listings
    class_a: float  # writes and listings (deletes are free): what is billed as class A


def job_ops(stages: int, reads: float = READS_PER_JOB, lists: float = LISTS_PER_JOB) -> JobOps:
    if stages < 1:
        raise ValueError(f"stages={stages} must be at least 1")
    mutations = stages + 4
    return JobOps(writes=mutations, reads=reads + lists, class_a=mutations - 1 + lists)


@dataclass(frozen=True)
class Deployment:
    stages: int = 3
    shards: int = 1
    layout: str = "buckets"  # or "prefixes": hashed prefixes in one bucket
    stage_s: float = 1.0
    slots_per_instance: int = 4  # claim's concurrency (terraform's default)
    max_instances: int = 1000
    max_running_per_key: int | None = None  # a flow-control key every job shares

    def __post_init__(self) -> None:
        if self.layout not in ("buckets", "prefixes"):
            raise ValueError(f"layout={self.layout!r}: 'buckets' or 'prefixes'")
        if self.shards < 1 or self.slots_per_instance < 1 or self.max_instances < 1:
            raise ValueError("shards, slots_per_instance and max_instances must be >= 1")
        if self.slots_per_instance > limit("run_concurrency_max"):
            raise ValueError(
                f"slots_per_instance above Cloud Run's {LIMITS['run_concurrency_max']}"
            )

    @property
    def buckets(self) -> int:
        """Buckets that ramp independently."""
        return self.shards if self.layout == "buckets" else 1

    @property
    def job_s(self) -> float:
        """A job's time in a slot (Little's law turns it into slots in use)."""
        return self.stages * self.stage_s

    def with_shards(self, shards: int) -> Deployment:
        return replace(self, shards=shards)


def demand_per_bucket(rate: float, d: Deployment) -> tuple[float, float]:
    """(writes/s, reads/s) that `rate` jobs/s ask of each bucket (spread evenly by hash)."""
    ops = job_ops(d.stages)
    return rate * ops.writes / d.buckets, rate * ops.reads / d.buckets


def bucket_factor(elapsed_saturated_s: float) -> float:
    """How far above its start a bucket's capacity is after that long saturated: it
    doubles once per ramp period, never sooner."""
    return 2.0 ** math.floor(max(elapsed_saturated_s, 0.0) / limit("ramp_doubling_s"))


def storage_jobs_per_s(d: Deployment, factor: float = 1.0) -> float:
    """Jobs/s the buckets carry at `factor` times their starting capacity."""
    ops = job_ops(d.stages)
    per_bucket = min(
        factor * limit("bucket_writes_per_s") / ops.writes,
        factor * limit("bucket_reads_per_s") / ops.reads,
    )
    return d.buckets * per_bucket


def ceilings(d: Deployment) -> dict[str, float]:
    """Jobs/s each limit allows from a cold start (inf where it does not apply)."""
    ops = job_ops(d.stages)
    per_object = math.inf
    if d.max_running_per_key is not None:
        per_object = d.max_running_per_key * limit("object_writes_per_s") / PLACE_WRITES_PER_JOB
    return {
        "bucket writes": d.buckets * limit("bucket_writes_per_s") / ops.writes,
        "bucket reads": d.buckets * limit("bucket_reads_per_s") / ops.reads,
        "per-object writes": per_object,
        "Pub/Sub publish": limit("pubsub_publish_bytes_per_s")
        / (PUBLISHES_PER_JOB * DOORBELL_BYTES),
        "Cloud Run slots": d.max_instances * d.slots_per_instance / d.job_s,
    }


@dataclass(frozen=True)
class Assessment:
    rate: float
    writes_per_s: float  # per bucket
    reads_per_s: float  # per bucket
    carried_from_cold: bool
    binding: str  # the limit with the lowest ceiling
    ramp_s: float | None  # until the buckets' ramp carries the rate; None: never (not storage)
    ceilings: dict[str, float]


STORAGE_LIMITS = ("bucket writes", "bucket reads")


def assess(rate: float, d: Deployment) -> Assessment:
    """Whether `d` carries `rate` jobs/s from a cold start, what binds first, and how long
    the storage ramp takes when storage is what falls short."""
    caps = ceilings(d)
    binding = min(caps, key=lambda k: caps[k])
    writes, reads = demand_per_bucket(rate, d)
    others = min(v for k, v in caps.items() if k not in STORAGE_LIMITS)
    ramp_s: float | None = 0.0
    if rate > others:
        ramp_s = None  # a limit no ramp lifts
    else:
        need = max(writes / limit("bucket_writes_per_s"), reads / limit("bucket_reads_per_s"))
        if need > 1:
            ramp_s = math.ceil(math.log2(need)) * limit("ramp_doubling_s")
    return Assessment(
        rate=rate,
        writes_per_s=writes,
        reads_per_s=reads,
        carried_from_cold=rate <= caps[binding],
        binding=binding,
        ramp_s=ramp_s,
        ceilings=caps,
    )


def shards_needed(rate: float, d: Deployment) -> int | None:
    """The fewest bucket shards that carry `rate` from a cold start; None when a limit
    sharding does not lift (Cloud Run, Pub/Sub, a flow-control key) binds first."""
    one = replace(d, layout="buckets", shards=1)
    caps = ceilings(one)
    if rate > min(v for k, v in caps.items() if k not in STORAGE_LIMITS):
        return None
    return max(1, math.ceil(rate / storage_jobs_per_s(one)))


def slots_needed(rate: float, d: Deployment) -> int:
    """Slots per instance that keep Cloud Run from binding at `rate` (Little's law)."""
    return max(1, math.ceil(rate * d.job_s / d.max_instances))
