"""Watching a running local cloud from outside: job records, instances, emulator figures.

What the demo, the benchmarks and the chaos test share. Records are read through the
queue's own front door (shared.queue.Queue: read_many, pending, list_jobs), on a store
that talks to fake-gcs-server directly, not through a counting proxy, so watching costs
the queue nothing a figure would report, and without the watchdog, so watching changes
nothing. Owners are mapped to instances by process id.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.procs import group_pids
from shared.config import Settings
from shared.doorbell import Doorbell
from shared.job_queue import TERMINAL_STATUSES
from shared.jobs import MEMBER_MISSING, MEMBER_UNREADABLE, JobStatus
from shared.queue import Queue
from shared.stores.factory import open_store

STATUS_ORDER: tuple[str, ...] = (*JobStatus, MEMBER_MISSING, MEMBER_UNREADABLE)
"""The order the demo shows counts in: the job states, then the stand-ins."""


def watching_queue(cloud: LocalCloud) -> Queue:
    """A Queue on the local cloud's records bucket and topic that talks to
    fake-gcs-server directly (not through a counting proxy). Watchers only read with it
    (read, read_many, pending, list_jobs: no watchdog)."""
    ep = cloud.endpoints
    settings = Settings.from_env(
        {},
        project=ep["project"],
        records_bucket=ep["records_bucket"],
        shard_buckets=cloud.topology.shard_buckets,
        jobs_topic=ep["jobs_topic"],
        pools_file=str(cloud.config.pools_file or ""),
    )
    store = open_store(
        settings.records_buckets, wiring.storage_client(cloud.gcs_url, ep["project"])
    )
    doorbell = Doorbell(settings.project, settings.jobs_topic, pools=settings.pools)
    return Queue(store, doorbell, settings)


def snapshot(queue: Queue, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """job id -> its record as stored, or a stand-in whose status says it is missing
    or unreadable."""
    ids = list(job_ids)
    listing = queue.read_many(ids)
    found: dict[str, dict[str, Any]] = {str(r["id"]): dict(r) for r in listing.records}
    for job_id, reason in listing.corrupt.items():
        found[job_id] = {"id": job_id, "status": MEMBER_UNREADABLE, "reason": reason}
    return {i: found.get(i, {"id": i, "status": MEMBER_MISSING}) for i in ids}


class Watch:
    """Job records of a local cloud, read through its watching queue."""

    def __init__(self, cloud: LocalCloud) -> None:
        self.queue = watching_queue(cloud)

    def snapshot(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return snapshot(self.queue, job_ids)

    def pending(self) -> list[str]:
        """Ids of the jobs that still owe work (the pending index)."""
        return self.queue.pending()

    def stored_ids(self) -> set[str]:
        """Every job the bucket holds a record for, readable or not (O(history))."""
        listing = self.queue.list_jobs()
        return {str(r["id"]) for r in listing.records} | set(listing.corrupt)

    def output(self, name: str) -> bytes:
        """A stage output's bytes (outputs/<id>/<attempt>/<name> in the records bucket)."""
        return self.queue.store.read_object(self.queue.settings.records_bucket, name)[0]


def counts_by_status(records: Mapping[str, Mapping[str, Any]]) -> Counter[str]:
    return Counter(str(r.get("status")) for r in records.values())


def all_terminal(records: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every record is done, failed or cancelled (and there is at least one)."""
    return bool(records) and all(r.get("status") in TERMINAL_STATUSES for r in records.values())


def owner_pid(owner: object) -> int | None:
    """The process id inside an owner id ("<host>-<pid>-<hex>.<n>"), or None."""
    if not isinstance(owner, str) or "." not in owner:
        return None
    instance = owner.rsplit(".", 1)[0]
    parts = instance.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def instance_pids(cloud: LocalCloud, service: str = "claim") -> dict[int, set[int]]:
    """instance id -> pids of its process group (gunicorn master and worker)."""
    return {i: set(group_pids(pgid)) | {pgid} for i, pgid in cloud.service(service).pids().items()}


def running_on(
    records: Mapping[str, Mapping[str, Any]], pids: set[int]
) -> dict[str, tuple[str, int]]:
    """job id -> (owner, attempt) of running jobs owned by one of these pids."""
    out = {}
    for job_id, rec in records.items():
        if rec.get("status") == JobStatus.RUNNING and owner_pid(rec.get("owner")) in pids:
            out[job_id] = (str(rec.get("owner")), int(rec.get("attempts") or 0))
    return out


def parse_at(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def history_time(record: Mapping[str, Any], event: str, min_attempt: int) -> datetime | None:
    """When `event` first happened for an attempt >= min_attempt (from the record's history)."""
    history = record.get("history")
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, dict) or entry.get("event") != event:
            continue
        attempt = entry.get("attempt")
        if isinstance(attempt, int) and attempt >= min_attempt:
            return parse_at(entry.get("at"))
    return None


def reclaimed_at(record: Mapping[str, Any], lost_attempt: int) -> datetime | None:
    """When a later attempt claimed the job after `lost_attempt` was lost."""
    return history_time(record, "claimed", lost_attempt + 1)


def rescued_at(record: Mapping[str, Any], lost_attempt: int) -> datetime | None:
    """When the watchdog requeued the job that `lost_attempt` held."""
    return history_time(record, "rescued", lost_attempt)


def handed_back_at(record: Mapping[str, Any], attempt: int) -> datetime | None:
    """When the owner of `attempt` handed the job back (its instance got SIGTERM)."""
    return history_time(record, "handed back", attempt)


def emulator_stats(admin_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(admin_url + "/stats", timeout=5) as resp:
        stats: dict[str, Any] = json.loads(resp.read())
    return stats


def topic_count(stats: Mapping[str, Any], topic: str, counter: str) -> int:
    """A topic's counter from /stats, whether topics are keyed by id or by path."""
    for name, counts in (stats.get("topics") or {}).items():
        if name == topic or name.endswith("/topics/" + topic):
            return int(counts.get(counter, 0))
    return 0


def submit_batch(jobs_url: str, jobs: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """POST /jobs with one batch; (batch id, job ids in order)."""
    body = json.dumps({"jobs": jobs}).encode()
    req = urllib.request.Request(
        jobs_url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer = json.loads(resp.read())
    return str(answer["batch_id"]), [str(j["id"]) for j in answer["jobs"]]
