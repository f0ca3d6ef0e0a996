"""The CLI's text rendering (pure)."""

from __future__ import annotations

import json

import pytest

from reclaim.cli import render as r


def test_duration_formats() -> None:
    assert r.format_duration(None) == "?"
    assert r.format_duration(-1) == "?"
    assert r.format_duration(float("nan")) == "?"
    assert r.format_duration(0) == "0:00"
    assert r.format_duration(65.4) == "1:05"
    assert r.format_duration(3725) == "1:02:05"


def test_counts_include_every_known_status() -> None:
    counts = r.count_statuses(["done", "done", "failed", "weird"])
    assert counts == {
        "queued": 0,
        "running": 0,
        "done": 2,
        "failed": 1,
        "cancelled": 0,
        "waiting": 0,
        "weird": 1,
    }
    assert r.terminal_count(counts) == 3


def test_rate_is_unknown_until_something_finished_while_watching() -> None:
    assert r.rate_and_eta(10.0, 0, 5) == (None, None)
    assert r.rate_and_eta(0.0, 3, 5) == (None, None)
    assert r.rate_and_eta(10.0, 0, 0) == (None, 0.0)
    rate, eta = r.rate_and_eta(10.0, 5, 20)
    assert rate == 0.5
    assert eta == 40.0


def test_progress_bar_fills_by_fraction() -> None:
    assert r.progress_bar(0, 4, width=8) == "[........]"
    assert r.progress_bar(2, 4, width=8) == "[####....]"
    assert r.progress_bar(4, 4, width=8) == "[########]"
    assert r.progress_bar(0, 0, width=4) == "[    ]"


def test_progress_line_shows_counts_rate_and_eta() -> None:
    counts = r.count_statuses(["done"] * 3 + ["running", "queued", "failed"])
    line = r.progress_line(counts, 0.5, 90.0, width=6)
    assert line.startswith("[####..] 4/6 | ")
    assert "queued 1 running 1 done 3 failed 1" in line
    assert "cancelled" not in line
    assert "30.0 jobs/min" in line
    assert line.endswith("ETA 1:30")
    assert "rate ?" in r.progress_line(counts, None, None)


def test_table_aligns_and_marks_missing_cells() -> None:
    text = r.table(
        [{"id": "a", "status": "done"}, {"id": "long-id", "status": None}], ("id", "status")
    )
    assert text.splitlines() == ["ID       STATUS", "a        done", "long-id  -"]


def _record(**over: object) -> dict:
    base = {
        "id": "job-1",
        "pipeline": "demo",
        "status": "failed",
        "stage": "render",
        "attempts": 3,
        "max_attempts": None,
        "batch_id": "b1",
        "payload": {"n": 1},
        "created_at": "2026-07-26T10:00:00+00:00",
        "updated_at": "2026-07-26T10:05:00+00:00",
        "error": {
            "stage": "render",
            "attempt": 3,
            "type": "ValueError",
            "message": "bad piece",
            "retryable": False,
            "at": "2026-07-26T10:05:00+00:00",
        },
        "history": [
            {"at": "2026-07-26T10:00:00+00:00", "event": "submitted"},
            {"at": "2026-07-26T10:01:00+00:00", "event": "claimed", "owner": "i-1", "attempt": 1},
        ],
    }
    base.update(over)
    return base


def test_job_text_has_summary_error_and_history() -> None:
    text = r.job_text(_record(), default_max_attempts=3)
    lines = [line.split() for line in text.splitlines()]
    assert ["status", "failed"] in lines
    assert ["attempts", "3/3"] in lines
    assert "ValueError: bad piece (permanent) [stage render, attempt 3]" in text
    assert "history (2, oldest first):" in text
    assert "2026-07-26T10:01:00+00:00  claimed  owner=i-1 attempt=1" in text
    assert not any(line and line[0] == "owner" for line in lines)  # no owner: not shown


def test_history_shows_an_error_as_type_and_message() -> None:
    entry = {"at": "t", "event": "failed", "attempt": 1, "error": _record()["error"]}
    assert r.history_line(entry) == 't  failed  attempt=1 error="ValueError: bad piece"'


def test_job_text_omits_empty_fields() -> None:
    text = r.job_text(_record(error=None, history=[], batch_id=None, status="queued"))
    assert "last error" not in text
    assert "history" not in text
    assert "batch" not in text


def test_job_row_and_json() -> None:
    row = r.job_row(_record(max_attempts=5), default_max_attempts=3)
    assert row["attempts"] == "3/5"
    assert r.job_row(_record(), default_max_attempts=3)["attempts"] == "3/3"
    assert row["updated"] == "2026-07-26T10:05:00+00:00"
    assert "2026-07-26 10:05:00" in r.table([row], r.LIST_COLUMNS)
    assert r.short_time("job-1T2026-07-26") == "job-1T2026-07-26"
    assert row["error"] == "ValueError"
    assert json.loads(r.to_json(row))["id"] == "job-1"


def test_counts_text() -> None:
    assert r.counts_text({}) == "(nothing)"
    assert r.counts_text({"requeued": 2, "failed": 0}) == "requeued  2\nfailed    0"


def test_progress_shows_in_a_job_and_in_the_watch_line() -> None:
    progress = {"done": 3, "total": 10, "message": "frames"}
    lines = [line.split() for line in r.job_text(_record(progress=progress)).splitlines()]
    assert ["progress", "3/10", "(30%)", "frames"] in lines
    assert "progress" not in r.job_text(_record())
    members = [
        {"status": "running", "progress": progress},
        {"status": "running", "progress": {"done": 10, "total": 10, "message": None}},
        {"status": "running"},  # reported nothing: not counted
        {"status": "done", "progress": {"done": 0, "total": 10, "message": None}},
    ]
    assert r.running_progress(members) == pytest.approx(0.65)
    assert r.running_progress([{"status": "queued"}]) is None
    line = r.progress_line({"running": 2}, None, None, running=0.65)
    assert "running 2 (65% along)" in line


def test_job_text_says_paused_and_an_earlier_attempts_error_apart() -> None:
    earlier = {**_record()["error"], "attempt": 1, "retryable": True, "kind": "retryable"}
    text = r.job_text(
        _record(status="queued", error=None, previous_error=earlier, paused=True, attempts=1)
    )
    assert "its pipeline is paused" in text
    assert "error of an earlier attempt:" in text and "(retryable)" in text
    assert "\nerror:" not in text
    out = r.job_text(_record(error={**_record()["error"], "kind": "out of attempts"}))
    assert "ValueError: bad piece (out of attempts)" in out
