"""Helpers of the pure-logic tests: a doorbell that records what it rang (the real
doorbell is tested against the Pub/Sub emulator in tests/integration), a settable
clock, and shortcuts for the runner and drain tests."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import records
from shared.claim.drain import DrainGate
from shared.claim.runner import handle_delivery
from shared.claim.shutdown import Shutdown
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import DoorbellError
from shared.features.table import context
from shared.outcome import Outcome
from shared.pipelines import Pipeline, StageContext, register
from shared.stores.memory import MemoryStore


class Bell:
    """Records rings; can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.rung: list[str] = []
        self.traces: dict[str, str | None] = {}  # job id -> traceparent of its last ring
        self.pipelines: dict[str, str | None] = {}  # job id -> the pipeline its ring named
        self.fail = fail

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        if self.fail:
            raise DoorbellError(job_id, "down")
        self.rung.append(job_id)
        self.traces[job_id] = traceparent
        self.pipelines[job_id] = pipeline

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        ids = list(job_ids)
        if self.fail:
            return ids
        self.rung.extend(ids)
        self.traces.update({i: (traceparents or {}).get(i) for i in ids})
        self.pipelines.update({i: (pipelines or {}).get(i) for i in ids})
        return []


class Clock:
    """A settable clock shared by the test and the runner's threads."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += timedelta(seconds=seconds)


def wall() -> datetime:
    return datetime.now(UTC)


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = {
        "stale_seconds": 30.0,
        "min_write_interval_seconds": 1.0,
        "backoff_base_seconds": 0.0,
        "backoff_max_seconds": 0.0,
        "drain_max_jobs": 0,
        # no doorbell waits for a backoff inside its push (a real sleep); the tests of that
        # wait give a window and a Shutdown whose sleep moves the test's clock (WaitClock)
        "retry_wait_seconds": 0.0,
    }
    return Settings.from_env({}, **{**base, **kw})


def pipeline(stages: list[tuple[str, Callable[[StageContext], None]]]) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    register(Pipeline(name, stages=stages))
    return name


def submit(
    store: MemoryStore,
    name: str = "demo",
    payload: dict[str, Any] | None = None,
    now: datetime | None = None,
    **fields: Any,
) -> str:
    job_id = records.new_job_id()
    record = records.new_record(job_id, name, payload or {}, now or datetime.now(UTC))
    store.add_pending(job_id)
    store.create({**record, **fields})
    return job_id


def starved_slots(capacity: int = 4, gap_s: float = 60.0) -> Slots:
    """Slots one of which was freed gap_s ago and no push has filled since: pushes are
    not keeping up, so a backlog's drain takes work from the index (Slots.push_gap)."""
    now = [0.0]
    slots = Slots(capacity, clock=lambda: now[0])
    held = [slots.try_acquire() for _ in range(min(capacity, 2))]  # one left free after
    for slot in held:  # the next push takes one (with one slot: it waited gap_s for it)
        assert slot is not None
        slot.release()
    now[0] = gap_s
    return slots


def handle(
    job_id: str,
    store: MemoryStore,
    s: Settings,
    clock: Callable[[], datetime] | None = None,
    bell: Bell | None = None,
    **kw: Any,
) -> Outcome:
    return handle_delivery(
        context(store, bell or Bell(), s, clock or Clock()),
        job_id,
        owner="test",
        slots=kw.pop("slots", Slots(4)),
        gate=kw.pop("gate", DrainGate()),
        shutdown=kw.pop("shutdown", Shutdown()),
        **kw,
    )


def events(store: MemoryStore, job_id: str) -> list[str]:
    return [e["event"] for e in store.read(job_id).record["history"]]


def pending(store: MemoryStore) -> list[str]:
    return [e.job_id for e in store.list_pending()]
