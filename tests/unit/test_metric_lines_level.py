"""A RECLAIM_LOG_LEVEL above INFO keeps the metric lines (the data of the log-based
metrics, the dashboard and the alerts) and drops only the chatter."""

from __future__ import annotations

import json

import pytest

from shared import logs, metrics


@pytest.mark.parametrize("level", ["WARNING", "ERROR"])
def test_metric_lines_are_written_whatever_the_level(
    level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure(level, project="p")
    try:
        log = logs.get_logger("shared.test")
        capsys.readouterr()
        log.info("queue", **metrics.Gauge("demo").fields())
        log.info("finished", **metrics.finished({"pipeline": "demo"}, metrics.Ending.DONE))
        log.info("an ordinary line")
        log.warning("a warning")
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    finally:
        logs.configure("INFO")
    assert [x.get("metric") for x in lines if "metric" in x] == ["queue", "finished"]
    assert "an ordinary line" not in {x["message"] for x in lines}
    assert ("a warning" in {x["message"] for x in lines}) is (level == "WARNING")
    for line in lines:  # the caller's line, on both paths
        source = line["logging.googleapis.com/sourceLocation"]
        assert source["file"].endswith("test_metric_lines_level.py"), line
