"""The local cloud as the end-to-end tests run it: a fast LocalCloud on the local Cloud
Run, and the HTTP and log reads they share (waiting: tests.polling)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from reclaim.local.cloud import LocalCloud
from reclaim.local.procs import group_pids
from shared.shards import shard_of
from shared.storage import Store
from shared.stores.factory import open_store
from tests import polling


def fast_cloud(
    max_instances: int, concurrency: int, shutdown_grace_seconds: float = 2.0, **more: Any
) -> LocalCloud:
    """Seconds-scale staleness, sweep and shutdown grace, no backoff, frequent checkpoints
    (`more`: other for_tests overrides, e.g. shard_buckets)."""
    return LocalCloud.for_tests(
        **more,
        max_instances=max_instances,
        concurrency=concurrency,
        stale_seconds=3.0,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=shutdown_grace_seconds,
        function_env={
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
        },
    )


def owner_pid(owner: str) -> int:
    """Owner ids are <host>-<pid>-<random>.<claim>."""
    return int(owner.rsplit(".", 1)[0].split("-")[-2])


def batch(cloud: LocalCloud, batch_id: str) -> dict[str, Any]:
    resp = requests.get(f"{cloud.endpoints['submit']}/batches/{batch_id}", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def job(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    resp = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def running_on(cloud: LocalCloud, job_ids: list[str]) -> tuple[int, str] | None:
    """(claim instance id, job id) of a job some live instance owns right now."""
    for index, pgid in cloud.service("claim").pids().items():
        pids = set(group_pids(pgid))
        for job_id in job_ids:
            view = job(cloud, job_id)
            owner = view.get("owner")
            if view["status"] == "running" and owner and owner_pid(owner) in pids:
                return index, job_id
    return None


def lines_about(log_dir: Path, job_id: str) -> dict[str, list[dict[str, Any]]]:
    """function (from the log file's name) -> the JSON lines about job_id."""
    return lines_where(log_dir, lambda entry: entry.get("job_id") == job_id)


def lines_where(
    log_dir: Path, wanted: Callable[[dict[str, Any]], bool]
) -> dict[str, list[dict[str, Any]]]:
    """function (from the log file's name) -> the JSON lines `wanted` keeps."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(log_dir.glob("*.log")):
        # one log per instance on the local Cloud Run: "<function>-<instance>.log"
        function = re.sub(r"-[0-9]+$", "", path.stem)
        for raw in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and wanted(entry):
                out[function].append(entry)
    return out


def _storage(cloud: LocalCloud) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )


def records_bucket(cloud: LocalCloud) -> Any:
    """The (home) records bucket on fake-gcs-server, through the official client: where
    the index objects live, and every job's objects when there is one shard."""
    return _storage(cloud).bucket(cloud.endpoints["records_bucket"])


def record_buckets(cloud: LocalCloud) -> list[Any]:
    """Every records bucket (shard) of the cloud, the home bucket first."""
    client = _storage(cloud)
    return [client.bucket(name) for name in cloud.topology.records_buckets]


def job_bucket(cloud: LocalCloud, job_id: str) -> Any:
    """The records bucket holding a job's objects (its shard)."""
    buckets = record_buckets(cloud)
    return buckets[shard_of(job_id, len(buckets))]


def cloud_store(cloud: LocalCloud) -> Store:
    """The store over every records bucket of the cloud (a ShardedStore with shards)."""
    return open_store(cloud.topology.records_buckets, _storage(cloud))


def bucket_state(cloud: LocalCloud) -> dict[str, int]:
    """Every object of the records buckets -> its generation: equal before and after a
    request means the request wrote nothing."""
    return {b.name: int(b.generation) for r in record_buckets(cloud) for b in r.list_blobs()}


def roll_out(cloud: LocalCloud, service: str, *, timeout: float = 120, **deploy: Any) -> str:
    """Deploy a revision of `service` and wait until it takes the traffic (by state: the
    platform's `serving`); the old one drains on its own. Its name."""
    name = cloud.deploy_revision(service, **deploy)
    polling.wait_for(
        f"{service} {name} serving",
        lambda: cloud.revisions(service)["serving"] == name,
        timeout=timeout,
        interval=0.1,
    )
    return name
