"""The record schema, ids and bytes. Pure logic, no services."""

from __future__ import annotations

import ast
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import job_queue as q
from shared import records
from shared import records as r
from shared.jobs import JobStatus
from shared.records import InvalidInput, InvalidRecord

NOW = datetime(2026, 7, 26, 12, 0, 0, tzinfo=UTC)


def record(**fields: Any) -> dict[str, Any]:
    return {**r.new_record("job-1", "demo", {"n": 1}, NOW), **fields}


# --------------------------------------------------------------------------- ids


@pytest.mark.parametrize(
    "value", ["a", "A9", "0", "job-1", "a.b_c-d", "x" * 128, "up-" + "f" * 40, "a.b.c"]
)
def test_valid_ids_pass_through(value: str) -> None:
    assert r.validate_job_id(value) == value
    assert r.validate_batch_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "a/b",
        "../x",
        "a..b",
        "..",
        ".a",
        "-a",
        "_a",
        "x" * 129,
        "a b",
        "a\n",
        "é",
        "a%2Fb",
        "a\x00",
        "١٢",
    ],
)
def test_invalid_ids_are_refused_with_a_reason(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        r.validate_job_id(value)
    assert info.value.reason.startswith("job id ")
    assert str(info.value) == info.value.reason


def test_reason_reads_well() -> None:
    with pytest.raises(InvalidInput) as info:
        r.validate_job_id("a/b")
    assert "job id 'a/b' is invalid: only letters, digits, '.', '_' and '-'" in info.value.reason
    assert "(max 128)" in info.value.reason


@pytest.mark.parametrize("value", [None, 5, b"abc", ["a"], ""])
def test_non_string_or_empty_id_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="batch id"):
        r.validate_batch_id(value)


def test_long_id_is_shortened_in_the_reason() -> None:
    with pytest.raises(InvalidInput) as info:
        r.validate_job_id("z" * 5000)
    assert len(info.value.reason) < 200


def test_new_job_ids_are_valid_unique_and_not_sequential() -> None:
    ids = [r.new_job_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(r.validate_job_id(i) == i for i in ids)
    assert ids != sorted(ids)


def test_upload_job_id_is_deterministic_and_distinct() -> None:
    a = r.upload_job_id("b", "in/x.png", 17)
    assert a == r.upload_job_id("b", "in/x.png", "17")
    assert r.validate_job_id(a) == a and a.startswith("up-")
    others = {
        r.upload_job_id("b", "in/x.png", 18),
        r.upload_job_id("c", "in/x.png", 17),
        r.upload_job_id("b", "in/y.png", 17),
        r.upload_job_id("b\nin/x.png", "", 17),
    }
    assert a not in others and len(others) == 4


# --------------------------------------------------------------------------- new_record


def test_new_record_shape() -> None:
    rec = r.new_record(
        "job-1",
        "demo",
        {"n": 1},
        NOW,
        batch_id="b1",
        client_id="c-1",
        max_attempts=5,
        source={"bucket": "u", "name": "x", "generation": "1"},
    )
    assert rec["schema"] == r.SCHEMA_VERSION == 1
    assert (rec["id"], rec["pipeline"], rec["payload"]) == ("job-1", "demo", {"n": 1})
    assert (rec["batch_id"], rec["client_id"], rec["max_attempts"]) == ("b1", "c-1", 5)
    assert rec["source"] == {"bucket": "u", "name": "x", "generation": "1"}
    assert rec["status"] == "queued" and rec["attempts"] == 0
    assert rec["owner"] is None and rec["stage"] is None and rec["not_before"] is None
    assert rec["created_at"] == rec["updated_at"] == NOW.isoformat()
    assert rec["rescues"] == 0
    assert rec["checkpoint"] == {"next_stage": 0, "state": {}}
    assert rec["result"] is None and rec["error"] is None
    assert rec["history"] == [{"at": NOW.isoformat(), "event": "submitted"}]
    assert "write_id" not in rec


def test_new_record_defaults_and_is_claimable() -> None:
    rec = r.new_record("j", "demo", {}, NOW)
    assert rec["batch_id"] is None and rec["client_id"] is None
    assert rec["max_attempts"] is None and rec["source"] is None
    assert q.claimable(rec, NOW, 60, 3)
    assert r.validate_record(rec, "j") is rec


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"job_id": "a/b"}, "job id"),
        ({"pipeline": ""}, "pipeline"),
        ({"pipeline": "../x"}, "pipeline"),
        ({"payload": [1]}, "payload"),
        ({"payload": "x"}, "payload"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"payload": {"x": object()}}, "payload"),
        ({"batch_id": "b/1"}, "batch id"),
        ({"client_id": "c c"}, "client id"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_attempts": q.MAX_ATTEMPTS_LIMIT + 1}, "max_attempts"),
        ({"source": "gs://x"}, "source"),
    ],
)
def test_new_record_refuses_bad_input(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"job_id": "j", "pipeline": "demo", "payload": {}, "now": NOW}
    args.update(kwargs)
    with pytest.raises(InvalidInput, match=match):
        r.new_record(**args)


# --------------------------------------------------------------------------- validate


@pytest.mark.parametrize("obj", [None, [], "x", 3, True])
def test_validate_refuses_non_objects(obj: object) -> None:
    with pytest.raises(InvalidRecord, match="JSON object"):
        r.validate_record(obj)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"schema": 2}, "schema"),
        ({"schema": "1"}, "schema"),
        ({"schema": True}, "schema"),
        ({"schema": None}, "schema"),
        ({"id": "a/b"}, "bad id"),
        ({"id": 7}, "bad id"),
        ({"pipeline": ""}, "pipeline"),
        ({"pipeline": None}, "pipeline"),
        ({"status": "paused"}, "unknown status"),
        ({"status": None}, "unknown status"),
        ({"status": ["queued"]}, "unknown status"),
        ({"payload": None}, "payload"),
        ({"payload": [1]}, "payload"),
    ],
)
def test_validate_refuses_broken_records(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidRecord, match=match) as info:
        r.validate_record(record(**fields))
    assert info.value.reason == str(info.value)


@pytest.mark.parametrize("key", ["schema", "id", "pipeline", "status", "payload"])
def test_validate_refuses_missing_required_keys(key: str) -> None:
    rec = record()
    del rec[key]
    with pytest.raises(InvalidRecord):
        r.validate_record(rec)


def test_validate_checks_the_id_against_the_name() -> None:
    assert r.validate_record(record(), "job-1")["id"] == "job-1"
    with pytest.raises(InvalidRecord, match="does not match"):
        r.validate_record(record(), "job-2")


@pytest.mark.parametrize(
    "fields",
    [
        {"attempts": "three"},
        {"attempts": None},
        {"attempts": -1},
        {"updated_at": 17},
        {"updated_at": None},
        {"updated_at": "9999-01-01T00:00:00"},
        {"not_before": "soon"},
        {"history": "lost"},
        {"max_attempts": "x"},
        {"rescues": None},
        {"checkpoint": None},
        {"extra_field": {"future": True}},
    ],
)
def test_validate_is_lenient_on_policy_fields(fields: dict[str, Any]) -> None:
    """The policy reads these safely; a hand-edit must not make the record corrupt."""
    rec = record(**fields)
    assert r.validate_record(rec) is rec
    assert r.decode(r.encode(rec)) == rec


@pytest.mark.parametrize("status", list(JobStatus))
def test_every_state_is_valid(status: str) -> None:
    assert r.validate_record(record(status=status))["status"] == status


# --------------------------------------------------------------------------- bytes


def test_encode_is_compact_utf8_json_and_round_trips() -> None:
    rec = record(payload={"name": "Zoë ☃", "n": [1, 2.5, None, True]})
    data = r.encode(rec)
    assert isinstance(data, bytes)
    assert b": " not in data and b", " not in data
    assert "Zoë ☃".encode() in data
    assert json.loads(data) == rec
    assert r.decode(data, "job-1") == rec


def test_encode_refuses_what_is_not_a_record() -> None:
    with pytest.raises(InvalidRecord):
        r.encode(record(status="nope"))
    with pytest.raises(InvalidRecord, match="plain JSON"):
        r.encode(record(result={"x": float("inf")}))
    with pytest.raises(InvalidRecord, match="plain JSON"):
        r.encode(record(result={"x": {1, 2}}))
    with pytest.raises(InvalidRecord, match="Unicode"):
        r.encode(record(result={"x": "\ud800"}))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xfe{}", "UTF-8"),
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"null", "JSON object"),
        (b"[]", "JSON object"),
        (b"{}", "schema"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    ],
)
def test_decode_refuses_bad_bytes(data: bytes, match: str) -> None:
    with pytest.raises(InvalidRecord, match=match):
        r.decode(data)


@pytest.mark.parametrize("data", ["{}", 5, None])
def test_decode_refuses_non_bytes(data: object) -> None:
    with pytest.raises(InvalidRecord, match="bytes"):
        r.decode(data)  # type: ignore[arg-type]


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = r.encode(record())
    assert r.decode(bytearray(data)) == r.decode(memoryview(data)) == record()


def test_decode_checks_the_name() -> None:
    with pytest.raises(InvalidRecord, match="does not match"):
        r.decode(r.encode(record()), "other")


@pytest.mark.parametrize("module", [r, q])
def test_policy_modules_import_only_the_stdlib(module: Any) -> None:
    """No cloud import: the policy must stay testable anywhere."""
    with open(module.__file__, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert roots, "expected some imports"
    assert roots <= set(sys.stdlib_module_names) | {"__future__", "shared"}


# ------------------------------------------------------------------ plain JSON (issue 16)


@pytest.mark.parametrize(
    ("value", "depth", "problem"),
    [
        ({"a": [1, {"b": float("inf")}]}, 5, "p.a[1].b holds a number outside the range"),
        ({"a": float("nan")}, 5, "p.a holds a number outside the range"),
        ({"a": 10**400}, 5, "p.a holds a number outside the range of a double (1329 bits)"),
        ({"a": {"b": {}}}, 2, "p.a.b is nested more than 2 levels deep"),
        ([[[]]], 2, "p[0][0] is nested more than 2 levels deep"),
        ({1: 2}, 3, "p has a key that is not a string (1)"),
        ({"x": (1,)}, 3, "p.x holds tuple, which is not JSON"),
        (object(), 3, "p holds object, which is not JSON"),
    ],
)
def test_json_problem_names_what_and_where(value: Any, depth: int, problem: str) -> None:
    found = records.json_problem(value, depth, "p")
    assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        ({"a": {"b": 1}}, 2),
        ([[[]]], 3),
        ({"n": 1.7976931348623157e308, "m": -(2**1023), "z": -0.0, "s": "x", "t": True}, 1),
        (None, 1),
        ("text", 1),
    ],
)
def test_json_problem_passes_plain_json(value: Any, depth: int) -> None:
    assert records.json_problem(value, depth) is None


def test_a_record_with_a_number_beyond_a_double_is_corrupt_not_infinite() -> None:
    record = records.new_record("j1", "demo", {}, datetime(2026, 1, 1, tzinfo=UTC))
    text = records.encode(record).replace(b'"payload":{}', b'"payload":{"x":1e400}')
    with pytest.raises(records.InvalidRecord, match="outside the range of a double"):
        records.decode(text, "j1")
    with pytest.raises(records.InvalidRecord, match="outside the range of a double"):
        records.encode({**record, "payload": {"x": float("inf")}})
