"""What every benchmark shares: a local cloud behind the counting proxy, waiting
for jobs to finish, and the shape of one result row."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from local.cloud import LocalCloud
from local.faultproxy import FaultProxy
from local.observe import Watch, all_terminal, emulator_stats, topic_count
from local.procs import free_port


@dataclass
class Bench:
    """A running local cloud, the proxy that counts its GCS calls, and a watcher."""

    cloud: LocalCloud
    proxy: FaultProxy
    watch: Watch

    def publishes(self) -> int:
        stats = emulator_stats(self.cloud.endpoints["emulator_admin"])
        return topic_count(stats, self.cloud.endpoints["jobs_topic"], "published")


@contextlib.contextmanager
def bench_cloud(**overrides: Any) -> Iterator[Bench]:
    """LocalCloud.for_tests with the counting proxy in front of fake-gcs-server."""
    gcs_port = free_port()
    with FaultProxy(f"http://127.0.0.1:{gcs_port}") as proxy:
        cloud = LocalCloud.for_tests(
            gcs_port=gcs_port, functions_storage_host=proxy.url, **overrides
        )
        with cloud:
            ep = cloud.endpoints
            watch = Watch(cloud.gcs_url, ep["project"], ep["records_bucket"])
            try:
                yield Bench(cloud, proxy, watch)
            finally:
                watch.close()


def wait_pending_empty(watch: Watch, timeout_s: float, poll_s: float = 0.2) -> float:
    """Seconds until the pending index is empty (every job finished and unmarked)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not watch.store.list_pending(limit=1):
            return time.monotonic() - start
        time.sleep(poll_s)
    raise TimeoutError(f"jobs still pending after {timeout_s:.0f} s")


def wait_terminal(
    watch: Watch, ids: Iterable[str], timeout_s: float, poll_s: float = 0.25
) -> dict[str, dict[str, Any]]:
    """Records once every job is terminal and its pending marker is gone."""
    wanted = list(ids)
    wait_pending_empty(watch, timeout_s)
    records = watch.snapshot(wanted)
    deadline = time.monotonic() + timeout_s
    while not all_terminal(records) and time.monotonic() < deadline:
        time.sleep(poll_s)
        records = watch.snapshot(wanted)
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
