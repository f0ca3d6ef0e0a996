"""What every benchmark shares: a local cloud behind the counting proxy, a queue to
watch it with, waiting for jobs to finish, and the shape of one result row."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from bench.console import CONSOLE
from reclaim.local import wiring
from reclaim.local.cloud import LocalCloud
from reclaim.local.faultproxy import FaultProxy
from reclaim.local.observe import (
    all_terminal,
    emulator_stats,
    snapshot,
    topic_count,
    watching_queue,
)
from reclaim.local.procs import free_port
from shared.queue import Queue


@dataclass
class Bench:
    """A running local cloud, the proxy that counts its GCS calls, and a watching queue."""

    cloud: LocalCloud
    proxy: FaultProxy
    queue: Queue

    def publishes(self) -> int:
        stats = emulator_stats(self.cloud.endpoints["emulator_admin"])
        return topic_count(stats, self.cloud.endpoints["jobs_topic"], "published")

    def snapshot(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return snapshot(self.queue, job_ids)

    def claim_subscription(self) -> dict[str, int]:
        return claim_subscription(self.cloud)

    def wait_doorbells_acked(self, timeout_s: float, poll_s: float = 0.2) -> float:
        """Seconds until every doorbell of the claim subscription is acked: a job a slot
        took from the index still has its doorbell coming, and what that costs is the
        job's too."""
        start = time.monotonic()
        while self.claim_subscription().get("backlog", 0) > 0:
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"doorbells still unacked after {timeout_s:.0f} s")
            time.sleep(poll_s)
        return time.monotonic() - start


def claim_subscription(cloud: LocalCloud) -> dict[str, int]:
    """The claim subscription's counters (the emulator's /stats): pushes by answer, and
    its backlog (messages not yet acked)."""
    stats = emulator_stats(cloud.endpoints["emulator_admin"])
    subs = stats.get("subscriptions") or {}
    found: dict[str, Any] = next(
        (v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION)), {}
    )
    return {k: int(v) for k, v in found.items() if isinstance(v, int)}


def local_cloud(**overrides: Any) -> LocalCloud:
    """LocalCloud.for_tests whose logs go to the run's log file (bench.console)."""
    log_dir = CONSOLE.cloud_log_dir()
    if log_dir is not None:
        overrides.setdefault("log_dir", log_dir)
    return LocalCloud.for_tests(**overrides)


@contextlib.contextmanager
def bench_cloud(**overrides: Any) -> Iterator[Bench]:
    """local_cloud with the counting proxy in front of fake-gcs-server."""
    gcs_port = free_port()
    with FaultProxy(f"http://127.0.0.1:{gcs_port}") as proxy:
        cloud = local_cloud(gcs_port=gcs_port, functions_storage_host=proxy.url, **overrides)
        with cloud:
            yield Bench(cloud, proxy, watching_queue(cloud))


def wait_pending_empty(queue: Queue, timeout_s: float, poll_s: float = 0.2) -> float:
    """Seconds until the pending index is empty (every job finished and unmarked)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not queue.pending(limit=1):
            return time.monotonic() - start
        time.sleep(poll_s)
    raise TimeoutError(f"jobs still pending after {timeout_s:.0f} s")


def wait_terminal(
    queue: Queue, ids: Iterable[str], timeout_s: float, poll_s: float = 0.25
) -> dict[str, dict[str, Any]]:
    """Records once every job is terminal and its pending marker is gone."""
    wanted = list(ids)
    wait_pending_empty(queue, timeout_s)
    records = snapshot(queue, wanted)
    deadline = time.monotonic() + timeout_s
    while not all_terminal(records) and time.monotonic() < deadline:
        time.sleep(poll_s)
        records = snapshot(queue, wanted)
    if not all_terminal(records):
        raise TimeoutError("some jobs are not terminal")
    return records


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def row(
    name: str,
    figure: str,
    baseline: str,
    ratio: str,
    target: str,
    met: bool | None,
    note: str = "",
) -> dict[str, Any]:
    """One line of the results table (the JSON keeps the raw numbers beside it)."""
    return {
        "name": name,
        "figure": figure,
        "baseline": baseline,
        "ratio": ratio,
        "target": target,
        "met": met,
        "note": note,
    }


class SilentDoorbell:
    """A doorbell that rings nothing: for benchmarks that only count what storage does
    (the jobs are read or settled in-process, never run)."""

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        pass

    def ring_many(
        self,
        job_ids: Any,
        traceparents: Any = None,
        *,
        pipelines: object = None,
    ) -> list[str]:
        return []
