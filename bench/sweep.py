"""Sweep cost against history: 50 pending jobs alone in one bucket, and the same 50
beside 10,000 finished ones in another, their sweeps taking turns. The sweep lists
pending/ only, so its calls must be equal: the verdict (a sweep's cost is its calls). The
wall times, medians of 7 sweeps each, are shown beside it: locally they measure mostly
fake-gcs-server, whose listing scans the whole bucket.

Runs the queue's sweep_once in this process against fake-gcs-server through
the counting proxy (wire calls) with a GcsStore (logical calls). The pending
jobs are queued and fresh, so each sweep reads them and writes nothing: every
repetition measures the same work.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import median, row
from bench.console import CONSOLE
from bench.fixtures import building, data_dir_parent, wait_loaded, write_data_dir
from bench.spread import Spread
from reclaim.local import wiring
from reclaim.local.faultproxy import FaultProxy
from reclaim.local.gcs import start_fake_gcs
from reclaim.local.procs import free_port, stop
from shared import job_queue, records
from shared.config import Settings
from shared.queue import Queue, parse_submission
from shared.storage import Store
from shared.stores.gcs import GcsStore
from shared.stores.memory import MemoryStore

PENDING = 50
FINISHED = 10_000
REPEATS = 7
WALL_SHOWN = 1.2
"""Past this wall-time ratio the row's note says why: the emulator's listing scan."""
SHOW_EVERY = 2500
LOAD_S = 1800.0
"""How long fake-gcs-server may take to load a fixture (quadratic in a bucket's size)."""


class _Bell:
    """Counts rings instead of publishing: submitted jobs are rung once; a sweep of
    fresh jobs must ring none."""

    def __init__(self) -> None:
        self.rung = 0

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        self.rung += 1

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        self.rung += len(list(job_ids))
        return []


def _finished_job(store: Store, now: datetime) -> None:
    """A done record written straight to the bucket: history the sweep must not pay for."""
    job_id = records.new_job_id()
    rec = records.new_record(job_id, "demo", {}, now)
    rec = {**rec, **job_queue.claim_fields(rec, "bench.1", now)}
    rec = {**rec, **job_queue.done_fields(rec, now, {"ok": True})}
    store.create(rec)


class _Side:
    """One bucket of the comparison, its queue and what its sweeps measured."""

    def __init__(self, client: Any, bucket: str, proxy: FaultProxy, *, create: bool) -> None:
        if create:
            client.create_bucket(bucket)
        self.store = GcsStore(bucket, client)
        self.settings = Settings.from_env({}, records_bucket=bucket, stale_seconds=3600.0)
        self.bell = _Bell()
        self.queue = Queue(self.store, self.bell, self.settings)
        self.proxy = proxy
        self.walls: list[float] = []
        self.wire: dict[str, int] = {}
        self.logical: dict[str, int] = {}

    def sweep(self) -> None:
        """One sweep of the fresh pending jobs: it must read them and move none."""
        self.proxy.reset()
        self.store.calls.clear()
        rung = self.bell.rung
        start = time.perf_counter()
        result = self.queue.sweep_once()
        self.walls.append(time.perf_counter() - start)
        moved = result.errors or result.released
        if result.examined != PENDING or moved or self.bell.rung != rung:
            raise RuntimeError(f"unexpected sweep result {result.to_json()}")
        self.wire = self.proxy.counts()
        self.logical = dict(self.store.calls)

    def measured(self) -> dict[str, Any]:
        return {
            "wall_s_median": round(median(self.walls), 4),
            "wall_s_all": [round(w, 4) for w in self.walls],
            "wire_calls": self.wire,
            "logical_calls": self.logical,
        }


def compare(
    bucket: str,
    add: Callable[[Store, Settings, datetime, int], None],
    count: int,
    leave_out: Callable[[str], bool] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sweep of PENDING fresh jobs alone (bucket `<bucket>-alone`) and beside the
    `count` jobs `add` builds (bucket `<bucket>`), the two sweeps taking turns, so a
    change in the machine's load between them falls on both. The second bucket is built
    on a MemoryStore by the library (the same submit of the pending jobs, then `add`)
    and fake-gcs-server starts holding it (bench.fixtures.write_data_dir; that writing
    is not what is measured; objects `leave_out` accepts are not loaded).
    fake-gcs-server keeps each bucket's objects apart, so the one bucket's listing does
    not see the other's."""
    jobs = [
        {"pipeline": "demo", "id": f"p{i:03d}-{records.new_job_id()[:12]}"} for i in range(PENDING)
    ]
    settings = Settings.from_env({}, records_bucket=bucket, stale_seconds=3600.0)
    built = MemoryStore(bucket)
    queue = Queue(built, _Bell(), settings)
    queue.submit(parse_submission({"jobs": jobs}, settings))
    # a running deployment's: its sweep ran before this history was written, so its index
    # board (shared.hints.index_board) was checked whole then, and the history's writers
    # noted their indexes on it (a board first checked over entries is an upgrade in use:
    # every run checks whole for an hour)
    queue.sweep_once()
    now = datetime.now(UTC)
    with building():
        for i in range(count):
            add(built, settings, now, i)
            if (i + 1) % SHOW_EVERY == 0:
                CONSOLE.progress(f"{bucket}: built {i + 1:,}/{count:,} jobs in memory")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-gcs-", dir=data_dir_parent()) as data:
        objects = write_data_dir(built, Path(data), leave_out)
        CONSOLE.progress(f"{bucket}: fake-gcs-server loading {objects:,} objects")
        fake = start_fake_gcs("127.0.0.1", port, data_dir=Path(data), start_timeout=LOAD_S)
        try:
            wait_loaded(f"http://127.0.0.1:{port}", bucket, LOAD_S)
            with FaultProxy(f"http://127.0.0.1:{port}") as proxy:
                client = wiring.storage_client(proxy.url, "bench")
                alone = _Side(client, f"{bucket}-alone", proxy, create=True)
                beside = _Side(client, bucket, proxy, create=False)
                alone.queue.submit(parse_submission({"jobs": jobs}, alone.settings))
                loaded = GcsStore(bucket, wiring.storage_client(f"http://127.0.0.1:{port}", "b"))
                if len(loaded.list_pending()) != PENDING:
                    raise RuntimeError("the added objects changed the pending index")
                for i in range(REPEATS):
                    for side in (alone, beside) if i % 2 == 0 else (beside, alone):
                        side.sweep()
        finally:
            stop(fake)
    return alone.measured(), beside.measured()


def sweep_row(name: str, small: dict[str, Any], big: dict[str, Any], slow_note: str) -> Any:
    """The row comparing the two sweeps, judged on their calls: Cloud Storage bills a
    sweep by its calls (a listing is a class A operation whatever the bucket holds,
    https://cloud.google.com/storage/pricing), and the wall time here
    is mostly fake-gcs-server scanning its bucket, which Cloud Storage's index does not;
    the wall-time ratio is shown beside it, with the emulator's note when past
    WALL_SHOWN."""
    ratio = big["wall_s_median"] / small["wall_s_median"]
    equal = big["wire_calls"] == small["wire_calls"]
    shown = ", ".join(f"{k} {v}" for k, v in small["wire_calls"].items() if v)
    return row(
        name,
        f"{_ms(big)}, calls: {shown}" + ("" if equal else f" (vs {big['wire_calls']})"),
        f"{PENDING} pending alone: {_ms(small)}, calls {'equal' if equal else 'DIFFERENT'}",
        f"{'1.00x' if equal else 'more'} calls ({ratio:.2f}x wall time, the emulator's)",
        "equal calls",
        equal,
        "" if ratio <= WALL_SHOWN else slow_note,
    )


def _ms(measured: dict[str, Any]) -> str:
    """'94 ms (median of 7; min 90, max 120)': the sweep's wall time over its repeats."""
    s = Spread.of(w * 1000 for w in measured["wall_s_all"])
    return f"{s.median:.0f} ms (median of {s.runs}; min {s.low:.0f}, max {s.high:.0f})"


def run() -> dict[str, Any]:
    small, big = compare("bench-sweep", lambda st, _s, now, _i: _finished_job(st, now), FINISHED)
    ratio = big["wall_s_median"] / small["wall_s_median"]
    return {
        "raw": {"pending_only": small, "with_history": big, "ratio": round(ratio, 3)},
        "rows": [
            sweep_row(f"sweep, {PENDING} pending + {FINISHED:,} finished", small, big, _slow_note())
        ],
    }


def _slow_note() -> str:
    return (
        "calls are equal (the sweep lists pending/ only); the extra wall time is "
        "fake-gcs-server's listing, which scans every object of the bucket to filter by "
        "prefix. Cloud Storage lists by prefix from an index, so the ratio there is the "
        "call ratio (1.0); a records bucket per history period would also bound it locally."
    )
