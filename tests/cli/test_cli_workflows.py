"""`reclaim watch` shows a batch's callback once it fires; `reclaim status` shows a job's
parents and children (on fake-gcs-server, through the library's submit and finish)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from shared import finish, job_queue
from shared.config import Settings
from shared.features import workflow_graph as graph
from shared.features.table import context
from shared.queue import parse_submission
from shared.submission import create as submission
from tests.cli.cli_support import Cloud


class _Quiet:
    """A doorbell nobody listens to: these tests end the jobs themselves."""

    def ring(
        self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
    ) -> None:
        pass

    def ring_many(
        self,
        job_ids: Iterable[str],
        traceparents: Mapping[str, str] | None = None,
        *,
        pipelines: Mapping[str, str] | None = None,
    ) -> list[str]:
        return []


def _post(cloud: Cloud, body: dict[str, Any]) -> list[str]:
    parsed = parse_submission(body, Settings.from_env({}))
    result = submission.submit(
        context(cloud.store, _Quiet(), Settings.from_env({})), parsed, datetime.now(UTC)
    )
    return [j.job_id for j in result.jobs]


def _finish(cloud: Cloud, job_id: str) -> None:
    """Claim, end done, then what follows a terminal write (as the runner does)."""
    job = cloud.drive(job_id, "running")
    stored = cloud.store.read(job_id)
    done = {**job, **job_queue.done_fields(job, datetime.now(UTC), {"ok": True})}
    written = cloud.store.update(done, stored.generation)
    ctx = context(cloud.store, _Quiet(), Settings.from_env({}))
    assert finish.after_terminal(ctx, written.record)


def test_watch_shows_the_callback_and_status_shows_parents_and_children(
    cloud: Cloud, fresh: Any
) -> None:
    batch = fresh("wf")
    parent, child = f"{batch}-p", f"{batch}-c"
    body = {
        "batch_id": batch,
        "jobs": [
            {"id": parent, "pipeline": "demo"},
            {"id": child, "pipeline": "demo", "depends_on": [parent]},
        ],
        "on_complete": {"pipeline": "demo"},
    }
    _post(cloud, body)
    waiting = cloud.ok("status", child)
    assert "waiting" in waiting.out and f"parents         {parent}" in waiting.out
    _finish(cloud, parent)
    assert "children" in cloud.ok("status", parent).out
    assert child in cloud.ok("status", parent).out
    _finish(cloud, child)
    watched = cloud.ok("watch", batch, "--interval", "0.1")
    assert f"on_complete: {graph.callback_id(batch)} queued" in watched.err
    shown = cloud.ok("status", graph.callback_id(batch), "--json").json()
    assert shown["callback_of"] == batch
