"""The submit function attacked through its own OpenAPI document (schemathesis), and the
admin function through the document's operator routes (tag `operators`),
and with raw bodies the document's generator cannot write (numbers outside the
double range, deep nesting), over HTTP against functions-framework on
fake-gcs-server and the Pub/Sub emulator.

Every answer must be JSON that matches the document, never a 5xx, and a refused
request must leave the bucket exactly as it was (same objects, same generations).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.fuzz_support import ROOT, Functions, functions, fuzz
from tests.fuzz.openapi_support import (
    OPERATOR_TAG,
    document,
    operations,
    operator_paths,
    validate_answer,
)
from tests.fuzz.strategies import EDGE_NUMBERS, any_json_text, deep_text, nest, object_text

SCHEMA = schemathesis.openapi.from_path(ROOT / "shared" / "openapi.json")
SUBMIT_SCHEMA = SCHEMA.exclude(tag=OPERATOR_TAG)  # the operator routes are admin's
ADMIN_SCHEMA = SCHEMA.include(tag=OPERATOR_TAG)
MAX_BODY = 262_144  # small enough that schemathesis finds 413 too, big enough for a payload


@pytest.fixture(scope="module")
def submit_fn(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, log_dir: Path
) -> Iterator[Functions]:
    with functions(
        emulator_env,
        gcs_client,
        publisher,
        log_dir,
        (("submit", "submit"), ("admin", "admin")),  # one bucket, both functions
        {"RECLAIM_MAX_BODY_BYTES": str(MAX_BODY), "RECLAIM_STALE_SECONDS": "600"},
    ) as fns:
        yield fns


@pytest.fixture
def url(submit_fn: Functions) -> str:
    return submit_fn.urls["submit"]


@pytest.fixture
def admin_url(submit_fn: Functions) -> str:
    return submit_fn.urls["admin"]


@fuzz(examples=150)
@SUBMIT_SCHEMA.parametrize()
def test_every_operation_answers_the_document(
    case: schemathesis.Case, submit_fn: Functions, url: str
) -> None:
    """Schemathesis' checks (no 5xx, status codes, content type, headers, bodies match
    the schemas, schema-invalid requests refused, 405 with Allow for other methods),
    except positive_data_acceptance: a schema-valid request may still be refused for
    a rule JSON Schema cannot state (an unregistered pipeline, a payload the pipeline
    rejects, an id used twice in a batch or already naming other content)."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    before = submit_fn.snapshot()
    response = case.call_and_validate(
        base_url=url, excluded_checks=[positive_data_acceptance], timeout=30
    )
    if response.status_code >= 400:
        assert submit_fn.snapshot() == before, f"refused ({response.status_code}) yet wrote"


@fuzz(examples=100)
@ADMIN_SCHEMA.parametrize()
def test_every_operator_operation_answers_the_document_from_the_admin_function(
    case: schemathesis.Case, submit_fn: Functions, admin_url: str
) -> None:
    """The same checks on the admin function, which serves the operator routes."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    before = submit_fn.snapshot()
    response = case.call_and_validate(
        base_url=admin_url, excluded_checks=[positive_data_acceptance], timeout=30
    )
    if response.status_code >= 400:
        assert submit_fn.snapshot() == before, f"refused ({response.status_code}) yet wrote"


def _post_raw(url: str, body: bytes) -> requests.Response:
    return requests.post(
        f"{url}/jobs", data=body, headers={"Content-Type": "application/json"}, timeout=30
    )


def _job(payload: str, job_id: str | None = None) -> str:
    ident = f',"id":{json.dumps(job_id)}' if job_id else ""
    return '{"pipeline":"demo","payload":' + payload + ident + "}"


def _batch(*jobs: str) -> str:
    return '{"batch_id":"fuzz-raw","jobs":[' + ",".join(jobs) + "]}"


hostile_body = st.one_of(
    object_text(any_json_text).map(_job),
    any_json_text,
    st.lists(object_text(any_json_text).map(_job), min_size=1, max_size=3).map(
        lambda jobs: _batch(*jobs)
    ),
    deep_text(min_depth=20, max_depth=1500).map(lambda d: _job('{"x":' + d + "}")),
    st.sampled_from(EDGE_NUMBERS).map(lambda n: _job('{"x":' + n + "}")),
)

ONE_E400 = _job('{"x":1e400}', "edge-1e400")
BATCH_WITH_1E400 = _batch(_job("{}", "fine-1"), _job('{"x":1e400}', "edge-2"), _job("{}", "fine-2"))
DEEP_495 = _job(nest('{"stages":1}', 495), "deep-495")
DEEP_60 = _job(nest("{}", 60), "deep-60")


@fuzz(examples=150)
@given(body=hostile_body)
@example(body=ONE_E400)
@example(body=BATCH_WITH_1E400)
@example(body=DEEP_495)
@example(body=DEEP_60)
def test_hostile_bodies_are_refused_with_json_and_write_nothing(
    submit_fn: Functions, url: str, body: str
) -> None:
    before = submit_fn.snapshot()
    response = _post_raw(url, body.encode())
    assert response.status_code < 500, response.text
    answer = response.json()
    validate_answer("/jobs", "post", response.status_code, answer)
    if response.status_code >= 400:
        assert submit_fn.snapshot() == before, f"refused ({response.status_code}) yet wrote"


def test_a_payload_at_the_depth_limit_is_accepted_and_one_level_more_refused(
    submit_fn: Functions, url: str
) -> None:
    """The documented depth is exact: 32 levels pass, 33 are a 400 saying why."""
    doc = json.loads((ROOT / "shared" / "openapi.json").read_text())
    limit = doc["components"]["schemas"]["Payload"]["x-reclaim-max-depth"]
    ok = _post_raw(url, _job(nest("{}", limit - 1), "at-the-depth-limit").encode())
    assert ok.status_code == 202, ok.text
    before = submit_fn.snapshot()
    deep = _post_raw(url, _job(nest("{}", limit), "past-the-depth-limit").encode())
    assert deep.status_code == 400, deep.text
    assert "nested" in deep.json()["reason"]
    assert submit_fn.snapshot() == before


def test_the_document_is_served(url: str) -> None:
    served = requests.get(f"{url}/openapi.json", timeout=10)
    assert served.status_code == 200
    assert served.headers["Content-Type"].startswith("application/json")
    assert served.json() == json.loads((ROOT / "shared" / "openapi.json").read_text())


def test_real_answers_match_the_document(submit_fn: Functions, url: str) -> None:
    """A job and a batch as a client sees them, each answer checked against the schema."""
    single = requests.post(
        f"{url}/jobs", json={"pipeline": "demo", "id": "doc-one", "batch_id": "doc-b"}, timeout=30
    )
    batch = requests.post(
        f"{url}/jobs",
        json={"batch_id": "doc-batch", "jobs": [{"pipeline": "demo", "id": "doc-two"}]},
        timeout=30,
    )
    again = requests.post(f"{url}/jobs", json={"pipeline": "demo", "id": "doc-one"}, timeout=30)
    answers = [
        ("/jobs", "post", single),
        ("/jobs", "post", batch),
        ("/jobs", "post", again),
        ("/jobs/{id}", "get", requests.get(f"{url}/jobs/doc-one", timeout=10)),
        ("/jobs/{id}", "get", requests.get(f"{url}/jobs/nope", timeout=10)),
        ("/jobs/{id}", "get", requests.get(f"{url}/jobs/a..b", timeout=10)),
        ("/batches/{id}", "get", requests.get(f"{url}/batches/doc-batch", timeout=10)),
        ("/batches/{id}", "get", requests.get(f"{url}/batches/doc-b", timeout=10)),
        ("/batches/{id}", "get", requests.get(f"{url}/batches/nope", timeout=10)),
        ("/health", "get", requests.get(f"{url}/health", timeout=10)),
    ]
    assert [a[2].status_code for a in answers] == [202, 202, 409, 200, 404, 400, 200, 200, 404, 200]
    for path, method, response in answers:
        validate_answer(path, method, response.status_code, response.json())
    submit_fn.bucket.blob("jobs/doc-broken.json").upload_from_string(b"{not json")
    broken = requests.get(f"{url}/jobs/doc-broken", timeout=10)
    assert broken.status_code == 409
    validate_answer("/jobs/{id}", "get", 409, broken.json())


_METHODS = ("get", "post", "put", "patch", "delete")


def test_every_documented_operation_is_served_and_other_methods_are_refused(
    submit_fn: Functions, url: str, admin_url: str
) -> None:
    """The document's routes are the functions': each documented operation answers one
    of its documented statuses (never the router's "no route" 404) from submit, or from
    the admin function for an operator route (which submit answers 404 naming it), and
    every other method on the path is a 405 whose Allow header lists exactly the
    documented ones."""
    for path, item in document()["paths"].items():
        operator = path in operator_paths()
        concrete = (admin_url if operator else url) + path.replace("{id}", "doc-probe")
        if operator:
            on_submit = requests.post(url + path.replace("{id}", "doc-probe"), timeout=30)
            assert on_submit.status_code == 404, (path, on_submit.text)
            assert on_submit.json()["error"] == "operator route", path
        for method, operation in operations(item).items():
            body = {"pipeline": "demo"} if method == "post" else None
            response = requests.request(method, concrete, json=body, timeout=30)
            assert str(response.status_code) in operation["responses"], (path, response.text)
            assert "no route" not in response.text, (path, method)
        for method in set(_METHODS) - set(operations(item)):
            refused = requests.request(method, concrete, timeout=30)
            assert refused.status_code == 405, (path, method, refused.text)
            allowed = {m.strip().lower() for m in refused.headers["Allow"].split(",")}
            assert allowed == set(operations(item)), (path, refused.headers["Allow"])


@pytest.mark.parametrize("path", ["/jobs/a%0Ab", "/batches/%0A", "/%0A", "/jobs/x%0D%0Ay"])
def test_a_path_the_framework_cannot_route_still_answers_json(url: str, path: str) -> None:
    """Found by schemathesis: functions-framework's router answered its own HTML 404
    for a path holding a percent-encoded newline, before the function ever ran."""
    answer = requests.get(f"{url}{path}", timeout=10)
    assert answer.status_code == 404
    assert answer.headers["Content-Type"].startswith("application/json")
    assert set(answer.json()) == {"error", "reason"}
