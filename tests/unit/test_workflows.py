"""Workflows on the MemoryStore: callbacks exactly once, dependencies released or cancelled,
the sweep's repair, and the submit-side checks (the same rules run over fake-gcs-server
and HTTP in tests/integration/test_workflows_http.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import control, finish, sweeper
from shared.config import Settings
from shared.errors import Conflict, InvalidSubmission
from shared.features import workflow_graph as graph
from shared.features import workflows
from shared.features.table import context
from shared.jobs import JobStatus
from shared.pipelines import StageContext
from shared.queue import parse_submission
from shared.storage import job_object
from shared.stores.memory import MemoryStore
from shared.submission import create as submission
from tests.unit.unit_support import Bell, Clock, handle, pipeline, settings

NOW = datetime(2026, 7, 1, tzinfo=UTC)


def post(store: MemoryStore, bell: Bell, body: dict[str, Any]) -> submission.SubmitResult:
    parsed = parse_submission(body, settings())
    return submission.submit(context(store, bell, Settings.from_env({})), parsed, NOW)


def status(store: MemoryStore, job_id: str) -> str:
    return str(store.read(job_id).record["status"])


def end(store: MemoryStore, job_id: str, to: str = "done") -> None:
    """Write a terminal status as an owner would, then what follows it."""
    stored = store.read(job_id)
    record = {**stored.record, "status": JobStatus(to), "result": {"from": job_id}}
    written = store.update(record, stored.generation)
    assert finish.after_terminal(context(store, Bell(), settings()), written.record)


def callbacks(store: MemoryStore) -> list[str]:
    return [j for j in store.list_jobs() if j.startswith("cb-")]


# ------------------------------------------------------------------ pure


def test_cycles_name_every_job_on_one() -> None:
    assert graph.cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a", "b", "c"]
    assert graph.cycles({"a": ["a"]}) == ["a"]
    assert graph.cycles({"a": [], "b": ["a"], "c": ["a", "b"], "d": ["b", "c"]}) == []
    assert graph.cycles({"a": ["outside"]}) == []


def test_parent_verdict() -> None:
    assert graph.parent_verdict({"a": "done", "b": "running"}, "cancel") == ("wait", None)
    assert graph.parent_verdict({"a": "done", "b": "done"}, "cancel") == ("release", None)
    failed = {"parent": "b", "status": "failed"}
    assert graph.parent_verdict({"a": "queued", "b": "failed"}, "cancel") == ("cancel", failed)
    assert graph.parent_verdict({"a": "queued", "b": "failed"}, "run") == ("wait", None)
    assert graph.parent_verdict({"a": "done", "b": "failed"}, "run") == ("release", failed)
    assert graph.parent_verdict({"a": None}, "run") == ("wait", None)  # unreadable: wait


def test_callback_id_is_deterministic_and_a_valid_job_id() -> None:
    from shared import records

    assert graph.callback_id("b1") == graph.callback_id("b1") != graph.callback_id("b2")
    records.validate_job_id(graph.callback_id("b1"))


# ------------------------------------------------------------------ submit checks


def test_a_cycle_is_refused_naming_its_jobs() -> None:
    body = {
        "jobs": [
            {"id": "a", "pipeline": "demo", "depends_on": ["c"]},
            {"id": "b", "pipeline": "demo", "depends_on": ["a"]},
            {"id": "c", "pipeline": "demo", "depends_on": ["b"]},
        ]
    }
    with pytest.raises(InvalidSubmission, match="cycle through a, b, c"):
        parse_submission(body, settings())


def test_an_unknown_parent_is_refused_and_nothing_is_written() -> None:
    store = MemoryStore()
    body = {"jobs": [{"id": "k", "pipeline": "demo", "depends_on": ["nope", "nada"]}]}
    with pytest.raises(InvalidSubmission, match=r"unknown job.*nada, nope"):
        post(store, Bell(), body)
    assert store.list_jobs() == [] and store.list_pending() == []
    assert store.list_blobs("workflows/") == []


@pytest.mark.parametrize(
    "job",
    [
        {"pipeline": "demo", "depends_on": []},
        {"pipeline": "demo", "depends_on": "a"},
        {"pipeline": "demo", "depends_on": ["a", "a"]},
        {"pipeline": "demo", "depends_on": ["../x"]},
        {"pipeline": "demo", "on_parent_failure": "run"},
        {"pipeline": "demo", "depends_on": ["a"], "on_parent_failure": "maybe"},
        {"id": "s", "pipeline": "demo", "depends_on": ["s"]},
    ],
)
def test_bad_dependency_fields_are_refused(job: dict[str, Any]) -> None:
    with pytest.raises(InvalidSubmission):
        parse_submission(job, settings())


@pytest.mark.parametrize(
    "on_complete",
    [{"pipeline": "nope"}, {"pipeline": "demo", "extra": 1}, "demo", {"payload": {}}],
)
def test_bad_on_complete_is_refused(on_complete: Any) -> None:
    body = {"jobs": [{"pipeline": "demo"}], "on_complete": on_complete}
    with pytest.raises(InvalidSubmission):
        parse_submission(body, settings())


def test_another_on_complete_for_the_same_batch_is_a_conflict() -> None:
    store = MemoryStore()
    post(
        store,
        Bell(),
        {"batch_id": "b1", "jobs": [{"pipeline": "demo"}], "on_complete": {"pipeline": "demo"}},
    )
    with pytest.raises(Conflict):
        post(
            store,
            Bell(),
            {
                "batch_id": "b1",
                "jobs": [{"pipeline": "demo"}],
                "on_complete": {"pipeline": "demo", "payload": {"stages": 1}},
            },
        )


# ------------------------------------------------------------------ callbacks


def batch_with_callback(store: MemoryStore, n: int, batch_id: str = "b1") -> list[str]:
    body = {
        "batch_id": batch_id,
        "jobs": [{"pipeline": "demo", "id": f"{batch_id}-m{i}"} for i in range(n)],
        "on_complete": {"pipeline": "demo", "payload": {"stages": 1}},
    }
    return [j.job_id for j in post(store, Bell(), body).jobs]


def test_the_last_member_creates_one_callback_listing_every_member() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 3)
    end(store, ids[0])
    end(store, ids[1], "failed")
    assert callbacks(store) == []
    end(store, ids[2], "cancelled")
    (cb,) = callbacks(store)
    record = store.read(cb).record
    assert record["callback_of"] == "b1" and record["status"] == "queued"
    assert cb in [e.job_id for e in store.list_pending()]
    members = workflows.batch_members(store, "b1")
    assert {m["id"]: m["status"] for m in members} == {
        ids[0]: "done",
        ids[1]: "failed",
        ids[2]: "cancelled",
    }
    assert all(m["result_ref"] == job_object(m["id"]) for m in members)


def test_members_racing_to_finish_create_exactly_one_callback() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 40)
    barrier = threading.Barrier(len(ids))

    def finish_one(job_id: str) -> None:
        barrier.wait()
        end(store, job_id)

    threads = [threading.Thread(target=finish_one, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(callbacks(store)) == 1


def test_a_member_costs_one_delete_and_one_short_list_not_a_batch_read() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 50)
    store.calls.clear()
    end(store, ids[0])
    # read+update of the member itself, the open marker's delete, one list of limit 1, the
    # read of its parent mark (absent: no children, no listing), the pending marker's
    # delete: nothing scales with the batch
    assert store.calls["read"] == 2
    assert store.calls["list"] == 1


def test_a_crash_before_the_hook_is_repaired_by_the_sweep() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    end(store, ids[0])
    stored = store.read(ids[1])  # the last member's terminal write, then the process dies
    store.update({**stored.record, "status": JobStatus.DONE}, stored.generation)
    assert callbacks(store) == []
    later = NOW + timedelta(seconds=60)  # a sweep after the crash
    sweeper.run_once(context(store, Bell(), settings()), later)
    assert len(callbacks(store)) == 1
    sweeper.run_once(context(store, Bell(), settings()), later)  # repeats are harmless
    assert len(callbacks(store)) == 1


def test_retry_after_the_callback_fired_does_not_fire_it_again() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    end(store, ids[0], "failed")
    end(store, ids[1])
    (cb,) = callbacks(store)
    control.retry(context(store, Bell(), settings(max_attempts=3), Clock()), ids[0], by="op")
    assert store.list_blobs(graph.open_prefix("b1")) == []  # the batch stays complete
    end(store, ids[0])
    assert callbacks(store) == [cb]


def test_retry_before_the_batch_completed_reopens_it() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    end(store, ids[0], "failed")
    control.retry(context(store, Bell(), settings(max_attempts=3), Clock()), ids[0], by="op")
    end(store, ids[1])
    assert callbacks(store) == []  # the retried member runs again: not complete yet
    end(store, ids[0])
    assert len(callbacks(store)) == 1


def test_batch_view_shows_the_callback() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 1)
    assert workflows.batch_on_complete(store, "b1") == {
        "pipeline": "demo",
        "id": None,
        "status": None,
    }
    end(store, ids[0])
    assert workflows.batch_on_complete(store, "b1") == {
        "pipeline": "demo",
        "id": graph.callback_id("b1"),
        "status": "queued",
    }
    assert workflows.batch_on_complete(store, "other") is None


# ------------------------------------------------------------------ dependencies


def diamond(store: MemoryStore, bell: Bell, policy: str | None = None) -> None:
    extra = {"on_parent_failure": policy} if policy else {}
    post(
        store,
        bell,
        {
            "jobs": [
                {"id": "A", "pipeline": "demo"},
                {"id": "B", "pipeline": "demo", "depends_on": ["A"]},
                {"id": "C", "pipeline": "demo", "depends_on": ["A"]},
                {"id": "D", "pipeline": "demo", "depends_on": ["B", "C"], **extra},
            ]
        },
    )


def test_a_diamond_is_released_in_order_and_rung_at_once() -> None:
    store = MemoryStore()
    bell = Bell()
    diamond(store, bell)
    assert bell.rung == ["A"]  # children are not rung while they wait
    assert [status(store, j) for j in "ABCD"] == ["queued", "waiting", "waiting", "waiting"]
    bell.rung.clear()
    stored = store.read("A")
    written = store.update({**stored.record, "status": JobStatus.DONE}, stored.generation)
    finish.after_terminal(context(store, bell, settings()), written.record)
    assert sorted(bell.rung) == ["B", "C"]
    assert [status(store, j) for j in "BCD"] == ["queued", "queued", "waiting"]
    end(store, "B")
    assert status(store, "D") == "waiting"
    end(store, "C")
    assert status(store, "D") == "queued"
    assert "released" in [e["event"] for e in store.read("D").record["history"]]
    assert workflows.children_of(store, "A") == ["B", "C"]


def test_a_waiting_job_is_never_claimed_nor_failed_by_the_watchdog() -> None:
    store = MemoryStore()
    diamond(store, Bell())
    clock = Clock(NOW)
    clock.advance(10_000)
    outcome = handle("D", store, settings(), clock)
    assert outcome.kind.value == "skipped"
    sweeper.run_once(context(store, Bell(), settings()), clock())
    record = store.read("D").record
    assert record["status"] == "waiting" and record["attempts"] == 0
    assert "D" in [e.job_id for e in store.list_pending()]


def test_a_failed_parent_cancels_its_child_and_grandchild() -> None:
    store = MemoryStore()
    diamond(store, Bell())
    end(store, "A", "failed")
    for child in "BCD":
        record = store.read(child).record
        assert record["status"] == "cancelled", child
    assert store.read("B").record["parent_failure"] == {"parent": "A", "status": "failed"}
    assert store.read("D").record["parent_failure"]["parent"] in ("B", "C")
    assert store.list_pending() == []


def test_run_policy_runs_after_a_failed_parent_naming_it() -> None:
    store = MemoryStore()
    diamond(store, Bell(), policy="run")
    end(store, "A")
    end(store, "B", "failed")
    assert status(store, "D") == "waiting"
    end(store, "C")
    record = store.read("D").record
    assert record["status"] == "queued"
    assert record["parent_failure"] == {"parent": "B", "status": "failed"}


def test_a_child_of_a_parent_already_done_is_released_by_submit() -> None:
    store = MemoryStore()
    post(store, Bell(), {"id": "P", "pipeline": "demo"})
    end(store, "P")
    bell = Bell()
    post(store, bell, {"id": "K", "pipeline": "demo", "depends_on": ["P"]})
    assert status(store, "K") == "queued" and bell.rung == ["K"]


def test_the_sweep_releases_a_child_a_crash_left_waiting() -> None:
    store = MemoryStore()
    post(
        store,
        Bell(),
        {
            "jobs": [
                {"id": "P", "pipeline": "demo"},
                {"id": "K", "pipeline": "demo", "depends_on": ["P"]},
            ]
        },
    )
    stored = store.read("P")  # the parent's terminal write, then the process dies
    store.update({**stored.record, "status": JobStatus.DONE}, stored.generation)
    store.remove_pending("P")  # even with its marker gone, the child's own marker is seen
    bell = Bell()
    sweeper.run_once(context(store, bell, settings()), NOW)
    assert status(store, "K") == "queued" and "K" in bell.rung


def test_stages_read_their_parents_results() -> None:
    seen: dict[str, Any] = {}

    def stage(ctx: StageContext) -> None:
        seen.update(ctx.parents())

    name = pipeline([("read", stage)])
    store = MemoryStore()
    post(
        store,
        Bell(),
        {
            "jobs": [
                {"id": "P", "pipeline": "demo"},
                {"id": "K", "pipeline": name, "depends_on": ["P"]},
            ]
        },
    )
    end(store, "P")
    handle("K", store, settings())
    assert status(store, "K") == "done"
    assert seen == {"P": {"status": "done", "result": {"from": "P"}, "outputs": []}}


def test_a_waiting_job_can_be_cancelled_by_a_person() -> None:
    store = MemoryStore()
    diamond(store, Bell())
    control.cancel(context(store, Bell(), settings(), Clock()), "D", by="op", reason=None)
    assert status(store, "D") == "cancelled"
    end(store, "A")
    end(store, "B")
    end(store, "C")
    assert status(store, "D") == "cancelled"


def test_status_and_the_cli_show_parents_and_children() -> None:
    from reclaim.cli import render
    from shared import status

    store = MemoryStore()
    diamond(store, Bell())
    a = status.read_job(context(store, Bell(), settings()), "A", NOW).to_json()
    d = status.read_job(context(store, Bell(), settings()), "D", NOW).to_json()
    assert a["children"] == ["B", "C"] and "depends_on" not in a
    assert d["depends_on"] == ["B", "C"] and d["on_parent_failure"] == "cancel"
    assert "children" not in d
    text = render.job_text(d)
    assert "parents" in text and "B, C" in text
    assert "children" in render.job_text(a) and "B, C" in render.job_text(a)


def test_the_batch_view_carries_on_complete() -> None:
    from shared import status

    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    view = status.read_batch(context(store, Bell(), settings()), "b1", NOW).to_json()
    assert view["on_complete"] == {"pipeline": "demo", "id": None, "status": None}
    end(store, ids[0])
    end(store, ids[1])
    view = status.read_batch(context(store, Bell(), settings()), "b1", NOW).to_json()
    assert view["on_complete"]["id"] == graph.callback_id("b1")
    post(store, Bell(), {"batch_id": "b2", "jobs": [{"pipeline": "demo"}]})
    assert (
        "on_complete"
        not in status.read_batch(context(store, Bell(), settings()), "b2", NOW).to_json()
    )


def test_a_replay_must_ask_for_the_same_parents_and_callback() -> None:
    store = MemoryStore()
    post(store, Bell(), {"batch_id": "b9", "jobs": [{"id": "m", "pipeline": "demo"}]})
    with pytest.raises(Conflict, match="on_complete"):  # the members could never fire it
        post(
            store,
            Bell(),
            {
                "batch_id": "b9",
                "jobs": [{"id": "m", "pipeline": "demo"}],
                "on_complete": {"pipeline": "demo"},
            },
        )
    post(store, Bell(), {"id": "p", "pipeline": "demo"})
    post(store, Bell(), {"id": "k", "pipeline": "demo", "depends_on": ["p"]})
    with pytest.raises(Conflict, match="depends_on"):
        post(store, Bell(), {"id": "k", "pipeline": "demo"})
    again = post(store, Bell(), {"id": "k", "pipeline": "demo", "depends_on": ["p"]})
    assert again.jobs[0].created is False


def test_the_sweep_repairs_a_batch_a_stray_open_marker_holds_back() -> None:
    """A member terminal and unmarked, yet its open marker still there (a retry that
    re-opened the batch and then lost its write): the sweep runs its batch hook."""
    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    end(store, ids[0])
    end(store, ids[1])
    cb = graph.callback_id("b1")
    assert callbacks(store) == [cb]
    store.put_blob(graph.open_name("b1", ids[0]), b"", generation=0)  # the stray
    result = sweeper.run_once(context(store, Bell(), settings()), NOW)
    assert result.repaired == 1
    assert store.list_blobs(graph.open_prefix("b1")) == []
    assert callbacks(store) == [cb]  # still exactly one


def test_a_stray_open_marker_of_an_unfinished_batch_fires_the_callback_once_repaired() -> None:
    store = MemoryStore()
    ids = batch_with_callback(store, 2)
    end(store, ids[0])
    stored = store.read(ids[1])  # ended, unmarked, but its open marker never deleted
    store.update({**stored.record, "status": JobStatus.DONE}, stored.generation)
    store.remove_pending(ids[1])
    assert callbacks(store) == []
    sweeper.run_once(context(store, Bell(), settings()), NOW)
    assert callbacks(store) == [graph.callback_id("b1")]


def test_the_sweep_fires_a_callback_a_crashed_submit_held_back() -> None:
    """Open markers of members whose records were never written (the submit died):
    once older than the orphan grace they are dropped and the callback fires."""
    store = MemoryStore()
    ids = batch_with_callback(store, 1)
    store.put_blob(graph.open_name("b1", "never-written"), b"", generation=0)
    end(store, ids[0])
    assert callbacks(store) == []
    sweeper.run_once(context(store, Bell(), settings()), datetime.now(UTC))  # too young: kept
    assert callbacks(store) == []
    later = datetime.now(UTC) + timedelta(seconds=settings().orphan_marker_grace_seconds + 1)
    sweeper.run_once(context(store, Bell(), settings()), later)
    assert callbacks(store) == [graph.callback_id("b1")]


def test_the_sweep_reads_no_pending_member_for_the_callback_repair() -> None:
    store = MemoryStore()
    batch_with_callback(store, 30)
    store.calls.clear()
    sweeper.run_once(context(store, Bell(), settings()), NOW)
    # the sweep's own reads of the pending records only, and its index board
    assert store.calls["read"] == 30 + 1


def test_a_batch_refused_for_another_on_complete_gives_its_unique_keys_back() -> None:
    """Unique keys are taken before the workflow markers: a 409 from the seal must not
    leave them held by jobs that will never exist."""
    store, bell = MemoryStore(), Bell()
    post(
        store,
        bell,
        {"batch_id": "b1", "jobs": [{"pipeline": "demo"}], "on_complete": {"pipeline": "demo"}},
    )
    other = {"pipeline": "demo", "payload": {"stages": 2}}
    keyed = {
        "batch_id": "b1",
        "jobs": [{"pipeline": "demo", "unique_key": "k"}],
        "on_complete": other,
    }
    with pytest.raises(Conflict, match="another on_complete"):
        post(store, bell, keyed)
    assert store.list_blobs("unique/") == []
    again = post(store, bell, {"pipeline": "demo", "unique_key": "k"})
    assert again.jobs[0].created and again.jobs[0].duplicate_of is None
