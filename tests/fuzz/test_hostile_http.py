"""Hostile records and push envelopes against the real functions over HTTP: claim
(as Pub/Sub pushes), sweep (as Cloud Scheduler calls it), the status read and the
dashboard's job page, on fake-gcs-server through the official client.

Every API answer must be JSON (no NaN, no Infinity) and never a 5xx: claim answers
200 (decided), 400 (malformed delivery) or 429 (no slot); sweep answers its
counts with no error; the status read answers the job or 409 for a corrupt one.
The dashboard, a browser's app, answers pages: the job's, or the 409 page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import assume, example, given

from shared import records
from tests.fuzz.fuzz_support import Functions, functions, fuzz
from tests.fuzz.openapi_support import validate_answer
from tests.fuzz.strategies import (
    base_record,
    hostile_record,
    is_quick,
    nest,
    odd_segment,
    push_envelope,
    record_text,
)

JOB = "fuzz-http-job"


@pytest.fixture(scope="module")
def fns(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, log_dir: Path
) -> Iterator[Functions]:
    with functions(
        emulator_env,
        gcs_client,
        publisher,
        log_dir,
        (("submit", "submit"), ("claim", "claim"), ("sweep", "sweep"), ("dashboard", "dashboard")),
        {
            "RECLAIM_STALE_SECONDS": "3",
            "RECLAIM_MAX_ATTEMPTS": "3",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0",
            "RECLAIM_DRAIN_MAX_JOBS": "0",
        },
    ) as fns:
        yield fns


def _valid_id(name: str) -> bool:
    try:
        records.validate_job_id(name)
    except records.InvalidInput:
        return False
    return True


def _strict_json(response: requests.Response) -> Any:
    """The body, parsed as strictly as a browser would (no NaN/Infinity)."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the answer: not JSON ({response.text[:200]})")

    assert response.headers.get("Content-Type", "").startswith("application/json")
    return json.loads(response.text, parse_constant=refuse)


INF_PAYLOAD = record_text(base_record(JOB), payload='{"stages":1,"x":1e400}')
INF_RESULT = record_text(base_record(JOB, "done"), result='{"x":-1e400}')
DEEP_PAYLOAD = record_text(base_record(JOB), payload=nest("0", 495)[:-1] + ',"stages":1}')
TRACE_NOT_A_STRING = record_text(base_record(JOB, "running"), traceparent="[7]")


@fuzz(examples=80)
@given(data=hostile_record(JOB))
@example(data=INF_PAYLOAD)
@example(data=INF_RESULT)
@example(data=DEEP_PAYLOAD)
@example(data=TRACE_NOT_A_STRING)
def test_hostile_records_over_http(fns: Functions, data: bytes) -> None:
    assume(is_quick(data))
    fns.bucket.blob(f"jobs/{JOB}.json").upload_from_string(data)
    fns.bucket.blob(f"pending/{JOB}").upload_from_string(b"")
    try:
        read = requests.get(f"{fns.urls['submit']}/jobs/{JOB}", timeout=30)
        assert read.status_code in (200, 409), read.text
        _strict_json(read)
        page = requests.get(f"{fns.urls['dashboard']}/jobs/{JOB}", timeout=30)
        assert page.status_code in (200, 409), page.text[:500]
        assert page.headers["Content-Type"].startswith("text/html"), page.headers
        envelope = {"message": {"data": "", "attributes": {"job_id": JOB}, "messageId": "1"}}
        claimed = requests.post(fns.urls["claim"], json=envelope, timeout=60)
        assert claimed.status_code in (200, 429), claimed.text
        _strict_json(claimed)
        swept = requests.post(fns.urls["sweep"], timeout=60)
        assert swept.status_code == 200, swept.text
        counts = _strict_json(swept)
        assert counts["errors"] == 0, counts
    finally:
        for blob in fns.bucket.client.list_blobs(fns.bucket.name):
            blob.delete()


@fuzz(examples=150)
@given(envelope=push_envelope([JOB, "fuzz-missing"]))
def test_hostile_push_envelopes_are_answered(fns: Functions, envelope: Any) -> None:
    fns.bucket.blob(f"jobs/{JOB}.json").upload_from_string(
        json.dumps(base_record(JOB, "done")).encode()
    )
    body, headers = envelope
    answer = requests.post(fns.urls["claim"], data=body, headers=headers, timeout=60)
    assert answer.status_code in (200, 400, 429), answer.text
    _strict_json(answer)


@fuzz(examples=15)
@given(odd=odd_segment)
@example(odd="has space")
def test_foreign_names_in_pending_and_batches_are_skipped_over_http(
    fns: Functions, odd: str
) -> None:
    """Defect 5 over HTTP: the sweep and the batch view report and skip them."""
    assume(not _valid_id(odd))  # a valid id is a member whose record is missing, not foreign
    try:
        try:
            fns.bucket.blob(f"pending/{odd}").upload_from_string(b"")
            fns.bucket.blob(f"batches/fuzz-b/{odd}").upload_from_string(b"")
        except Exception:
            assume(False)  # a name the server itself refuses
        record = {**base_record(JOB, "done"), "batch_id": "fuzz-b"}
        fns.bucket.blob(f"jobs/{JOB}.json").upload_from_string(json.dumps(record).encode())
        fns.bucket.blob(f"batches/fuzz-b/{JOB}").upload_from_string(b"")
        swept = requests.post(fns.urls["sweep"], timeout=60)
        assert swept.status_code == 200 and _strict_json(swept)["errors"] == 0, swept.text
        view = requests.get(f"{fns.urls['submit']}/batches/fuzz-b", timeout=30)
        assert view.status_code == 200, view.text
        body = _strict_json(view)
        validate_answer("/batches/{id}", "get", 200, body)
        assert [j["id"] for j in body["jobs"]] == [JOB]
    finally:
        for blob in fns.bucket.client.list_blobs(fns.bucket.name):
            blob.delete()


@pytest.mark.parametrize("target", ["claim", "sweep"])
def test_a_path_the_framework_cannot_route_still_answers_json(fns: Functions, target: str) -> None:
    answer = requests.post(f"{fns.urls[target]}/x%0Ay", json={}, timeout=10)
    assert answer.status_code == 404
    assert _strict_json(answer).keys() == {"error", "reason"}


def test_the_dashboard_answers_what_the_framework_refuses_as_its_error_page(
    fns: Functions,
) -> None:
    """The dashboard is a browser's app: functions-framework's own 404 becomes its error
    page (with the page's security headers); a client that asks for JSON gets JSON."""
    url = f"{fns.urls['dashboard']}/x%0Ay"
    page = requests.get(url, headers={"Accept": "text/html,*/*;q=0.8"}, timeout=10)
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")
    assert "<h1>404 not found</h1>" in page.text
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    asked = requests.get(url, headers={"Accept": "application/json"}, timeout=10)
    assert asked.status_code == 404 and _strict_json(asked).keys() == {"error", "reason"}
