"""The seams hold: the feature table (shared.features.table) is the only place shared/ learns of
the features (import-linter's contracts in pyproject.toml hold who imports it, and the
layers: tests/unit/test_layout.py the rest); nothing works by import side effect; no
function over 120 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.errors import InvalidInput, InvalidSubmission
from shared.features import executions, expiry, flow, pool_routing, uniqueness, workflows
from shared.features import table as features
from shared.features.waits import fanout as waits_fanout
from shared.features.waits import hooks as waits
from shared.finish import after_terminal
from shared.jobs import JobStatus
from shared.queue import Queue
from shared.seams import Context, Feature, ListFilter
from shared.stores.memory import MemoryStore
from shared.submission import parse
from tests.unit.test_docs import ROOT
from tests.unit.unit_support import Bell

SHARED = ROOT / "shared"


def _sources() -> list[Path]:
    return sorted(p for p in SHARED.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_function_in_shared_is_over_120_lines() -> None:
    long = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1})"
        for p in _sources()
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > 120
    ]
    assert long == []


def test_importing_a_module_installs_nothing() -> None:
    """Nothing works by import side effect: a fresh interpreter that imports every module
    of shared/ finds no module-level hook, gate or table anywhere but in the table."""
    check = (
        "import importlib, pathlib, sys; root = pathlib.Path('shared'); "
        "[importlib.import_module('.'.join(p.with_suffix('').parts).removesuffix('.__init__'))"
        " for p in sorted(root.rglob('*.py'))"
        " if '__pycache__' not in p.parts and p.name != '__main__.py']; "
        "from shared import finish; "
        "assert not hasattr(finish, 'HOOKS') and not hasattr(finish, 'REQUEUE_HOOKS'); "
        "assert 'shared.lifecycle' not in sys.modules and 'shared.gates' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_table_runs_each_seam_in_the_order_the_features_are_listed() -> None:
    ctx = features.context(MemoryStore(), Bell(), Settings.from_env({}))
    assert list(ctx.gates()) == [
        pool_routing.gate,
        expiry.gate,
        flow.pause_gate,
        flow.limit_gate,
        flow.rate_gate,
    ]
    assert list(ctx.terminal_hooks()) == [
        uniqueness.release_on_terminal,
        flow.record_ended,
        flow.release_hook,
        waits_fanout.child_ended,
        waits_fanout.parent_ended,
        workflows.batch_hook,
        workflows.release_hook,
        executions.cancel_hook,
    ]
    assert list(ctx.requeue_hooks()) == [flow.release_hook]
    assert list(ctx.sweep_checks()) == [
        expiry.sweep_check,
        waits.sweep_check,  # a parked job is the waits feature's, before workflows' look
        workflows.sweep_check,
        executions.sweep_check,
    ]
    assert [p.name for p in ctx.sweep_passes()] == ["time", "flow", "waits", "workflows"]


def test_the_front_door_hands_down_the_table_it_was_given() -> None:
    store = MemoryStore()
    plain = Queue(store, Bell(), Settings.from_env({}), table=())
    assert plain.ctx.features == () and Queue(store, Bell(), plain.settings).ctx.features == (
        features.FEATURES
    )


def test_a_context_without_features_ends_a_job_with_no_hook() -> None:
    store = MemoryStore()
    store.add_pending("j1")
    ctx = Context(store, Bell(), Settings.from_env({}))
    assert after_terminal(ctx, {"id": "j1", "status": "done"})  # type: ignore[typeddict-item]
    assert store.names("pending/") == []


def test_each_index_prefix_is_owned_by_one_feature_and_handed_to_the_store() -> None:
    from shared import storage

    owned = [p for f in features.FEATURES for p in f.index_prefixes]
    assert len(owned) == len(set(owned))
    assert not set(owned) & set(storage.INDEX_PREFIXES)  # the store's own list knows none
    bare = MemoryStore()
    with pytest.raises(InvalidInput):
        bare.put_blob(owned[0] + "x", b"", generation=0)
    Queue(bare, Bell(), Settings.from_env({}))  # the front door hands the table's in
    assert bare.put_blob(owned[0] + "x", b"", generation=0) > 0
    assert set(owned) <= bare.index_prefixes


@pytest.mark.parametrize("prefix", ["jobs/", "pending/x/", "outputs/", "no-slash", "a/../"])
def test_a_prefix_that_could_reach_records_or_outputs_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        MemoryStore().allow_index_prefixes([prefix])


# --- the seams a new feature needs: an index written at submit, a listing filter, and its
# fields in summaries (a feature of the test's own: a job's "color")

COLORS = "colors/"


def _color_fields(job: Any, where: str, problems: list[str]) -> dict[str, Any]:
    color = job.get("color")
    if color is not None and color not in ("red", "blue"):
        problems.append(f"{where}.color must be red or blue")
    return {} if color is None else {"color": color}


def _index_color(ctx: Context, record: Any) -> None:
    assert record["id"] not in ctx.store.list_jobs(), "the index comes before the record"
    if record.get("color") is not None:
        ctx.store.put_blob(f"{COLORS}{record['color']}/{record['id']}", b"", generation=0)


def _colored(ctx: Context, value: str) -> list[str]:
    pre = f"{COLORS}{value}/"
    return [b.name.removeprefix(pre) for b in ctx.store.list_blobs(pre)]


COLOR = Feature(
    name="color",
    submit_keys=frozenset({"color"}),
    parse=_color_fields,
    index_prefixes=(COLORS,),
    create_hooks=(_index_color,),
    filters=(
        ListFilter("color", "only jobs of this color", _colored, lambda r, v: r.get("color") == v),
    ),
    summary_fields=("color",),
)


def _color_queue(store: MemoryStore) -> Queue:
    return Queue(store, Bell(), Settings.from_env({}), table=(*features.FEATURES, COLOR))


def _submit(queue: Queue, body: dict[str, Any]) -> Any:
    request = parse.parse_submission(body, queue.settings, queue.ctx.features)
    return queue.submit(request)


def test_a_create_hook_writes_its_index_before_each_new_record_and_only_for_new_ones() -> None:
    store = MemoryStore()
    queue = _color_queue(store)
    body = {
        "batch_id": "b1",
        "jobs": [
            {"pipeline": "demo", "id": "r1", "color": "red"},
            {"pipeline": "demo", "id": "u1"},
        ],
    }
    _submit(queue, body)
    assert store.names(COLORS) == [f"{COLORS}red/r1"]
    store.delete_blob(f"{COLORS}red/r1")
    assert not _submit(queue, body).jobs[0].created  # a replay finds the job: no new index
    assert store.names(COLORS) == []


def test_a_bad_value_of_a_features_key_writes_nothing() -> None:
    store = MemoryStore()
    with pytest.raises(InvalidSubmission):
        _submit(_color_queue(store), {"pipeline": "demo", "color": "green"})
    assert store.names("") == []


def test_a_filter_reads_its_index_not_every_record_and_the_record_decides() -> None:
    store = MemoryStore()
    queue = _color_queue(store)
    for i, color in enumerate(["red", "blue", "red", None, "red"]):
        _submit(queue, {"pipeline": "demo", "id": f"j{i}", **({"color": color} if color else {})})
    store.put_blob(f"{COLORS}red/j1", b"", generation=0)  # a stale marker: j1 is blue
    store.calls.clear()
    found = queue.list_jobs(where={"color": "red"})
    assert [r["id"] for r in found.records] == ["j0", "j2", "j4"]
    assert store.calls["read"] == 4  # the four marked, not the five records
    assert [r["id"] for r in queue.list_jobs(where={"color": "red"}, limit=1).records] == ["j0"]
    assert queue.list_jobs(status=JobStatus.DONE, where={"color": "red"}).records == []
    with pytest.raises(InvalidInput, match="unknown filter"):
        queue.list_jobs(where={"size": "xl"})


def test_summary_fields_show_in_a_batchs_members_and_on_the_dashboard() -> None:
    from shared.dashboard import views

    store = MemoryStore()
    queue = _color_queue(store)
    body = {
        "batch_id": "b2",
        "jobs": [
            {"pipeline": "demo", "id": "c1", "color": "blue"},
            {"pipeline": "demo", "id": "c2"},
        ],
    }
    _submit(queue, body)
    members = {m["id"]: m for m in queue.get_batch("b2").members}
    assert members["c1"]["color"] == "blue" and "color" not in members["c2"]
    fields = queue.ctx.summary_fields()
    assert views.feature_facts(queue.read("c1"), fields) == [("color", "blue")]
    assert views.feature_facts({**queue.read("c2"), "color": ["a", "b"]}, fields) == [
        ("color", "a, b")
    ]
    assert "color" not in Queue(store, Bell(), queue.settings).get_batch("b2").members[0]


def test_the_cli_list_offers_one_option_per_filter_of_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reclaim import cli

    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, COLOR))
    args = cli.build_parser().parse_args(["list", "--color", "red"])
    assert (args.where_names[-1], args.where_color) == ("color", "red")
    monkeypatch.setattr(features, "FEATURES", ())
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["list", "--color", "red"])
