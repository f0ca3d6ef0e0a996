"""The OpenAPI document as the tests read it: load it, find the schema of an
answer, and validate a body against it (JSON Schema 2020-12, jsonschema-rs)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema_rs

from tests.fuzz.fuzz_support import ROOT

DOCUMENT = ROOT / "shared" / "openapi.json"


@cache
def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DOCUMENT.read_text())
    return doc


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow local $refs (#/components/...) until a concrete object."""
    while "$ref" in node and node["$ref"].startswith("#/"):
        target: Any = document()
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def answer_schema(path: str, method: str, status: int) -> dict[str, Any]:
    """The JSON schema the document gives the answer `status` of one operation."""
    responses = document()["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} does not document {status}"
    response = resolve(responses[str(status)])
    return dict(response["content"]["application/json"]["schema"])


def validator(schema: dict[str, Any]) -> Any:
    """A 2020-12 validator whose local $refs resolve inside the document."""
    rooted = {**schema, "components": document()["components"]}
    return jsonschema_rs.Draft202012Validator(rooted, validate_formats=True)


def validate_answer(path: str, method: str, status: int, body: Any) -> None:
    """AssertionError naming every way `body` breaks the documented answer."""
    errors = [e.message for e in validator(answer_schema(path, method, status)).iter_errors(body)]
    assert not errors, f"{method.upper()} {path} {status}: {errors[:5]} in {str(body)[:500]}"


METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
"""The keys of a path item that are operations (a path item may hold `servers` too)."""
OPERATOR_TAG = "operators"


def operations(path_item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A path item's operations by method (its other keys, `servers`, left out)."""
    return {m: op for m, op in path_item.items() if m in METHODS}


def operator_paths() -> set[str]:
    """The paths of the operator routes: the admin function's, not submit's."""
    return {
        path
        for path, item in document()["paths"].items()
        if any(OPERATOR_TAG in op.get("tags", []) for op in operations(item).values())
    }
