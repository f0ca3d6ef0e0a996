"""Who did it, over HTTP on the local cloud: the author an HTTP pause or a dashboard button
records is what the platform verified (the local Cloud Run front checks ID tokens of the
local cloud's issuer, as Cloud Run's IAM check does on GCP), never a header the caller
chose; and the dashboard refuses a cookie+token pair an attacker planted."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from tests.integration.cloud_support import fast_cloud, job, lines_where
from tests.polling import wait_for
from tests.unit.test_identity import CALLER_CHOSEN, cloud_run_token

OPS = "ops@example.com"


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(max_instances=1, concurrency=4) as c:
        yield c


def bearer(cloud: LocalCloud, service: str, email: str = OPS) -> dict[str, str]:
    return {"Authorization": "Bearer " + cloud.platform.identity_token(service, email)}


def paused_by(cloud: LocalCloud, pipeline: str) -> str | None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )
    blob = client.bucket(cloud.endpoints["records_bucket"]).get_blob(f"paused/{pipeline}")
    return None if blob is None else str(json.loads(blob.download_as_bytes())["by"])


def pipeline_action(cloud: LocalCloud, action: str, headers: dict[str, str]) -> requests.Response:
    url = f"{cloud.endpoints['admin']}/pipelines/demo/{action}"  # an operator route
    return requests.post(url, json={}, headers=headers, timeout=60)  # operator routes: JSON


def test_a_pause_records_the_verified_caller_and_never_a_header_the_caller_chose(
    cloud: LocalCloud,
) -> None:
    try:
        assert pipeline_action(cloud, "pause", CALLER_CHOSEN).status_code == 200
        assert paused_by(cloud, "demo") == "http"  # anonymous: not "boss"
        assert pipeline_action(cloud, "resume", {}).status_code == 200
        # a token the caller made up (signature "removed" by themselves), one for another
        # service, and a real one with its signature altered: the front refuses each
        forged = {"Authorization": "Bearer " + cloud_run_token({"email": "boss@example.com"})}
        other = bearer(cloud, "dashboard")
        altered = bearer(cloud, "admin")
        altered["Authorization"] = altered["Authorization"][:-4] + "AAAA"
        for headers in (forged, other, altered):
            refused = pipeline_action(cloud, "pause", {**CALLER_CHOSEN, **headers})
            assert refused.status_code == 401, refused.text
            assert paused_by(cloud, "demo") is None
        verified = pipeline_action(cloud, "pause", {**CALLER_CHOSEN, **bearer(cloud, "admin")})
        assert verified.status_code == 200 and verified.json()["changed"] is True
        assert paused_by(cloud, "demo") == f"http:{OPS}"
        resumed = pipeline_action(cloud, "resume", {**CALLER_CHOSEN, **bearer(cloud, "admin")})
        assert resumed.status_code == 200 and resumed.json()["was_paused"] is True
        assert resumed_by(cloud) == ["http", f"http:{OPS}"]  # the anonymous one above: "http"
    finally:
        pipeline_action(cloud, "resume", {})


def resumed_by(cloud: LocalCloud) -> list[str]:
    """The authors of the admin function's "pipeline resumed" lines, oldest first."""
    lines = lines_where(cloud.config.log_dir, lambda e: e.get("message") == "pipeline resumed")
    return [str(e.get("by")) for e in sorted(lines["admin"], key=lambda e: str(e.get("time")))]


def failed_job(cloud: LocalCloud) -> str:
    job_id = f"id-{uuid.uuid4().hex[:10]}"
    body = {
        "id": job_id,
        "pipeline": "demo",
        "payload": {"stages": 1, "fail_at": 0, "permanent": True},
    }
    resp = requests.post(cloud.endpoints["submit"] + "/jobs", json=body, timeout=60)
    assert resp.status_code == 202, resp.text
    wait_for(f"{job_id} failed", lambda: job(cloud, job_id)["status"] == "failed")
    return job_id


def form_token(session: requests.Session, url: str, headers: dict[str, str]) -> str:
    page = session.get(url, headers=headers, timeout=60)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def press(
    cloud: LocalCloud, job_id: str, token: str, headers: dict[str, str], cookie: str | None = None
) -> requests.Response:
    url = f"{cloud.endpoints['dashboard']}/jobs/{job_id}/retry"
    return requests.post(
        url,
        data={"csrf": token},
        cookies={"reclaim_csrf": cookie if cookie is not None else token},
        headers={"Accept": "application/json", **headers},
        allow_redirects=False,
        timeout=60,
    )


def test_a_dashboard_retry_records_the_verified_caller(cloud: LocalCloud) -> None:
    job_id = failed_job(cloud)
    me = bearer(cloud, "dashboard")
    token = form_token(requests.Session(), f"{cloud.endpoints['dashboard']}/jobs/{job_id}", me)
    done = press(cloud, job_id, token, {**CALLER_CHOSEN, **me})
    assert done.status_code == 303, done.text
    retried = [e for e in job(cloud, job_id)["history"] if e["event"] == "retried"]
    assert [e["by"] for e in retried] == [f"dashboard:{OPS}"]


def test_a_planted_cookie_and_token_pair_is_refused_with_a_reason(cloud: LocalCloud) -> None:
    """The attacker plants a pair they chose, or one the dashboard issued to them (for
    their own identity, or anonymous): none is the victim's."""
    job_id = failed_job(cloud)
    page = f"{cloud.endpoints['dashboard']}/jobs/{job_id}"
    victim = bearer(cloud, "dashboard")
    theirs = form_token(requests.Session(), page, bearer(cloud, "dashboard", "mallory@example.com"))
    anonymous = form_token(requests.Session(), page, {})
    chosen = "planted." + "0" * 64
    for planted in (chosen, theirs, anonymous):
        refused = press(cloud, job_id, planted, victim)
        assert refused.status_code == 403, refused.text
        body: dict[str, Any] = refused.json()
        assert body["error"] == "forbidden" and "not issued" in body["reason"]
    mine = form_token(requests.Session(), page, victim)
    other_port = press(cloud, job_id, mine, {**victim, "Origin": "http://127.0.0.1:1"})
    assert other_port.status_code == 403 and "another origin" in other_port.json()["reason"]
    assert job(cloud, job_id)["status"] == "failed"  # nothing was written
    assert press(cloud, job_id, mine, victim).status_code == 303
