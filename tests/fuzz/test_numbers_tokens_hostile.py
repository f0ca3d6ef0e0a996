"""Every integer-valued query parameter and every token of the OpenAPI document, attacked
with Unicode digits, lone surrogates and huge values, over HTTP against the real submit
and admin functions (issue 41, 4 and 6: `page_size=²`, `after=²` and a confirm token
`²-...` answered 500; one reader now reads them all, shared/params.py).

The targets are read from shared/openapi.json, so a parameter added there is attacked
too: each query parameter whose schema is an integer or a number, and each parameter or
request-body field marked `"x-reclaim-token": true`. Every answer must be a 400 JSON
refusal naming the parameter, and the bucket must be exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.fuzz_support import Functions, functions, fuzz
from tests.fuzz.openapi_support import document, operations, operator_paths, resolve
from tests.fuzz.strategies import lone_surrogate

CONCRETE = {"{id}": "fuzz-numbers-job", "{name}": "demo"}
SELECTION = {"batch": "fuzz-numbers"}
BODY_DEFAULTS = {"/bulk/cancel": SELECTION, "/bulk/retry": SELECTION}
"""What else a body needs to reach the token (a bulk selection)."""


@dataclass(frozen=True)
class Target:
    """One place a number or a token is read: (method, path, in query or body, name)."""

    method: str
    path: str
    where: str
    name: str
    kind: str  # "integer", "number" or "token"

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path} {self.where}:{self.name}"


def _kind(schema: dict[str, Any]) -> str | None:
    schema = resolve(schema)
    if schema.get("x-reclaim-token"):
        return "token"
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return next((k for k in ("integer", "number") if k in kinds), None)


def targets() -> list[Target]:
    """Every integer or number query parameter and every token of the document."""
    found: list[Target] = []
    for path, item in document()["paths"].items():
        for method, op in operations(item).items():
            for param in op.get("parameters", []):
                param = resolve(param)
                kind = _kind(param.get("schema", {}))
                if param.get("in") == "query" and kind is not None:
                    found.append(Target(method, path, "query", param["name"], kind))
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            props = resolve(body.get("schema", {})).get("properties", {})
            for name, schema in props.items():
                if _kind(schema) == "token":
                    found.append(Target(method, path, "body", name, "token"))
    return found


TARGETS = targets()


def test_the_document_marks_what_the_code_reads() -> None:
    """The attack below covers what issue 41 found: if the document stopped marking one
    of them, this fails rather than the attack silently skipping it."""
    names = {(t.path, t.name, t.kind) for t in TARGETS}
    assert {
        ("/jobs", "page_size", "integer"),
        ("/jobs", "page_token", "token"),
        ("/jobs/{id}", "after", "integer"),
        ("/jobs/{id}", "wait", "number"),
        ("/bulk/cancel", "confirm", "token"),
        ("/bulk/retry", "confirm", "token"),
    } <= names


UNICODE_DIGITS = (
    "²",
    "³",
    "¹",
    "٣",
    "۴",
    "\u09ea",  # Bengali four
    "\uff11\uff12",  # fullwidth 12
    "\u216b",  # Roman numeral twelve
    "½",
    "\U0001d7d7",  # mathematical bold nine
    "\u07c0",  # NKo zero
)
HUGE = ("9" * 25, "9" * 400, "1" + "0" * 5000, "1e999", "-1", "+5", " 5", "5 ", "1_0", "0x10")


@st.composite
def unicode_digits(draw: Any) -> str:
    """Digits of any script (Nd, No, Nl), with at least one that is not ASCII, maybe
    beside ASCII ones: what str.isdigit() or int() or float() may take."""
    other = st.characters(categories=["Nd", "No", "Nl"]).filter(lambda c: not c.isascii())
    chars = draw(st.lists(st.one_of(other, st.sampled_from("0123456789")), max_size=8))
    return draw(st.sampled_from(UNICODE_DIGITS)) if not chars else "".join(chars) + draw(other)


@st.composite
def with_surrogate(draw: Any) -> str:
    head = draw(st.sampled_from(("", "1", "²", "50")))
    return head + draw(lone_surrogate) + draw(st.sampled_from(("", "0", "9")))


hostile = st.one_of(
    unicode_digits(),
    with_surrogate(),
    st.sampled_from(HUGE),
    st.integers(min_value=10**19).map(str),
    st.integers(min_value=1, max_value=10**6).map(lambda n: "²" + str(n)),
)


@pytest.fixture(scope="module")
def fns(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, log_dir: Path
) -> Iterator[Functions]:
    with functions(
        emulator_env, gcs_client, publisher, log_dir, (("submit", "submit"), ("admin", "admin"))
    ) as fns:
        yield fns


def send(fns: Functions, target: Target, value: str) -> requests.Response:
    """The value where the target reads it, the rest of the request valid; a lone
    surrogate in a query goes as the bytes a careless client encodes it to."""
    path = target.path
    for name, concrete in CONCRETE.items():
        path = path.replace(name, concrete)
    base = fns.urls["admin" if target.path in operator_paths() else "submit"]
    if target.where == "query":
        raw = quote(value.encode("utf-8", "surrogatepass"), safe="")
        extra = "&wait=1" if target.name == "after" else ""
        url = f"{base}{path}?{target.name}={raw}{extra}"
        return requests.request(target.method, url, timeout=60)
    body = {**BODY_DEFAULTS.get(target.path, {}), target.name: value}
    return requests.request(
        target.method,
        base + path,
        data=json.dumps(body).encode(),  # ensure_ascii: a surrogate as its \\u escape
        headers={"Content-Type": "application/json"},
        timeout=60,
    )


@pytest.mark.parametrize("target", TARGETS, ids=str)
@fuzz(examples=30)
@given(value=hostile)
@example(value="²")
@example(value="\ud800")
@example(value="9" * 400)
@example(value="²-" + "0" * 16)
def test_every_number_and_token_refuses_unicode_digits_surrogates_and_huge_values(
    fns: Functions, target: Target, value: str
) -> None:
    before = fns.snapshot()
    answer = send(fns, target, value)
    assert answer.status_code == 400, f"{target} = {value[:40]!r}: {answer.text[:300]}"
    body = answer.json()
    assert target.name in body["error"] and body["reason"], body
    assert fns.snapshot() == before, f"{target} refused yet wrote"
