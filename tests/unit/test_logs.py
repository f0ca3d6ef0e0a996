"""shared.logs: one JSON line per record, in Cloud Logging's structured format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import logs


def lines(capsys: pytest.CaptureFixture[str], err: bool = False) -> list[dict[str, Any]]:
    out = capsys.readouterr()
    return [json.loads(line) for line in (out.err if err else out.out).splitlines()]


def test_an_entry_carries_severity_message_time_and_its_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.get_logger("shared.sweeper").warning("sweep slow", examined=3, skipped=None)
    (entry,) = lines(capsys)
    assert (entry["severity"], entry["message"], entry["examined"]) == ("WARNING", "sweep slow", 3)
    assert "skipped" not in entry  # None fields are left out
    assert entry["time"].endswith("+00:00") and entry["logger"] == "reclaim.sweeper"
    assert entry["logging.googleapis.com/sourceLocation"]["line"] > 0


def test_a_job_logger_carries_the_job_and_its_stage(capsys: pytest.CaptureFixture[str]) -> None:
    jlog = logs.JobLogger("j1", "host-1.2", 3)
    jlog.info("claimed")
    jlog.stage = "render"
    jlog.error("failed", error_type="ValueError")
    first, second = lines(capsys)
    assert (first["job_id"], first["owner"], first["attempt"]) == ("j1", "host-1.2", 3)
    assert "stage" not in first and second["stage"] == "render"
    assert second["error_type"] == "ValueError" and jlog.stage == "render"


def test_an_exception_becomes_a_stack_trace(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        logs.get_logger("x").exception("it broke", job_id="j1")
    (entry,) = lines(capsys)
    assert entry["severity"] == "ERROR" and "ZeroDivisionError: boom" in entry["stack_trace"]


def test_the_level_and_the_stream_are_configurable(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("WARNING", stderr=True)
    log = logs.get_logger("x")
    log.info("hidden")
    log.warning("shown")
    assert [e["message"] for e in lines(capsys, err=True)] == ["shown"]
    logs.configure("DEBUG")
    log.debug("now shown")
    assert [e["message"] for e in lines(capsys)] == ["now shown"]
