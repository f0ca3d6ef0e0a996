"""`reclaim status` and `reclaim outputs` (issue 40): a status read that changes nothing
whatever the CLI's stale time, the error's kind and traceback, and a job's committed
outputs listed and fetched (never a lost attempt's)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared import job_queue, records
from tests.cli.cli_support import Cloud


def _job(cloud: Cloud) -> str:
    job_id = f"cli-rt-{uuid.uuid4().hex[:10]}"
    cloud.store.add_pending(job_id)
    cloud.store.create(records.new_record(job_id, "demo", {}, datetime.now(UTC)))
    return job_id


def test_status_of_a_quiet_running_job_changes_nothing(cloud: Cloud) -> None:
    """The CLI's stale time (120 s here, the default) is not the deployment's: its read
    must not requeue a job the deployment still counts as running."""
    job_id = _job(cloud)
    stored = cloud.store.read(job_id)
    long_ago = datetime.now(UTC) - timedelta(seconds=600)
    claimed = {**stored.record, **job_queue.claim_fields(stored.record, "busy-owner", long_ago)}
    gen = cloud.store.update(claimed, stored.generation).generation
    result = cloud.ok("status", job_id)
    assert "has not moved for" in result.out and "this read changes nothing" in result.out
    after = cloud.store.read(job_id)
    assert after.generation == gen and after.record["status"] == "running"
    assert "watchdog" not in json.loads(cloud.ok("--json", "status", job_id).out)


def test_status_shows_the_kind_and_the_traceback(cloud: Cloud) -> None:
    job_id = _job(cloud)
    job = cloud.drive(job_id, "running")
    stored = cloud.store.read(job_id)
    error = job_queue.error_info(
        KeyError("missing_key"),
        stage="fetch",
        attempt=1,
        now=datetime.now(UTC),
        retryable=False,
        out_of_attempts=True,
        traceback='Traceback (most recent call last):\n  File "/app/stages.py", line 12, '
        "in fetch\n    return data['missing_key']\nKeyError: 'missing_key'\n",
        where={"file": "/app/stages.py", "line": 12, "function": "fetch"},
    )
    failed = {**job, **job_queue.fail_fields(job, datetime.now(UTC), error)}
    cloud.store.update(failed, stored.generation)
    out = cloud.ok("status", job_id).out
    assert "KeyError: 'missing_key' (out of attempts)" in out
    assert "raised at /app/stages.py:12" in out
    assert '  File "/app/stages.py", line 12, in fetch' in out


def test_outputs_lists_the_committed_ones_and_gets_one(cloud: Cloud, tmp_path: Path) -> None:
    job_id = _job(cloud)
    job = cloud.drive(job_id, "running")
    store = cloud.store
    kept = store.write_output(job_id, 1, "report.csv", b"a,b\n1,2\n", "text/csv")
    store.write_output(
        job_id, 1, "lost.txt", b"a lost attempt's", "text/plain"
    )  # no record names it
    stored = store.read(job_id)
    done = {**job, **job_queue.done_fields(job, datetime.now(UTC), {}, [kept])}
    store.update(done, stored.generation)
    listed = json.loads(cloud.ok("--json", "outputs", job_id).out)["outputs"]
    assert [(o["name"], o["attempt"], o["size"]) for o in listed] == [("report.csv", 1, 8)]
    target = tmp_path / "got.csv"
    cloud.ok("outputs", job_id, "--get", "report.csv", "-o", str(target))
    assert target.read_bytes() == b"a,b\n1,2\n"
    assert cloud.ok("outputs", job_id, "--get", "report.csv", "-o", "-").out == "a,b\n1,2\n"
    refused = cloud.run("outputs", job_id, "--get", "lost.txt", "-o", str(tmp_path / "x"))
    assert refused.code == 2 and "no committed output 'lost.txt'" in refused.err
    assert not (tmp_path / "x").exists()
