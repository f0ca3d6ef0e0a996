"""The owner's handle on its claimed record: the ONLY path for the owner's writes.

The generation is the fencing token. It lives here, under one lock, so the
stage thread and the heartbeat thread never race on it; the first LostRace
(re-claimed, rescued or cancelled by someone else) marks the handle lost for
good and every later write is refused without touching storage.

Writes are coalesced: a stage-boundary checkpoint that comes sooner than
``min_interval_s`` after the previous write is kept pending and flushed by the
heartbeat tick (or folded into the final write), so one record sees about one
write per interval (GCS allows ~1 sustained write/s per object). Final writes
(done, failed, requeued) are never delayed.

A pipeline may ask for fewer checkpoint writes (Pipeline.checkpoint_every_s, set with
``coalesce_checkpoints``): boundaries then wait for that interval, so a job of short
stages costs one checkpoint write per interval instead of one per boundary. The
trade-off: a hard crash (SIGKILL, a lost host) re-runs the stages completed since the
last write, up to one interval of them; a hand-back, a requeue after a stage error and a
timeout fold the pending checkpoint into their own write, so they lose none.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Literal

from shared import job_queue
from shared.clock import Clock
from shared.errors import LostRace, NotFound, OwnerLost, Unavailable
from shared.jobs import JobRecord, JsonObject
from shared.logs import JobLogger
from shared.storage import Store, Stored

Build = Callable[[JobRecord], JobRecord]  # the fields a write merges into the record
Write = Literal[
    "checkpoint", "heartbeat", "fence", "done", "failed", "requeued", "handed back", "parked"
]
"""What an owner's write is, as its log lines name it."""


class OwnedRecord:
    """A claimed record, its generation, and the write discipline around them."""

    def __init__(
        self,
        store: Store,
        stored: Stored,
        *,
        owner: str,
        attempt: int,
        clock: Clock,
        min_interval_s: float,
        heartbeat_s: float,
        log: JobLogger,
    ) -> None:
        self._store = store
        self._stored = stored
        self.owner = owner
        self.attempt = attempt
        self._clock = clock
        self.min_interval_s = max(0.0, min_interval_s)
        self.heartbeat_s = max(0.0, heartbeat_s)
        self.checkpoint_every_s = self.min_interval_s
        """Least time between two checkpoint writes (coalesce_checkpoints raises it)."""
        self._log = log
        self._lock = threading.Lock()
        self._lost = threading.Event()
        self._closed = False
        self._pending: (
            tuple[str, int, JsonObject, list[str], str | None, list[str] | None, str | None] | None
        ) = None
        self._last_write = self._stamp_of(stored)
        self.writes = 0
        self._progress: JsonObject | None = None  # a stage's report not yet written

    # --- reading

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    @property
    def stored(self) -> Stored:
        with self._lock:
            return self._stored

    def proof_age(self) -> float:
        """Seconds since this owner last proved it holds the job: since the stamp of its
        last write that landed (others judge its staleness by that stamp)."""
        with self._lock:
            return self._since_write()

    @property
    def has_pending(self) -> bool:
        with self._lock:
            return self._pending is not None

    # --- writes

    def coalesce_checkpoints(self, every_s: float | None) -> None:
        """Write stage boundaries at most once per `every_s` (the pipeline's
        checkpoint_every_s; None or less than the write interval: the write interval)."""
        with self._lock:
            self.checkpoint_every_s = max(self.min_interval_s, every_s or 0.0)

    def checkpoint(
        self,
        stage: str,
        next_stage: int,
        state: JsonObject,
        outputs: list[str] | None = None,
        *,
        version: str | None = None,
        completed: list[str] | None = None,
        running: str | None = None,
    ) -> bool:
        """Record a stage boundary; True if written now, False if deferred (coalesced).
        `running` names the stage that starts now (the record's `stage`).

        Raises OwnerLost if the job is no longer ours. A transient storage error
        keeps the checkpoint pending (the tick retries) instead of failing the job.
        """
        with self._lock:
            self._check_open()
            self._pending = (
                stage,
                next_stage,
                copy.deepcopy(state),
                list(outputs or []),
                version,
                None if completed is None else list(completed),
                running,
            )
            if self._since_write() < self.checkpoint_every_s:
                return False
            return self._flush_pending(transient_ok=True)

    def report_progress(self, progress: JsonObject) -> None:
        """Keep a stage's latest progress for the next write (never a write of its own
        sooner than the checkpoint interval: the tick flushes it like a coalesced
        checkpoint, so a pipeline's checkpoint_every_s bounds its progress writes too)."""
        with self._lock:
            self._progress = dict(progress)

    def tick(self) -> None:
        """The heartbeat thread's step: flush a due checkpoint, else prove life if due."""
        with self._lock:
            if self._closed or self.lost:
                return
            elapsed = self._since_write()
            due = elapsed >= self._flush_after_s()  # a checkpoint's or a progress's turn
            if self._pending is not None and due:  # the one write carries the progress too
                self._flush_pending(transient_ok=True)
            elif elapsed >= self.heartbeat_s or (self._progress is not None and due):
                self._write(lambda job: job_queue.heartbeat_fields(job, self._clock()), "heartbeat")

    def confirm(self, max_age_s: float) -> None:
        """Raise OwnerLost unless ownership was proven within max_age_s.

        Normally free (the heartbeat keeps it fresh); after a pause (SIGSTOP, a
        starved thread) it forces a fencing heartbeat, so a zombie learns it lost
        before it commits an output.
        """
        with self._lock:
            self._check_open()
            if self._since_write() <= max_age_s:
                return
            self._write(lambda job: job_queue.heartbeat_fields(job, self._clock()), "fence")

    def finish(self, build: Build, event: Write, *, fold: bool = True) -> Stored:
        """The final write (done/failed/requeued/handed back), at once; with fold, a pending
        checkpoint goes into the same write so the next attempt resumes after it."""
        with self._lock:
            self._check_open()
            pending, self._pending = self._pending, None
            if not fold:
                pending = None

            def merged(job: JobRecord) -> JobRecord:
                fields: JobRecord = {}
                if pending is not None:
                    fields = job_queue.checkpoint_fields(job, self._clock(), *pending)
                return {**fields, **build({**job, **fields})}

            self._write(merged, event)
            self._closed = True
            return self._stored

    def close(self) -> None:
        """No more writes from this handle (the job ended or was abandoned)."""
        with self._lock:
            self._closed = True

    # --- internals (lock held)

    def _check_open(self) -> None:
        if self.lost:
            raise OwnerLost(f"attempt {self.attempt} of {self._stored.record.get('id')} was lost")
        if self._closed:
            raise OwnerLost("this owner already finished the job")

    def _flush_pending(self, *, transient_ok: bool) -> bool:
        assert self._pending is not None
        pending = self._pending

        def build(job: JobRecord) -> JobRecord:
            return job_queue.checkpoint_fields(job, self._clock(), *pending)

        try:
            self._write(build, "checkpoint")
        except Unavailable as exc:
            if not transient_ok:
                raise
            self._log.warning("checkpoint write failed; will retry", error=str(exc))
            return False
        self._pending = None
        return True

    def _write(self, build: Build, event: Write) -> None:
        # a write proves life as of its stamp (the record's updated_at, taken in `build`
        # from here on), which is what others judge staleness by, however late it lands
        began = self._seconds()
        job = self._stored.record
        new: JobRecord = {**job, **build(job)}
        progress = self._progress
        if progress is not None:  # folded into whatever this owner writes next
            new["progress"] = progress
        try:
            self._stored = self._store.update(new, self._stored.generation)
        except (LostRace, NotFound) as exc:
            self._lost.set()
            self._log.warning(
                "lost the job: the record changed under us", during=event, error=type(exc).__name__
            )
            raise OwnerLost(str(exc)) from None
        self.writes += 1
        self._last_write = began
        if self._progress is progress:
            self._progress = None
        self._log.debug("record written", write=event, generation=self._stored.generation)

    def _flush_after_s(self) -> float:
        """When a pending checkpoint is written: its interval is up, or a heartbeat is due
        (the one write carries both), never sooner than the write interval."""
        return max(self.min_interval_s, min(self.checkpoint_every_s, self.heartbeat_s))

    def _seconds(self) -> float:
        return self._clock().timestamp()

    def _stamp_of(self, stored: Stored) -> float:
        """When the record says its owner last proved life (its updated_at), at the
        latest now."""
        stamp = job_queue.parse_time(stored.record.get("updated_at"))
        now = self._seconds()
        return now if stamp is None else min(now, stamp.timestamp())

    def _since_write(self) -> float:
        return self._seconds() - self._last_write


class Heartbeat:
    """A daemon thread ticking an OwnedRecord while a job runs; stops with the job."""

    def __init__(self, owned: OwnedRecord, period_s: float, log: JobLogger) -> None:
        self._owned = owned
        self._period = max(0.02, period_s)
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reclaim-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._owned.tick()
            except OwnerLost:
                self._log.warning("heartbeat lost the job; stopping")
                return
            except Unavailable as exc:  # a storage hiccup: the next tick tries again
                self._log.warning("heartbeat write failed", error=str(exc))
            except Exception:  # this thread is the job's proof of life: a bug here must
                # not end it silently (the job would be rescued while its owner lives)
                self._log.exception("heartbeat tick failed")
