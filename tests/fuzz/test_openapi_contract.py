"""The OpenAPI document stays true to the code and to the docs: it is a valid
OpenAPI 3.1 document, its limits are the validators' limits, its fields are the
code's fields, and the HTTP API reference (docs/api.md) says what it says. (Real answers
are validated against it in test_submit_api.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from shared import job_queue, records, status
from shared.config import ENV_VARS
from shared.features import table as features
from shared.http import routes as api_routes
from shared.jobs import JobStatus
from shared.submission import parse
from tests.fuzz.fuzz_support import ROOT, fuzz
from tests.fuzz.openapi_support import (
    answer_schema,
    document,
    operations,
    operator_paths,
    resolve,
)

README = (ROOT / "README.md").read_text()
API_DOC = (ROOT / "docs" / "api.md").read_text()
DEFAULTS = {var.name: var.default for var in ENV_VARS}


def schema(name: str) -> dict[str, Any]:
    found: dict[str, Any] = document()["components"]["schemas"][name]
    return found


def test_it_is_a_valid_openapi_3_1_document() -> None:
    from schemathesis.specs.openapi.definitions import OPENAPI_31  # the official 3.1 schema

    doc = document()
    assert doc["openapi"].startswith("3.1.")
    errors = [e.message for e in jsonschema_rs.Draft202012Validator(OPENAPI_31).iter_errors(doc)]
    assert not errors, errors[:5]
    for name, body in doc["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(body), name


def test_every_local_reference_resolves() -> None:
    text = (ROOT / "shared" / "openapi.json").read_text()
    for ref in set(re.findall(r'"\$ref": "(#/[^"]+)"', text)):
        assert resolve({"$ref": ref}), ref


def test_the_limits_are_the_validators() -> None:
    payload = schema("Payload")
    assert payload["x-reclaim-max-encoded-bytes"] == parse.MAX_PAYLOAD_BYTES
    assert payload["x-reclaim-max-depth"] == records.MAX_PAYLOAD_DEPTH
    attempts = schema("JobRequest")["properties"]["max_attempts"]["anyOf"][0]
    assert (attempts["minimum"], attempts["maximum"]) == (1, parse.MAX_ATTEMPTS)
    assert schema("Id")["maxLength"] == records.ID_MAX_LEN
    jobs = schema("BatchRequest")["properties"]["jobs"]
    assert jobs["maxItems"] == int(DEFAULTS[jobs["x-reclaim-setting"]])
    body = schema("SubmitRequest")["x-reclaim-max-body-bytes"]
    assert body == int(DEFAULTS["RECLAIM_MAX_BODY_BYTES"])


@fuzz(examples=300)
@given(value=st.text(max_size=140) | st.from_regex(records._ID.pattern, fullmatch=True))
@example(value="a..b")
@example(value="..")
@example(value="a" * 128)
@example(value="a" * 129)
@example(value="-lead")
@example(value="ok\n")
def test_the_id_pattern_accepts_exactly_what_the_code_accepts(value: str) -> None:
    spec = schema("Id")
    documented = (
        spec["minLength"] <= len(value) <= spec["maxLength"]
        and re.search(spec["pattern"].replace("$", r"\Z"), value) is not None
    )
    try:
        records.validate_job_id(value)
        accepted = True
    except records.InvalidInput:
        accepted = False
    assert documented == accepted


def test_the_fields_are_the_codes() -> None:
    feature_keys = {k for f in features.FEATURES for k in f.submit_keys}
    assert set(schema("JobRequest")["properties"]) == parse.JOB_KEYS | feature_keys
    assert set(schema("BatchRequest")["properties"]) == parse.BATCH_KEYS
    assert schema("Status")["enum"] == list(JobStatus)
    view = {"id", *status._VIEW_FIELDS, "max_attempts", "outputs", "status_url", "watchdog"}
    view |= {"generation", *status.errors_shown({"status": "running", "error": None})}
    # the features' fields (time, flow control, workflows): only when the job has them
    optional = {"watchdog", "progress", *(v for f in features.FEATURES for v in f.view_fields)}
    earlier = {"attempts": 2, "status": "running", "error": {"attempt": 1, "retryable": True}}
    optional |= set(status.errors_shown(earlier)) - {"error"}  # previous_error
    assert set(schema("Job")["properties"]) == view | optional
    assert set(schema("Job")["required"]) == view - optional
    error = job_queue.error_info(
        ValueError("x"),
        stage=None,
        attempt=1,
        now=job_queue.parse_time("2026-01-01"),
        retryable=False,
    )
    assert set(schema("JobError")["required"]) == set(error)
    traced = job_queue.error_info(
        ValueError("x"),
        stage="s",
        attempt=1,
        now=job_queue.parse_time("2026-01-01"),
        retryable=True,
        traceback="Traceback ...",
        where={"file": "f.py", "line": 1, "function": "s"},
    )
    assert set(schema("JobError")["properties"]) == set(traced)
    assert set(schema("JobError")["properties"]["kind"]["enum"]) == set(job_queue.ERROR_KINDS)


def _routes_matched_by_submit() -> tuple[set[str], set[str]]:
    """(exact paths, first path segments) the submit function's router compares the
    request against, read from its source: every `path == X` and `head == X` (or
    `in (...)`) in `submit`, with module-level string constants resolved."""
    tree = ast.parse((ROOT / "functions" / "submit" / "main.py").read_text())
    constants = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    router = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "submit")
    found: dict[str, set[str]] = {"path": set(), "head": set()}
    for node in ast.walk(router):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)):
            continue
        if node.left.id not in found:
            continue
        for comparator in node.comparators:
            values = (
                comparator.elts if isinstance(comparator, ast.Tuple | ast.List) else [comparator]
            )
            for value in values:
                if isinstance(value, ast.Name):
                    text = constants.get(value.id)
                else:
                    text = value.value if isinstance(value, ast.Constant) else None
                if text is None:  # e.g. `rest is None`: not a route
                    continue
                assert isinstance(text, str), f"a route this test cannot read: {ast.unparse(node)}"
                found[node.left.id].add(text)
    return found["path"], found["head"]


def test_every_route_submit_serves_is_documented_and_no_other() -> None:
    """The router's own comparisons against the document's paths: a route added to
    functions/submit/main.py without its entry here fails (the served answers are
    checked over HTTP in test_submit_api.py)."""
    exact, heads = _routes_matched_by_submit()
    assert "/health" in exact and {"jobs", "batches"} <= heads  # the reader found the router
    documented = set(document()["paths"]) - operator_paths()  # the admin function's
    assert exact <= documented
    by_head = {path for path in documented - exact if path.split("/")[1] in heads}
    assert documented == exact | by_head
    assert heads <= {path.split("/")[1] for path in by_head}


def test_the_operator_routes_are_the_admin_functions_and_marked_so() -> None:
    """The operations tagged `operators` are the paths shared.http.routes.operator_route
    recognises (the admin function serves them, submit refuses them), each with the
    admin function as its server; no other path is one."""
    concrete = {"{id}": "a-job", "{name}": "demo", "{token}": "eyJ.c2ln"}
    for path, item in document()["paths"].items():
        example_path = path
        for name, value in concrete.items():
            example_path = example_path.replace(name, value)
        is_operator = path in operator_paths()
        assert (api_routes.operator_route(example_path) is not None) is is_operator, path
        if is_operator:
            assert "admin function" in item["servers"][0]["description"], path
            assert set(operations(item)) == {"post"}, path
    assert len(operator_paths()) == 8  # with waits' /jobs/{id}/complete, /waitpoints/{token}


def test_no_documented_route_ends_in_z() -> None:
    """Cloud Run answers some paths ending in "z" itself ("Reserved URL paths",
    https://cloud.google.com/run/docs/known-issues): the document promises none."""
    assert [p for p in document()["paths"] if p.rstrip("/").endswith("z")] == []


def _api_section(title: str) -> str:
    start = API_DOC.index(f"## {title}\n")
    end = API_DOC.find("\n## ", start + 1)
    return API_DOC[start:] if end < 0 else API_DOC[start:end]


def _table(section: str, first_header: str) -> list[list[str]]:
    """Rows of the markdown table whose first header cell is first_header."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header}"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_api_doc_routes_table_is_the_documents() -> None:
    rows = _table(_api_section("HTTP API"), "method")
    readme = {}
    for method, path, answer in rows:
        route = re.sub(r"<(\w+)>", r"{\1}", path.strip("`"))
        readme[(method.lower(), route)] = {
            int(code) for code in re.findall(r"\b[1-5]\d\d\b", answer)
        }
    documented = {
        (method, path): {int(code) for code in op["responses"]} - {500, 503}
        for path, item in document()["paths"].items()
        for method, op in operations(item).items()
    }
    assert readme == documented


def test_the_api_doc_field_table_is_the_documents() -> None:
    rows = _table(_api_section("HTTP API"), "field")
    fields = {name.strip("`"): kind for name, kind, _meaning in rows}
    assert set(fields) == set(schema("JobRequest")["properties"])
    assert f"integer 1..{parse.MAX_ATTEMPTS}" in fields["max_attempts"]


def test_the_docs_link_the_document() -> None:
    readme = README[README.index("## HTTP API\n") :]
    for section in (_api_section("HTTP API"), readme[: readme.index("\n## ", 1)]):
        assert "GET" in section and "/openapi.json" in section
        assert "shared/openapi.json" in section
    assert Path(ROOT / "shared" / "openapi.json").is_file()


@pytest.mark.parametrize(
    ("path", "method", "status"),
    [
        (path, method, int(code))
        for path, item in document()["paths"].items()
        for method, op in operations(item).items()
        for code in op["responses"]
    ],
)
def test_every_answer_has_a_json_schema(path: str, method: str, status: int) -> None:
    if (path, status) in BYTES_ANSWERS:  # a download: the output's bytes, or a redirect
        return
    assert jsonschema_rs.meta.is_valid(answer_schema(path, method, status))


BYTES_ANSWERS = {("/jobs/{id}/outputs/{name}", 200), ("/jobs/{id}/outputs/{name}", 302)}
"""The answers that are not JSON: an output's own bytes (any type), its signed URL."""


def test_a_download_answers_bytes_or_a_redirect() -> None:
    responses = document()["paths"]["/jobs/{id}/outputs/{name}"]["get"]["responses"]
    assert set(responses["200"]["content"]) == {"*/*"}
    assert "Location" in responses["302"]["headers"] and "content" not in responses["302"]
    assert {s for p, s in BYTES_ANSWERS} == {200, 302}
