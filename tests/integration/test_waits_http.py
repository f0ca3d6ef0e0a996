"""Waits on the local cloud, over HTTP and real fake-gcs-server (docs/waiting.md): a parked
job leaves its claim service at zero instances (the local Cloud Run's own state) and
resumes on a completion with its data; a completion before the park resumes it once; 100
concurrent duplicate completions give one resume; a timeout fires in the one sweep run
after it (the test drives the sweep) and the stage sees timed_out; an uploaded object that
carries the token completes the wait; a SIGKILL right after the release's write is repaired
by the sweep; a sleep resumes through the time index; a fan-out of 30 children joins once."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from tests import polling
from tests.integration.cloud_support import lines_about, record_buckets

VICTIM = f"victim-{uuid.uuid4().hex[:8]}"

wait_for = functools.partial(polling.wait_for, timeout=120, interval=0.2)


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=3.0,
        sweep_interval_seconds=0,  # the tests drive the sweep, as Cloud Scheduler would
        shutdown_grace_seconds=2.0,
        idle_timeout_seconds=2.0,  # an idle claim instance goes soon: scale to zero
        function_env={
            "RECLAIM_PIPELINE_MODULES": "tests.integration.wait_pipelines",
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
            "RECLAIM_FAULT_KILL": f"after-release:{VICTIM}",  # shared.faults, test-only
        },
    ) as c:
        yield c


def post_job(cloud: LocalCloud, body: dict[str, Any]) -> str:
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=60)
    assert resp.status_code in (200, 202), resp.text
    return str(resp.json()["id"])


def view(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    resp = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def parked(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    return dict(wait_for(f"{job_id} parked", lambda: (v := view(cloud, job_id)).get("park") and v))


def ended(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    def end() -> dict[str, Any] | None:
        v = view(cloud, job_id)
        return v if v["status"] in ("done", "failed", "cancelled") else None

    return dict(wait_for(f"{job_id} ended", end))


def sweep(cloud: LocalCloud) -> dict[str, Any]:
    resp = requests.post(cloud.endpoints["sweep"], json={"source": "test"}, timeout=120)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def claim_instances(cloud: LocalCloud) -> int:
    stats = requests.get(f"{cloud.endpoints['cloudrun_admin']}/services/claim", timeout=30).json()
    return int(stats["instances"]["current"])


def events(record: dict[str, Any]) -> list[str]:
    return [e["event"] for e in record["history"]]


# ------------------------------------------------------------------ waitpoints


def test_a_parked_job_holds_no_claim_instance_and_resumes_with_the_data(cloud: LocalCloud) -> None:
    job_id = post_job(cloud, {"pipeline": "approval"})
    shown = parked(cloud, job_id)
    assert shown["status"] == "waiting" and shown["owner"] is None
    assert shown["park"]["kind"] == "token" and "waitpoint" in shown["waiting_for"]
    url = shown["park"]["url"]
    assert url.startswith(cloud.endpoints["waitpoints"] + "/waitpoints/")
    # by the platform's state: the claim service scaled to zero while the job waits
    wait_for("claim at zero instances", lambda: claim_instances(cloud) == 0)
    assert view(cloud, job_id)["status"] == "waiting"
    resp = requests.post(url, json={"frames": 240}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["state"] == "resumed"
    final = ended(cloud, job_id)
    assert final["status"] == "done"
    assert final["result"]["waited"]["data"] == {"frames": 240}
    assert final["result"]["waited"]["status"] == "completed"
    assert final["result"]["before"] == "asked"
    assert final["attempts"] == 2 and events(final).count("resumed") == 1
    again = requests.post(url, json={"frames": 1}, timeout=30)
    assert again.status_code == 409 and again.json()["error"] == "already completed"


def test_a_completion_before_the_park_resumes_the_job_once(cloud: LocalCloud) -> None:
    job_id = post_job(cloud, {"pipeline": "approval", "payload": {"early": True}})
    final = ended(cloud, job_id)
    assert final["status"] == "done"
    assert final["result"]["waited"]["data"] == {"early": True}
    assert events(final).count("resumed") == 1 and events(final).count("claimed") == 2


def test_a_hundred_concurrent_duplicate_completions_give_one_resume(cloud: LocalCloud) -> None:
    job_id = post_job(cloud, {"pipeline": "approval"})
    url = parked(cloud, job_id)["park"]["url"]
    codes: list[int] = []
    barrier = threading.Barrier(100)

    def complete(i: int) -> None:
        barrier.wait()
        for _ in range(30):  # the platform's 429 (every instance busy): a caller retries
            code = requests.post(url, json={"n": i}, timeout=120).status_code
            if code != 429:
                break
            time.sleep(0.5)
        codes.append(code)

    threads = [threading.Thread(target=complete, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(codes)) == [200, 409] and codes.count(200) == 1, codes
    final = ended(cloud, job_id)
    assert events(final).count("resumed") == 1 and events(final).count("claimed") == 2
    assert final["result"]["waited"]["data"]["n"] in range(100)


def test_a_timeout_fires_in_the_sweep_after_it_and_the_stage_sees_timed_out(
    cloud: LocalCloud,
) -> None:
    job_id = post_job(cloud, {"pipeline": "approval", "payload": {"timeout": 8}})
    until = datetime.fromisoformat(parked(cloud, job_id)["park"]["until"])
    swept = sweep(cloud)
    if swept["elapsed"] < (until - datetime.now(UTC)).total_seconds():  # ran before it
        assert view(cloud, job_id)["status"] == "waiting"  # not due: the sweep leaves it
    wait_for("the timeout passed", lambda: datetime.now(UTC) > until)
    swept = sweep(cloud)  # one sweep run after the deadline releases it
    assert swept["released"] + swept["resumed"] == 1, swept
    assert view(cloud, job_id)["status"] in ("queued", "running", "done")
    final = ended(cloud, job_id)
    assert final["result"]["waited"]["status"] == "timed_out"
    late = requests.post(parked_url(final), json={}, timeout=30)
    assert late.status_code == 409


def parked_url(record: dict[str, Any]) -> str:
    return str(record["result"]["waited"]["url"])


def test_a_forged_token_is_a_404_and_changes_nothing(cloud: LocalCloud) -> None:
    job_id = post_job(cloud, {"pipeline": "approval"})
    url = parked(cloud, job_id)["park"]["url"]
    head, tag = url.rsplit(".", 1)
    forged = f"{head}.{'A' if tag[0] != 'A' else 'B'}{tag[1:]}"
    resp = requests.post(forged, json={"x": 1}, timeout=30)
    assert resp.status_code == 404 and resp.json()["error"] == "not found", resp.text
    assert requests.post(url, data="x", timeout=30).status_code == 415
    assert view(cloud, job_id)["status"] == "waiting"
    admin = f"{cloud.endpoints['admin']}/jobs/{job_id}/complete"
    resp = requests.post(admin, json={"data": {"approved": True}}, timeout=30)
    assert resp.status_code == 200, resp.text
    assert ended(cloud, job_id)["result"]["waited"]["data"] == {"approved": True}


def test_an_uploaded_object_carrying_the_token_completes_the_wait(cloud: LocalCloud) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    job_id = post_job(cloud, {"pipeline": "approval"})
    token = parked(cloud, job_id)["park"]["token"]
    client = storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )
    blob = client.bucket(cloud.endpoints["uploads_bucket"]).blob(f"proofs/{job_id}.pdf")
    blob.metadata = {"reclaim-waitpoint": token}
    blob.upload_from_string(b"%PDF-1.7 proof", content_type="application/pdf")
    final = ended(cloud, job_id)
    waited = final["result"]["waited"]
    assert waited["status"] == "completed" and waited["data"]["name"] == blob.name
    assert waited["by"].startswith("upload gs://")


def test_a_kill_right_after_the_release_is_repaired_by_the_sweep(cloud: LocalCloud) -> None:
    post_job(cloud, {"id": VICTIM, "pipeline": "approval"})
    url = parked(cloud, VICTIM)["park"]["url"]
    with pytest.raises(requests.RequestException):  # the waitpoints instance is SIGKILLed
        resp = requests.post(url, json={"after": "kill"}, timeout=60)
        raise requests.RequestException(f"answered {resp.status_code}")
    record = json.loads(_record_bytes(cloud, VICTIM))
    assert record["status"] == "queued"  # released, never rung: the process died first
    assert events(record).count("resumed") == 1

    def repaired() -> bool:
        sweep(cloud)
        return view(cloud, VICTIM)["status"] == "done"

    wait_for("the sweep's repair", repaired, timeout=60, interval=1.0)
    final = view(cloud, VICTIM)
    assert final["result"]["waited"]["data"] == {"after": "kill"}
    assert events(final).count("resumed") == 1 and events(final).count("claimed") == 2


def _record_bytes(cloud: LocalCloud, job_id: str) -> bytes:
    from shared.storage import job_object

    for bucket in record_buckets(cloud):
        blob = bucket.blob(job_object(job_id))
        if blob.exists():
            return bytes(blob.download_as_bytes())
    raise AssertionError(f"no record of {job_id}")


# ------------------------------------------------------------------ sleep and fan-out


def test_a_sleep_resumes_at_the_next_stage_through_the_time_index(cloud: LocalCloud) -> None:
    job_id = post_job(cloud, {"pipeline": "nap-then", "payload": {"seconds": 2}})
    until = datetime.fromisoformat(parked(cloud, job_id)["park"]["until"])
    assert view(cloud, job_id)["waiting_for"].startswith("sleeping until")
    wait_for("the sleep's end", lambda: datetime.now(UTC) > until)
    swept = sweep(cloud)
    assert swept["released"] + swept["resumed"] == 1, swept
    final = ended(cloud, job_id)
    assert final["result"] == {"waited": final["result"]["waited"], "before": "napped"}
    assert final["result"]["waited"]["status"] == "slept"
    assert final["max_attempts"] == 4 and final["attempts"] == 2  # no attempt spent


def test_a_fan_out_joins_once_and_shows_its_links(cloud: LocalCloud) -> None:
    parent = post_job(cloud, {"pipeline": "fan", "payload": {"n": 30}, "tags": ["frames"]})
    shown = parked(cloud, parent)
    assert shown["park"]["kind"] == "children" and shown["park"]["total"] == 30
    assert shown["children_url"] == f"/batches/{shown['park']['fanout']}"
    child = view(cloud, f"{parent}-s0-00007")
    assert child["parent_job"]["id"] == parent and child["parent_job"]["index"] == 7
    final = ended(cloud, parent)
    assert final["status"] == "done", final.get("error")
    assert final["result"]["children"] == 30 and final["result"]["statuses"] == ["done"]
    assert final["result"]["squares"] == sum(i * i for i in range(30))
    assert final["result"]["indexes"] is True
    assert events(final).count("resumed") == 1
    joins = [
        x
        for lines in lines_about(cloud.config.log_dir, parent).values()
        for x in lines
        if x.get("message") == "join ran"
    ]
    assert len(joins) == 1
    batch = requests.get(f"{cloud.endpoints['submit']}{shown['children_url']}", timeout=30).json()
    assert batch["total"] == 30 and batch["counts"] == {"done": 30}


# ------------------------------------------------------------------ the CLI and the client


def test_the_cli_shows_a_parked_job_and_completes_it_once(cloud: LocalCloud) -> None:
    import os
    import subprocess
    import sys

    from tests.cli.cli_support import ROOT

    job_id = post_job(cloud, {"pipeline": "approval"})
    parked(cloud, job_id)
    env = {**os.environ, **cloud.client_env()}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reclaim.cli", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    shown = cli("status", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "waiting for" in shown.stdout and "complete at" in shown.stdout
    listed = cli("list", "--status", "waiting", "--limit", "500")
    assert listed.returncode == 0 and "parked: waitpoint" in listed.stdout, listed.stdout
    done = cli("complete", job_id, "--approve", "--by", "ann")
    assert done.returncode == 0, done.stderr
    again = cli("complete", job_id, "--reject")
    assert again.returncode == 2 and "not waiting" in (again.stderr + again.stdout)
    final = ended(cloud, job_id)
    assert final["result"]["waited"]["data"] == {"approved": True}
    assert final["result"]["waited"]["by"] == "ann"


def test_the_client_completes_by_url_and_by_job(cloud: LocalCloud) -> None:
    from reclaim_client import Client, NotAllowed

    client = Client(cloud.endpoints["submit"], admin_url=cloud.endpoints["admin"])
    first = post_job(cloud, {"pipeline": "approval"})
    parked(cloud, first)
    job = client.get(first)
    assert job.waitpoint_url and job.waiting_for and job.status == "waiting"
    assert client.complete(job.waitpoint_url, {"via": "url"})["state"] == "resumed"
    with pytest.raises(NotAllowed):
        client.complete(job.waitpoint_url, {"via": "again"})
    second = post_job(cloud, {"pipeline": "approval"})
    parked(cloud, second)
    assert client.complete_job(second, {"via": "job"})["state"] == "resumed"
    assert ended(cloud, first)["result"]["waited"]["data"] == {"via": "url"}
    assert ended(cloud, second)["result"]["waited"]["data"] == {"via": "job"}
