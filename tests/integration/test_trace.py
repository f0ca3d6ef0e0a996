"""One trace across functions: a job submitted with a W3C traceparent, whose doorbell
is lost, is re-rung by the sweep and run by claim; every log line any function
wrote about it (the local cloud's log files stand in for Cloud Logging) carries
the same Cloud Logging trace, the job's own (not the request's, which Cloud Run sets on
every request), and submit's "job created" line names the request's trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from reclaim.local.cloud import LocalCloud
from shared.storage import job_object
from tests import polling
from tests.integration.cloud_support import job_bucket, lines_about

REQUEST_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{REQUEST_TRACE}-b7ad6b7169203331-01"


def test_a_jobs_lines_across_functions_carry_one_trace() -> None:
    with LocalCloud.for_tests(
        stale_seconds=3, sweep_interval_seconds=1, drop_publish_fraction=1.0
    ) as cloud:
        e = cloud.endpoints
        answer = requests.post(
            e["jobs"],
            json={"pipeline": "demo", "id": "traced-1", "payload": {"stages": 2, "sleep_s": 0.2}},
            headers={"traceparent": TRACEPARENT},
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        # the doorbell was dropped; let the sweep's re-ring through
        requests.post(
            e["emulator_admin"] + "/faults", json={"drop_publish_fraction": 0}, timeout=10
        )
        # watch the record as stored: a status read (GET /jobs/<id>) would apply the
        # watchdog itself and take the re-ring away from the sweep
        record = (
            f"{e['storage_emulator_host']}/storage/v1/b/{job_bucket(cloud, 'traced-1').name}/o/"
            f"{quote(job_object('traced-1'), safe='')}?alt=media"
        )
        job = polling.wait_for(
            "traced-1 done",
            lambda: (j := requests.get(record, timeout=30).json())["status"] == "done" and j,
            timeout=60,
            interval=0.3,
        )
        assert job["status"] == "done", job

        def all_written() -> dict[str, list[dict[str, Any]]] | None:
            # the claim logs "done" after the write we saw: wait for that line to land
            found = lines_about(Path(e["log_dir"]), "traced-1")
            claim = {x["message"] for x in found.get("claim", [])}
            return found if "done" in claim and {"submit", "sweep"} <= set(found) else None

        found = polling.wait_for("every function's lines about the job", all_written, timeout=30)
    assert {"submit", "sweep", "claim"} <= set(found), sorted(found)
    messages = {f: [x["message"] for x in lines] for f, lines in found.items()}
    assert "job created" in messages["submit"]
    assert "re-rang a queued job" in messages["sweep"]
    assert {"claimed", "done"} <= set(messages["claim"])
    own = job["traceparent"].split("-")[1]
    assert own != REQUEST_TRACE
    want = f"projects/{e['project']}/traces/{own}"
    traces = {x.get("logging.googleapis.com/trace") for lines in found.values() for x in lines}
    assert traces == {want}, traces
    spans = {x.get("logging.googleapis.com/spanId") for lines in found.values() for x in lines}
    assert len(spans) == 1 and "b7ad6b7169203331" not in spans
    created = [x for x in found["submit"] if x["message"] == "job created"]
    assert [x["submit_trace"] for x in created] == [REQUEST_TRACE]  # the link to the request
