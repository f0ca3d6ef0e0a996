"""Routed uploads on the in-memory store: the routed job, exactly once per object
version, an upload batch held open until its closing object, in either order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared import records
from shared.config import Settings
from shared.features import workflow_graph as graph
from shared.features import workflows
from shared.features.table import context
from shared.seams import Context
from shared.storage import record_ids
from shared.stores.memory import MemoryStore
from shared.submission.upload_routes import Routes, Uploaded, parse
from shared.submission.uploads import Routed, route_upload
from tests.unit.unit_support import Bell

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
SETTINGS = Settings.from_env({})
BUCKET = SETTINGS.uploads_bucket
ROUTES = parse(
    {
        "unrouted": "ignore",
        "routes": [
            {
                "name": "csv",
                "prefix": "reports/",
                "suffixes": [".csv"],
                "pipeline": "upload-digest",
                "batch": {
                    "from": "folder",
                    "close_with": "_done",
                    "on_complete": {"pipeline": "demo", "payload": {"stages": 1}},
                },
            },
            {"name": "plain", "prefix": "plain/", "pipeline": "upload-digest"},
        ],
    },
    None,
)


def callbacks(store: MemoryStore) -> list[str]:
    """The callback records in the store (by name, both layouts)."""
    return [i for i in record_ids(store.names("jobs/")) if i.startswith("cb-")]


def setup() -> tuple[Context, MemoryStore, Bell]:
    store, bell = MemoryStore(), Bell()
    return context(store, bell, SETTINGS), store, bell


def send(ctx: Context, name: str, generation: int = 1, routes: Routes = ROUTES) -> Routed:
    return route_upload(ctx, routes, Uploaded(BUCKET, name, generation, "text/csv", 4), NOW)


def end(ctx: Context, store: MemoryStore, done: Routed) -> None:
    """A member's terminal write and its batch hook (what shared.finish runs)."""
    assert done.job is not None
    record: dict[str, Any] = {**store.read(done.job.job_id).record, "status": "done"}
    workflows.batch_hook(ctx, record)  # type: ignore[arg-type]


def test_routed_upload_is_one_job_per_object_version() -> None:
    ctx, _store, bell = setup()
    first, again, newer = (
        send(ctx, "plain/a.csv"),
        send(ctx, "plain/a.csv"),
        send(ctx, "plain/a.csv", 2),
    )
    assert first.job and again.job and newer.job
    assert first.job.created and not again.job.created and newer.job.created
    assert first.job.job_id == records.upload_job_id(BUCKET, "plain/a.csv", 1)
    assert bell.rung == [first.job.job_id, newer.job.job_id]
    assert first.to_json()["route"] == "plain"


def test_unrouted_and_uncovered_uploads_write_nothing() -> None:
    ctx, store, bell = setup()
    assert send(ctx, "plain/x.csv").job is not None  # under plain/: routed
    before = store.names()
    assert "matches no route" in str(send(ctx, "reports/a.txt").ignored)
    other = route_upload(ctx, ROUTES, Uploaded("elsewhere", "plain/a", 1), NOW)
    assert "no upload route covers" in str(other.ignored)
    assert store.names() == before and len(bell.rung) == 1


def test_a_refused_payload_is_ignored_with_the_reason() -> None:
    ctx, store, _ = setup()
    routes = parse({"routes": [{"name": "w", "prefix": "hooks/", "pipeline": "webhook"}]}, None)
    done = send(ctx, "hooks/a.json", routes=routes)
    assert done.job is None and "route w: payload rejected by webhook" in str(done.ignored)
    assert not store.names("jobs/")


def test_batch_waits_for_its_closing_object_then_calls_back_once() -> None:
    ctx, store, _ = setup()
    a, b = send(ctx, "reports/d1/a.csv"), send(ctx, "reports/d1/b.csv")
    assert a.job and b.job and a.job.batch_id == b.job.batch_id
    batch = a.job.batch_id
    assert batch is not None and store.list_batch(batch) == sorted([a.job.job_id, b.job.job_id])
    end(ctx, store, a)
    end(ctx, store, b)  # every member ended, but the folder is not closed yet
    assert not callbacks(store)
    closed = send(ctx, "reports/d1/_done")
    assert closed.closed == batch and closed.callback == graph.callback_id(batch)
    assert store.read(graph.callback_id(batch)).record["callback_of"] == batch
    again = send(ctx, "reports/d1/_done")  # a redelivered closing notification
    assert again.callback == closed.callback and len(callbacks(store)) == 1


def test_closing_before_the_last_member_ends_lets_that_member_call_back() -> None:
    ctx, store, _ = setup()
    a = send(ctx, "reports/d2/a.csv")
    closed = send(ctx, "reports/d2/_done")
    assert closed.closed and closed.callback is None
    late = send(ctx, "reports/d2/late.csv")  # notification after the close: still a member
    end(ctx, store, a)
    assert not callbacks(store)
    end(ctx, store, late)
    assert late.job and late.job.batch_id and store.read(graph.callback_id(late.job.batch_id))


def test_the_sweep_leaves_a_batch_hold_alone() -> None:
    ctx, store, _ = setup()
    a = send(ctx, "reports/d3/a.csv")
    assert a.job and a.job.batch_id
    later = datetime(2027, 1, 1, tzinfo=UTC)
    workflows.sweep_open(ctx, set(), later, grace_s=0, limit=100)
    assert store.list_blobs(graph.hold_name(a.job.batch_id))
