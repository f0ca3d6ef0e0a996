"""shared.metrics: the gauges the sweep logs, the lines the owner logs, and reading them
back the way the log-based metrics count them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared import job_queue, metrics, records, sweeper
from shared.features.table import context
from shared.jobs import JobRecord
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, settings

NOW = datetime(2026, 7, 26, 12, 0, tzinfo=UTC)


def record(job_id: str, pipeline: str = "demo", age_s: float = 60.0, **fields: object) -> JobRecord:
    made = records.new_record(job_id, pipeline, {}, NOW - timedelta(seconds=age_s))
    return {**made, **fields}  # type: ignore[typeddict-item]


def test_gauges_count_queued_and_running_and_age_the_oldest_due_job() -> None:
    jobs = [
        record("a", age_s=30),
        record("b", age_s=90),
        record("c", age_s=500, not_before=job_queue.format_time(NOW + timedelta(seconds=5))),
        {**record("d", age_s=10), **job_queue.claim_fields(record("d"), "o", NOW)},
        record("e", "other", age_s=5),
        {**record("f", age_s=999), "status": "done"},  # not pending: ignored
    ]
    gauges = metrics.queue_gauges(jobs, NOW, pipelines=["demo", "idle"])
    assert gauges["demo"] == metrics.Gauge("demo", 3, 1, 90.0, "b")  # c backs off: not due
    assert gauges["other"] == metrics.Gauge("other", 1, 0, 5.0, "e")
    assert gauges["idle"] == metrics.Gauge("idle")  # a known pipeline reports zeros


def test_a_re_rung_doorbell_does_not_make_a_waiting_job_look_young() -> None:
    job = record("a", age_s=300)
    refreshed = {**job, **job_queue.requeue_fields(job, NOW - timedelta(seconds=10))}
    assert job_queue.due_age_seconds(refreshed, NOW) == pytest.approx(300)
    claimed = {**job, **job_queue.claim_fields(job, "o", NOW - timedelta(seconds=100))}
    error = {"stage": "s", "attempt": 1, "type": "E", "message": "m", "retryable": True, "at": ""}
    requeued = {
        **claimed,
        **job_queue.requeue_fields(claimed, NOW - timedelta(seconds=40), error=error),  # type: ignore[arg-type]
    }
    assert job_queue.due_age_seconds(requeued, NOW) == pytest.approx(40)  # a new entry


def test_claimed_carries_the_wait_of_a_first_attempt_only() -> None:
    job = record("a", age_s=12)
    assert metrics.claimed(job, NOW, 1)["wait_s"] == 12
    assert "wait_s" not in metrics.claimed(job, NOW, 2)
    done = metrics.finished(job, metrics.Ending.DONE, run_s=1.23456)
    assert done == {"metric": "finished", "pipeline": "demo", "outcome": "done", "run_s": 1.235}


def test_markers_left_unread_count_as_queued_in_their_pipeline() -> None:
    gauges = metrics.queue_gauges(
        [record("a", age_s=30)], NOW, pipelines=["demo"], unread=["demo", "demo", "other", None]
    )
    assert gauges["demo"] == metrics.Gauge("demo", 3, 0, 30.0, "a", unread=2)
    assert gauges["other"] == metrics.Gauge("other", 1, unread=1)  # no age: never read
    assert gauges["unknown"] == metrics.Gauge("unknown", 1, unread=1)  # a marker from before
    assert gauges["demo"].fields()["unread"] == 2


def test_the_sweep_logs_one_gauge_line_per_pipeline_and_one_run_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    for job_id, age in (("a", 30), ("b", 90)):
        store.add_pending(job_id)
        store.create(record(job_id, age_s=age))
    capsys.readouterr()
    sweeper.run_once(context(store, Bell(), settings(stale_seconds=600)), NOW)
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    gauges = {e["pipeline"]: e for e in entries if e.get("metric") == "queue"}
    assert gauges["demo"]["queued"] == 2 and gauges["demo"]["oldest_due_age_s"] == 90
    assert gauges["demo"]["oldest_job_id"] == "b"
    assert gauges["upload-digest"]["queued"] == 0  # every registered pipeline reports
    assert [e["message"] for e in entries if e.get("metric") == "sweep"] == ["sweep finished"]


def line(event: str, at: datetime, **fields: object) -> str:
    return json.dumps({"time": at.isoformat(), "metric": event, **fields})


def test_aggregate_counts_and_distributes_per_step_as_the_log_metric_would(
    tmp_path: Path,
) -> None:
    start = NOW - timedelta(minutes=3)
    log = tmp_path / "claim-0.log"
    log.write_text(
        "\n".join(
            [
                "[gunicorn] a line that is not JSON",
                line(
                    "finished",
                    start + timedelta(seconds=5),
                    pipeline="demo",
                    outcome="done",
                    run_s=2,
                ),
                line(
                    "finished",
                    start + timedelta(seconds=65),
                    pipeline="demo",
                    outcome="done",
                    run_s=4,
                ),
                line(
                    "finished",
                    start + timedelta(seconds=70),
                    pipeline="x",
                    outcome="failed",
                    run_s=6,
                ),
                line("finished", start + timedelta(seconds=75), pipeline="x", outcome="failed"),
                line("claimed", start + timedelta(seconds=80), pipeline="x", wait_s=3),
                line("finished", start - timedelta(seconds=1), pipeline="demo", outcome="done"),
                '{"metric": "finished", "time": "torn',
            ]
        )
    )
    entries = list(metrics.read_log_lines([log, tmp_path / "missing.log"]))
    assert len(entries) == 6
    jobs = metrics.METRICS_BY_NAME["jobs_finished"]
    done = metrics.aggregate(
        entries,
        jobs,
        start=start,
        step_s=60,
        size=3,
        group_by="pipeline",
        where={"outcome": "done"},
    )
    assert done.count == {"demo": [1, 1, 0]}
    run = metrics.aggregate(
        entries, metrics.METRICS_BY_NAME["job_run"], start=start, step_s=60, size=3
    )
    assert run.count["all"] == [1, 2, 0]  # the line without run_s is not a sample
    assert run.mean("all") == [2.0, 5.0, None] and run.peak["all"][1] == 6
    assert metrics.totals(entries, start)["jobs_finished"] == {
        "pipeline=demo,outcome=done": 2,
        "pipeline=x,outcome=failed": 2,
    }


def test_every_metric_reads_an_event_and_a_distribution_names_its_field() -> None:
    names = [m.name for m in metrics.LOG_METRICS]
    assert len(names) == len(set(names))
    for metric in metrics.LOG_METRICS:
        assert metric.event in metrics.Event
        assert (metric.kind == "distribution") == (metric.value is not None)
