"""A stage's exception as the record keeps it (shared.claim.stage_errors): the stage's own
frames first, the runner's left out, trimmed to TRACEBACK_LIMIT with library frames folded
first; `where` names the pipeline's file and line; the runner logs it with that source
location and keeps it in the error, with its kind."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shared import job_queue
from shared.claim import stage_errors
from shared.outcome import OutcomeKind
from shared.pipelines import PermanentError, StageContext
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import handle, pipeline, settings, submit

USER_CODE = textwrap.dedent(
    """
    import json


    def helper(data):
        return data["missing_key"]


    def stage(ctx):
        helper({})


    def deep(n):
        if n == 0:
            raise ValueError("at the bottom " + "x" * 300)
        return deep(n - 1)


    def stage_deep(ctx):
        deep(400)


    def stage_in_library(ctx):
        json.loads("{not json")
    """
)


@pytest.fixture
def user_module(tmp_path: Path) -> ModuleType:
    """The pipeline's code in a file of its own, outside reclaim (as a user's is)."""
    path = tmp_path / "user_stages.py"
    path.write_text(USER_CODE)
    module = ModuleType("user_stages")
    module.__file__ = str(path)
    exec(compile(USER_CODE, str(path), "exec"), module.__dict__)
    return module


def _line_of(text: str, module: ModuleType) -> int:
    source = Path(str(module.__file__)).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


def test_the_record_names_the_users_file_and_line(user_module: ModuleType) -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("fetch", user_module.stage)]))
    assert handle(job_id, store, settings(max_attempts=1)).kind == OutcomeKind.FAILED
    error = store.read(job_id).record["error"]
    assert error["type"] == "KeyError" and error["kind"] == "out of attempts"
    where = error["where"]
    assert where["file"] == user_module.__file__
    assert where["line"] == _line_of('return data["missing_key"]', user_module)
    assert where["function"] == "helper"
    trace = error["traceback"]
    assert trace.startswith("Traceback (most recent call last):\n")
    first_frame = trace.splitlines()[1]
    assert user_module.__file__ in first_frame and "in stage" in first_frame  # not the runner
    assert "runner.py" not in trace
    assert trace.rstrip().endswith("KeyError: 'missing_key'")


def test_a_permanent_error_is_permanent_and_a_retryable_one_retryable(
    user_module: ModuleType,
) -> None:
    def permanent(ctx: StageContext) -> None:
        raise PermanentError("no retry can help")

    store = MemoryStore()
    job_id = submit(store, pipeline([("p", permanent)]))
    assert handle(job_id, store, settings(max_attempts=3)).kind == OutcomeKind.FAILED
    assert store.read(job_id).record["error"]["kind"] == "permanent"
    job_id = submit(store, pipeline([("fetch", user_module.stage)]))
    assert handle(job_id, store, settings(max_attempts=3)).kind == OutcomeKind.REQUEUED
    error = store.read(job_id).record["error"]
    assert error["kind"] == "retryable" and error["retryable"] is True
    assert error["where"]["file"] == user_module.__file__


def test_a_deep_traceback_is_trimmed_keeping_the_stage_and_the_raise(
    user_module: ModuleType,
) -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("deep", user_module.stage_deep)]))
    assert handle(job_id, store, settings(max_attempts=1)).kind == OutcomeKind.FAILED
    error = store.read(job_id).record["error"]
    assert len(error["traceback"]) <= stage_errors.TRACEBACK_LIMIT
    lines = error["traceback"].splitlines()
    assert "in stage_deep" in lines[1]  # the outermost frame: the stage
    assert "more frame(s) left out" in error["traceback"]
    assert lines[-1].startswith("ValueError: at the bottom")  # the raise, whole
    assert error["where"]["line"] == _line_of('raise ValueError("at the bottom', user_module)


def test_library_frames_are_not_where_the_user_looks(user_module: ModuleType) -> None:
    """json raised, but the place named is the user's line that called it."""
    try:
        user_module.stage_in_library(None)
    except json.JSONDecodeError as exc:
        trace = stage_errors.describe(exc)
    assert trace.where is not None
    assert trace.where["file"] == user_module.__file__
    assert trace.where["line"] == _line_of('json.loads("{not json")', user_module)
    assert "json/decoder.py" in trace.text  # the library frames are kept while they fit


def test_a_chained_exception_adds_its_cause_on_one_line() -> None:
    def stage(_ctx: Any) -> None:
        try:
            {}["k"]
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc

    try:
        stage(None)
    except RuntimeError as exc:
        trace = stage_errors.describe(exc)
    assert trace.text.rstrip().endswith("(raised from KeyError: 'k')")


def test_the_log_line_points_at_the_users_code(
    user_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    store = MemoryStore()
    job_id = submit(store, pipeline([("fetch", user_module.stage)]))
    capsys.readouterr()
    handle(job_id, store, settings(max_attempts=1))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    (raised,) = [e for e in lines if e.get("message") == "the stage raised"]
    location = raised["logging.googleapis.com/sourceLocation"]
    assert location["file"] == user_module.__file__
    assert location["line"] == _line_of('return data["missing_key"]', user_module)
    assert raised["severity"] == "ERROR" and "KeyError" in raised["stack_trace"]
    assert raised["job_id"] == job_id and raised["stage"] == "fetch"


def test_error_kinds_of_records_from_before_kind_existed() -> None:
    assert job_queue.error_kind({"retryable": True}) == "retryable"
    assert job_queue.error_kind({"retryable": False}) == "permanent"
    assert job_queue.error_kind({"retryable": False, "kind": "out of attempts"}) == (
        "out of attempts"
    )
    assert job_queue.error_kind({"kind": "nonsense", "retryable": True}) == "retryable"
