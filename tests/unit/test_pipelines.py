"""Pipelines as plain functions: the registry, the demo's options, upload-digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from shared.logs import JobLogger
from shared.pipelines import (
    PermanentError,
    Pipeline,
    StageContext,
    Stopped,
    UnknownPipeline,
    demo,
    get_pipeline,
    pipeline_names,
    register,
    upload_digest,
)
from shared.stores.memory import MemoryStore


class Outputs:
    def __init__(self) -> None:
        self.written: dict[str, tuple[Any, str | None]] = {}

    def write(self, name: str, data: Any, content_type: str | None = None) -> str:
        self.written[name] = (data, content_type)
        return f"outputs/job/1/{name}"


def ctx_for(
    payload: dict[str, Any],
    *,
    attempt: int = 1,
    state: dict[str, Any] | None = None,
    store: Any = None,
    stopped: bool = False,
) -> StageContext:
    return StageContext(
        "job-1",
        payload,
        {} if state is None else state,
        attempt,
        JobLogger("job-1"),
        Outputs(),
        store,
        stopped=lambda: stopped,
    )


def run_all(name: str, payload: dict[str, Any], **kw: Any) -> StageContext:
    ctx = ctx_for(payload, **kw)
    for _, fn in get_pipeline(name).stages_for(payload):
        fn(ctx)
    return ctx


# --- registry


def test_builtins_are_registered() -> None:
    assert {"demo", "upload-digest"} <= set(pipeline_names())
    assert get_pipeline("demo") is demo.PIPELINE


def test_unknown_pipeline_is_a_named_error() -> None:
    with pytest.raises(UnknownPipeline, match="nope"):
        get_pipeline("nope")


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(Pipeline("demo", stages=(("x", lambda ctx: None),)))


def test_a_pipeline_without_stages_cannot_run() -> None:
    with pytest.raises(PermanentError):
        Pipeline("empty").stages_for({})
    with pytest.raises(ValueError):
        Pipeline("empty").check_payload({})


def test_context_payload_is_a_private_copy_and_check_stops() -> None:
    payload = {"nested": {"a": 1}}
    ctx = ctx_for(payload, stopped=True)
    ctx.payload["nested"]["a"] = 2
    assert payload["nested"]["a"] == 1
    with pytest.raises(Stopped):
        ctx.check()


# --- demo


@pytest.mark.parametrize(
    "payload",
    [
        {"stages": 0},
        {"stages": 51},
        {"stages": 2.5},
        {"stages": "3"},
        {"stages": True},
        {"sleep_s": -1},
        {"sleep_s": [0, 0, 0, 0]},
        {"sleep_s": "1"},
        {"fail_at": 3},
        {"fail_at": [0, -1]},
        {"fail_at": "0"},
        {"fail_attempts": -1},
        {"permanent": "yes"},
        {"output": 1},
    ],
)
def test_demo_rejects_bad_payloads(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        demo.PIPELINE.check_payload(payload)
    with pytest.raises(PermanentError):
        demo.PIPELINE.stages_for(payload)


def test_demo_runs_n_stages_and_reports_them() -> None:
    ctx = run_all("demo", {"stages": 4, "output": True})
    assert [c["stage"] for c in ctx.result["completed"]] == [0, 1, 2, 3]
    assert ctx.result["stages"] == 4
    assert len(ctx.result["outputs"]) == 4
    assert set(ctx.outputs.written) == {f"stage-{i}.json" for i in range(4)}  # type: ignore[attr-defined]


def test_demo_default_is_three_stages() -> None:
    assert [n for n, _ in demo.PIPELINE.stages_for({})] == ["stage-0", "stage-1", "stage-2"]


def test_demo_fails_only_the_first_attempts_when_asked() -> None:
    payload = {"stages": 3, "fail_at": 1, "fail_attempts": 2}
    stages = demo.PIPELINE.stages_for(payload)
    for attempt in (1, 2):
        ctx = ctx_for(payload, attempt=attempt)
        stages[0][1](ctx)
        with pytest.raises(RuntimeError, match="stage 1"):
            stages[1][1](ctx)
    ctx = ctx_for(payload, attempt=3)
    for _, fn in stages:
        fn(ctx)
    assert ctx.result["attempt"] == 3


def test_demo_permanent_failure_is_permanent() -> None:
    stages = demo.PIPELINE.stages_for({"stages": 1, "fail_at": [0], "permanent": True})
    with pytest.raises(PermanentError):
        stages[0][1](ctx_for({}))


def test_demo_sleep_stops_when_the_job_is_lost() -> None:
    stages = demo.PIPELINE.stages_for({"stages": 1, "sleep_s": 600})
    with pytest.raises(Stopped):
        stages[0][1](ctx_for({}, stopped=True))


# --- upload-digest


def test_digest_bytes_text_binary_and_empty() -> None:
    assert upload_digest.digest_bytes(b"a\nb\n")["lines"] == 2
    assert upload_digest.digest_bytes(b"a\nb")["lines"] == 2
    assert upload_digest.digest_bytes(b"") == {
        "size": 0,
        "sha256": hashlib.sha256(b"").hexdigest(),
        "text": True,
        "lines": 0,
    }
    binary = upload_digest.digest_bytes(b"\xff\xfe\x00")
    assert binary["text"] is False and binary["lines"] is None and binary["size"] == 3


def test_upload_digest_reports_the_object() -> None:
    store = MemoryStore()
    data = "héllo\nworld\n".encode()
    store.put_object("uploads", "dir/a.txt", data, "text/plain")
    ctx = run_all("upload-digest", {"bucket": "uploads", "name": "dir/a.txt"}, store=store)
    report, _content_type = ctx.outputs.written["report.json"]  # type: ignore[attr-defined]
    assert report["sha256"] == hashlib.sha256(data).hexdigest()
    assert report["size"] == len(data) and report["lines"] == 2
    assert report["content_type"] == "text/plain"
    assert ctx.result["report"].endswith("report.json")
    json.dumps(ctx.state)  # the checkpoint state is plain JSON, and holds no bytes
    assert "data" not in ctx.state["digest"]


def test_upload_digest_missing_object_is_permanent() -> None:
    with pytest.raises(PermanentError, match="does not exist"):
        run_all("upload-digest", {"bucket": "uploads", "name": "gone"}, store=MemoryStore())


@pytest.mark.parametrize("payload", [{}, {"bucket": "b"}, {"bucket": "", "name": "x"}])
def test_upload_digest_rejects_payloads_without_an_object(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        upload_digest.PIPELINE.check_payload(payload)


def test_upload_digest_report_needs_the_digest_state() -> None:
    _, report = upload_digest.PIPELINE.stages_for({"bucket": "b", "name": "n"})[1]
    with pytest.raises(RuntimeError):
        report(ctx_for({"bucket": "b", "name": "n"}))


def test_pipeline_modules_register_their_pipelines(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from shared.pipelines import get_pipeline, load_modules

    (tmp_path / "mine_pipelines.py").write_text(
        "from shared.pipelines import Pipeline, register\n"
        "register(Pipeline('mine-x', stages=[('s', lambda ctx: None)]), replace=True)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    load_modules(["mine_pipelines"])
    assert get_pipeline("mine-x").name == "mine-x"


def test_a_pipeline_module_that_cannot_be_imported_is_named(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from shared.pipelines import PipelineModuleError, load_modules

    (tmp_path / "broken_pipelines.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PipelineModuleError, match=r"broken_pipelines.*RuntimeError: boom"):
        load_modules(["broken_pipelines"])
    with pytest.raises(PipelineModuleError, match="no_such_module"):
        load_modules(["no_such_module"])


def test_pipeline_modules_setting_is_validated() -> None:
    from shared.config import ConfigError, Settings

    assert Settings.from_env({"RECLAIM_PIPELINE_MODULES": " a.b , c "}).pipeline_modules == (
        "a.b",
        "c",
    )
    assert Settings.from_env({}).pipeline_modules == ()
    with pytest.raises(ConfigError, match="RECLAIM_PIPELINE_MODULES"):
        Settings.from_env({"RECLAIM_PIPELINE_MODULES": "a/b"})


def test_a_stage_reports_progress_through_its_context() -> None:
    from shared.pipelines.base import StageContext

    reports: list[dict[str, object]] = []
    ctx = StageContext(
        "j1",
        {},
        {},
        1,
        JobLogger("j1", "me", 1),
        outputs=None,
        store=None,  # type: ignore[arg-type]
        report=reports.append,
    )
    ctx.progress(3, 10, "frames")
    ctx.progress(4)
    assert reports == [
        {"done": 3, "total": 10, "message": "frames"},
        {"done": 4, "total": None, "message": None},
    ]
    for bad in ((-1, 10), (True, 10), (1, float("inf")), ("1", 2)):
        with pytest.raises(ValueError):
            ctx.progress(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("every", [-1.0, float("inf"), float("nan"), True, "3"])
def test_a_checkpoint_interval_must_be_a_finite_number_of_seconds(every: Any) -> None:
    with pytest.raises(ValueError, match="checkpoint_every_s"):
        Pipeline("p", stages=[("s", lambda ctx: None)], checkpoint_every_s=every)
    assert Pipeline("p", stages=[], checkpoint_every_s=3).checkpoint_every_s == 3
