"""The doorbell: publish job ids (never payloads) to the jobs topic.

A ring only says "look at this record"; the record decides. A lost ring is
repaired by the sweep, a duplicate is harmless, so callers may treat a failed
ring as a warning once the record and pending marker are written.

A ring goes to the topic of the job's pool (shared.pools): callers name the job's
pipeline; a ring that names none goes to this process's own pool (a claim passing on a
delivery it could not read), and a ring that reaches the wrong pool is sent on by the
claim there (shared.features.pool_routing), so a missing name costs a hop, never a job.

A ring carries the job's trace context (its record's ``traceparent``) as an
attribute, so the delivery that arrives at claim is already in the job's trace.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from shared import tracing
from shared.errors import DoorbellError, InvalidInput
from shared.logs import get_logger
from shared.pools import DEFAULT, NO_POOLS, Pools, topic_of

if TYPE_CHECKING:
    from shared.config import Settings

log = get_logger(__name__)

RING_TIMEOUT_S = 10.0  # wait for the publish answer at most this long
MAX_LATENCY_S = 0.01  # batch window: a doorbell should leave at once


def message_for(job_id: str, traceparent: str | None = None) -> tuple[bytes, dict[str, str]]:
    """The doorbell message: JSON {"job_id": id}, the same id as an attribute and the
    job's valid traceparent, if any, as another."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidInput(f"job id must be a non-empty string, got {job_id!r}", "job id")
    attrs = {"job_id": job_id}
    if tracing.parse(traceparent) is not None:
        attrs[tracing.TRACEPARENT_HEADER] = str(traceparent)
    return json.dumps({"job_id": job_id}).encode("utf-8"), attrs


_PUBLISHER: Any = None
_PUBLISHER_LOCK = threading.Lock()


def shared_publisher() -> Any:
    """The process's one PublisherClient (the library reads PUBSUB_EMULATOR_HOST itself)."""
    global _PUBLISHER
    with _PUBLISHER_LOCK:
        if _PUBLISHER is None:
            from google.cloud import pubsub_v1

            batch = pubsub_v1.types.BatchSettings(max_latency=MAX_LATENCY_S, max_messages=100)
            _PUBLISHER = pubsub_v1.PublisherClient(batch_settings=batch)
        return _PUBLISHER


class Doorbell:
    """Rings the topic of each job's pool (`topic` is the default pool's); thread-safe;
    counts publishes in ``calls["publish"]``. `home`: the pool of a ring that names no
    pipeline (this process's)."""

    def __init__(
        self,
        project: str,
        topic: str,
        publisher: Any = None,
        *,
        timeout: float = RING_TIMEOUT_S,
        pools: Pools = NO_POOLS,
        home: str = DEFAULT,
    ) -> None:
        self.project = project
        self.topic = topic
        self.topic_path = f"projects/{project}/topics/{topic}"
        self.pools = pools
        self.home = home
        self.calls: Counter[str] = Counter()
        self._publisher = publisher
        self._timeout = timeout
        self._lock = threading.Lock()

    def topic_path_of(self, pipeline: str | None) -> str:
        """The topic a job of `pipeline` is rung on (None: this process's own pool's)."""
        pool = self.home if pipeline is None else self.pools.name_of(pipeline)
        return f"projects/{self.project}/topics/{topic_of(self.topic, pool)}"

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        """Publish one doorbell and wait for Pub/Sub to accept it."""
        future = self._publish(job_id, traceparent, pipeline)
        self._wait(job_id, future)

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Publish all (they batch together), then wait; returns the ids that failed."""
        ids = list(job_ids)
        traces = traceparents or {}
        named = pipelines or {}
        for job_id in ids:
            message_for(job_id)  # a bad id is a bug: raise before anything is published
        pending: list[tuple[str, Any]] = []
        failed: list[str] = []
        for job_id in ids:
            try:
                future = self._publish(job_id, traces.get(job_id), named.get(job_id))
                pending.append((job_id, future))
            except DoorbellError:
                failed.append(job_id)
        for job_id, future in pending:
            try:
                self._wait(job_id, future)
            except DoorbellError:
                failed.append(job_id)
        return failed

    def _publish(
        self, job_id: str, traceparent: str | None = None, pipeline: str | None = None
    ) -> Any:
        data, attrs = message_for(job_id, traceparent)
        topic = self.topic_path_of(pipeline)
        with self._lock:
            self.calls["publish"] += 1
            if self._publisher is None:
                self._publisher = shared_publisher()
        try:
            return self._publisher.publish(topic, data, timeout=self._timeout, **attrs)
        except _publish_failures() as exc:
            raise DoorbellError(job_id, f"{type(exc).__name__}: {exc}") from exc

    def _wait(self, job_id: str, future: Any) -> None:
        try:
            future.result(timeout=self._timeout)
        except _publish_failures() as exc:
            raise DoorbellError(job_id, f"{type(exc).__name__}: {exc}") from exc


def _publish_failures() -> tuple[type[BaseException], ...]:
    """What the publisher raises, or sets on a future, when a publish did not go through:
    API errors after its retries (NotFound topic, DeadlineExceeded, PublishError),
    transport and credential errors, RuntimeError for a stopped publisher or a
    cancelled batch, and our own wait's TimeoutError."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    return (gexc.GoogleAPIError, auth_exc.GoogleAuthError, RuntimeError, TimeoutError, OSError)


_DOORBELLS: dict[str, Doorbell] = {}
_DOORBELLS_LOCK = threading.Lock()


def get_doorbell(settings: Settings) -> Doorbell:
    """The process's Doorbell for the settings' topics and pools, created on first use."""
    key = f"{settings.topic_path} {settings.pool} {settings.pools_file}"
    with _DOORBELLS_LOCK:
        bell = _DOORBELLS.get(key)
        if bell is None:
            bell = Doorbell(
                settings.project, settings.jobs_topic, pools=settings.pools, home=settings.pool
            )
            _DOORBELLS[key] = bell
        return bell
