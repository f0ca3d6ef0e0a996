"""Testing your pipelines: one job in process, or the whole local cloud.

``run_job`` runs one job of a pipeline in this process, through the same submission
checks, claim, stages, checkpoints, retries and outputs as the claim function, on the
in-memory store (no emulator, no server, no `[dev]` extra): a unit test of a stage's
logic in milliseconds. Retries do not wait out their backoff: the job's clock jumps to
when it is due. The doorbell only records its rings (nothing else runs the job)::

    from reclaim.testing import run_job

    def test_greets() -> None:
        job = run_job("acme-hello", {"name": "Ada"}, modules=["acme.hello"])
        assert job.status == "done" and job.result["greeting"] == "Hello, Ada!"
        assert json.loads(job.output("greeting.json"))["greeting"] == "Hello, Ada!"

``local_cloud`` starts the same emulators and functions `reclaim dev` runs, on free
ports, serving your project's pipelines over HTTP (needs `pip install 'reclaim[dev]'`)::

    with local_cloud(PROJECT_DIR, log_dir=tmp) as cloud:
        requests.post(cloud.endpoints["jobs"], json={"pipeline": ..., "payload": ...})

A project made by `reclaim init` uses both: tests/test_hello.py and tests/conftest.py.
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reclaim.local.cloud import LocalCloud
    from shared.jobs import JobRecord

__all__ = ["Job", "LocalCloud", "local_cloud", "run_job"]

MAX_DELIVERIES = 200
"""run_job gives up (RuntimeError) after this many deliveries without an end."""


@dataclass
class Job:
    """A job run by run_job: its final record, and the outputs it committed."""

    id: str
    status: str
    result: dict[str, Any]
    error: dict[str, Any] | None
    attempts: int
    record: dict[str, Any]
    outputs: dict[str, bytes] = field(default_factory=dict)
    rings: list[str] = field(default_factory=list)
    """Job ids the doorbell was asked to ring (this job's retries, a callback's, ...)."""

    def output(self, name: str) -> bytes:
        """An output the job committed, by the name its stage gave; KeyError naming those
        it has."""
        if name not in self.outputs:
            raise KeyError(f"{self.id} has no output {name!r}; it has {sorted(self.outputs)}")
        return self.outputs[name]


class _Clock:
    """The job's clock: the wall clock, moved ahead to a retry's due time (never back)."""

    def __init__(self) -> None:
        self._offset = timedelta()
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def jump_to(self, when: datetime) -> None:
        with self._lock:
            ahead = when - (datetime.now(UTC) + self._offset)
            if ahead > timedelta():
                self._offset += ahead + timedelta(milliseconds=1)


class _Doorbell:
    """Records rings: in process, run_job delivers the job itself."""

    def __init__(self) -> None:
        self.rung: list[str] = []

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        self.rung.append(job_id)

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        self.rung.extend(job_ids)
        return []


def run_job(
    pipeline: str,
    payload: Mapping[str, Any] | None = None,
    *,
    modules: Sequence[str] = (),
    job_id: str | None = None,
    max_attempts: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Job:
    """Submit one job of `pipeline` (imported from `modules`) and run it in this process
    until it ends: done, failed (an exception's error in `error`), or cancelled. A payload
    the pipeline's `validate` refuses raises InvalidSubmission, as submit's 400 would.
    `env`: RECLAIM_* settings (e.g. RECLAIM_BACKOFF_BASE_SECONDS); nothing is read from
    this process's own environment."""
    from shared import job_queue
    from shared.claim.drain import DrainGate
    from shared.claim.slots import Slots
    from shared.config import Settings
    from shared.pipelines import load_modules
    from shared.queue import Queue, parse_submission
    from shared.stores.memory import MemoryStore

    load_modules(modules)
    settings = Settings.from_env({"RECLAIM_DRAIN_MAX_JOBS": "0", **(env or {})})
    store, bell, clock = MemoryStore(), _Doorbell(), _Clock()
    queue = Queue(store, bell, settings, clock=clock)
    body: dict[str, Any] = {"pipeline": pipeline, "payload": dict(payload or {})}
    body["id"] = job_id or f"test-{uuid.uuid4().hex[:12]}"
    if max_attempts is not None:
        body["max_attempts"] = max_attempts
    queue.submit(parse_submission(body, settings))
    for _ in range(MAX_DELIVERIES):
        record = store.read(body["id"]).record
        if record.get("status") in job_queue.TERMINAL_STATUSES:
            return _ended(store, record, bell.rung)
        due = job_queue.parse_time(record.get("not_before"))
        if due is not None:
            clock.jump_to(due)
        queue.handle_delivery(body["id"], owner="reclaim.testing", slots=Slots(1), gate=DrainGate())
    raise RuntimeError(
        f"{body['id']} had not ended after {MAX_DELIVERIES} deliveries: "
        f"{store.read(body['id']).record.get('status')} (a paused pipeline, or a parent?)"
    )


def _ended(store: Any, record: JobRecord, rings: list[str]) -> Job:
    from shared.status import render_job

    outputs = {}
    for name in render_job(record, 1)["outputs"]:
        data, _ = store.read_object(store.bucket_name, str(name))
        outputs[str(name).rsplit("/", 1)[-1]] = data
    error = record.get("error")
    return Job(
        id=str(record["id"]),
        status=str(record.get("status")),
        result=dict(record.get("result") or {}),
        error=dict(error) if isinstance(error, dict) else None,
        attempts=int(record.get("attempts") or 0),
        record=dict(record),
        outputs=outputs,
        rings=list(rings),
    )


def local_cloud(
    project: Path | str,
    *,
    pipeline_modules: Sequence[str] | None = None,
    log_dir: Path | str | None = None,
    **config: Any,
) -> LocalCloud:
    """A LocalCloud (start it with `with`) whose functions import the project's
    [tool.reclaim] pipeline_modules (or `pipeline_modules`) from its app_dir. `config`
    takes any other CloudConfig field (max_instances, concurrency, function_env, ...).
    Needs the local cloud's tools (`pip install 'reclaim[dev]'`)."""
    from reclaim.cli.project import load
    from reclaim.local import tools
    from reclaim.local.cloud import LocalCloud

    tools.require("reclaim.testing.local_cloud")
    root = Path(project).resolve()
    found = load(root)
    if pipeline_modules is None:
        if found is None:
            raise ValueError(f"{root}/pyproject.toml has no [tool.reclaim]: name the modules")
        pipeline_modules = found.pipeline_modules
    app_dir = found.app_dir if found is not None else root
    if str(app_dir) not in sys.path:  # the launcher checks schedules and routes by importing
        sys.path.insert(0, str(app_dir))
    env = {**config.pop("function_env", {}), "RECLAIM_PIPELINE_MODULES": ",".join(pipeline_modules)}
    logs = (
        Path(log_dir)
        if log_dir is not None
        else root / ".reclaim" / "test-logs" / uuid.uuid4().hex[:8]
    )
    return LocalCloud.for_tests(function_env=env, python_path=(app_dir,), log_dir=logs, **config)


def __getattr__(name: str) -> Any:
    if name == "LocalCloud":  # the type, for annotations, without starting anything
        from reclaim.local.cloud import LocalCloud

        return LocalCloud
    raise AttributeError(f"module 'reclaim.testing' has no attribute {name!r}")
