"""The job record: schema, ids, and the bytes it is stored as. Pure (stdlib only).

Strict where a mistake would corrupt routing or storage (schema, id, pipeline,
status, payload); lenient on the policy fields (attempts, timestamps, history)
because shared.job_queue already reads hand-edited values safely, and a record
with a typo in `attempts` must be recoverable by the policy, not reported as
corrupt and left for a person.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from datetime import datetime
from typing import Any, cast

from shared import tracing
from shared.errors import InvalidInput, InvalidRecord
from shared.jobs import MAX_ATTEMPTS_LIMIT, JobRecord, JobStatus, JsonObject, format_time

SCHEMA_VERSION = 1
ID_MAX_LEN = 128
# Containers nested in a payload, the payload object being level 1 (documented in
# the OpenAPI document): far below what Python's recursion can take (deepcopy and
# the encoder spend a frame or two per level), far above what a real payload needs.
MAX_PAYLOAD_DEPTH = 32
# A whole record: the payload sits at level 2, a stage's state at level 3.
MAX_RECORD_DEPTH = 2 * MAX_PAYLOAD_DEPTH
# The largest finite double: JSON numbers beyond it become inf in most parsers
# (RFC 8259 section 6), and inf cannot be written back as JSON.
_DOUBLE_MAX = sys.float_info.max

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_STATUSES = frozenset(JobStatus)


# --------------------------------------------------------------------------- ids


def validate_job_id(value: object, what: str = "job id") -> str:
    """The id itself, when it is safe as an object name segment; else InvalidInput."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}", what)
    if not value:
        raise InvalidInput(f"{what} must not be empty", what)
    shown = value if len(value) <= 40 else value[:40] + "..."
    if len(value) > ID_MAX_LEN:
        raise InvalidInput(f"{what} {shown!r} is too long: at most {ID_MAX_LEN} characters", what)
    if not _ID.fullmatch(value):
        raise InvalidInput(
            f"{what} {shown!r} is invalid: only letters, digits, '.', '_' and '-' are allowed"
            f" (max {ID_MAX_LEN}), starting with a letter or digit",
            what,
        )
    if ".." in value:
        raise InvalidInput(f"{what} {shown!r} is invalid: it must not contain '..'", what)
    return value


def validate_batch_id(value: object) -> str:
    return validate_job_id(value, "batch id")


def new_job_id() -> str:
    """Random, so ids are not sequential (GCS spreads load by object name)."""
    return uuid.uuid4().hex


def upload_job_id(bucket: str, name: str, generation: int | str) -> str:
    """Deterministic per uploaded object version: a redelivered event finds its job."""
    key = f"{bucket}\n{name}\n{generation}".encode()
    return "up-" + hashlib.sha256(key).hexdigest()[:40]


# --------------------------------------------------------------------------- plain JSON


def json_problem(value: object, max_depth: int, where: str = "value") -> str | None:
    """Why `value` is not plain JSON that every reader keeps as is, or None.

    Plain: objects with string keys, lists, strings, booleans, null, and numbers
    within the double range, nested at most `max_depth` containers deep. Walked
    without recursion, so no depth can exhaust the stack here; the path to the
    problem is only worked out once there is one (the common case stays cheap).
    """
    if _is_plain(value, max_depth):
        return None
    return _explain(value, max_depth, where)


_SCALARS = (str, bool, type(None))


def _is_plain(value: object, max_depth: int) -> bool:
    """The fast walk: scalars are checked in place, only containers are stacked."""
    stack: list[tuple[object, int]] = [({"": value}, 0)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return False
        if isinstance(container, dict):
            if not all(type(k) is str for k in container):
                return False
            items: Any = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind is str or kind is bool or item is None:
                continue
            if kind is dict or kind is list or isinstance(item, dict | list):
                stack.append((item, depth + 1))
            elif not _plain_scalar(item):
                return False
    return True


def _plain_scalar(item: object) -> bool:
    if isinstance(item, float | int):  # bool never gets here
        return abs(item) <= _DOUBLE_MAX  # False for inf, nan and integers beyond a double
    return isinstance(item, str)


def _explain(value: object, max_depth: int, where: str) -> str:
    """The first problem _is_plain found, with its path (the slow walk, on failure only)."""
    stack: list[tuple[object, int, str]] = [(value, 1, where)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return f"{path} is nested more than {max_depth} levels deep"
            if isinstance(item, list):
                stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(item))
                continue
            for key, v in item.items():
                if not isinstance(key, str):
                    return f"{path} has a key that is not a string ({key!r})"
                stack.append((v, depth + 1, f"{path}.{key[:40]}"))
        elif isinstance(item, float | int) and not isinstance(item, bool):
            if not abs(item) <= _DOUBLE_MAX:
                shown = repr(item) if isinstance(item, float) else f"{item.bit_length()} bits"
                return f"{path} holds a number outside the range of a double ({shown})"
        elif not isinstance(item, _SCALARS):
            return f"{path} holds {type(item).__name__}, which is not JSON"
    return f"{where} is not plain JSON"


# --------------------------------------------------------------------------- records


def new_record(
    job_id: str,
    pipeline: str,
    payload: JsonObject,
    now: datetime,
    *,
    batch_id: str | None = None,
    client_id: str | None = None,
    max_attempts: int | None = None,
    source: JsonObject | None = None,
    traceparent: str | None = None,
    submit_traceparent: str | None = None,
) -> JobRecord:
    """A fresh schema-1 record, queued with no attempts; raises InvalidInput.

    `traceparent` (shared.tracing) is the job's trace context; a record without
    one (written before traces existed) is still a valid schema-1 record.
    `submit_traceparent`, the submit request's, is kept only when valid (a link)."""
    validate_job_id(job_id)
    validate_job_id(pipeline, "pipeline")
    if batch_id is not None:
        validate_batch_id(batch_id)
    if client_id is not None:
        validate_job_id(client_id, "client id")
    if not isinstance(payload, dict):
        raise InvalidInput(
            f"payload must be a JSON object, not {type(payload).__name__}", "payload"
        )
    if max_attempts is not None and not (
        type(max_attempts) is int and 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidInput(
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}", "max_attempts"
        )
    if source is not None and not isinstance(source, dict):
        raise InvalidInput(f"source must be an object, not {type(source).__name__}", "source")
    if traceparent is not None and tracing.parse(traceparent) is None:
        raise InvalidInput(f"traceparent {traceparent!r} is not a W3C traceparent", "traceparent")
    at = format_time(now)
    record: JobRecord = {
        "schema": SCHEMA_VERSION,
        "id": job_id,
        "pipeline": pipeline,
        "payload": payload,
        "batch_id": batch_id,
        "client_id": client_id,
        "source": source,
        "status": JobStatus.QUEUED,
        "stage": None,
        "attempts": 0,
        "max_attempts": max_attempts,
        "owner": None,
        "created_at": at,
        "updated_at": at,
        "not_before": None,
        "rescues": 0,
        "checkpoint": {"next_stage": 0, "state": {}},
        "result": None,
        "error": None,
        "history": [{"at": at, "event": "submitted"}],
    }
    if traceparent is not None:
        record["traceparent"] = traceparent
    link = tracing.parse(submit_traceparent)
    if link is not None:
        record["submit_traceparent"] = link.traceparent
    try:
        _dumps(record)
    except InvalidRecord as exc:
        raise InvalidInput(f"payload is not plain JSON: {exc.reason}", "payload") from None
    return record


def validate_record(obj: object, job_id: str | None = None) -> JobRecord:
    """`obj` itself when it is a usable record; InvalidRecord says why not."""
    if not isinstance(obj, dict):
        raise InvalidRecord(f"record must be a JSON object, not {type(obj).__name__}")
    schema = obj.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise InvalidRecord(f"unsupported schema {schema!r} (expected {SCHEMA_VERSION})")
    record_id = obj.get("id")
    try:
        validate_job_id(record_id)
    except InvalidInput as exc:
        raise InvalidRecord(f"bad id: {exc.reason}") from None
    if job_id is not None and record_id != job_id:
        raise InvalidRecord(f"record id {record_id!r} does not match its name {job_id!r}")
    pipeline = obj.get("pipeline")
    if not isinstance(pipeline, str) or not pipeline:
        raise InvalidRecord(f"pipeline must be a non-empty string, not {pipeline!r}")
    status = obj.get("status")
    if not isinstance(status, str) or status not in _STATUSES:
        raise InvalidRecord(f"unknown status {status!r} (known: {', '.join(JobStatus)})")
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        raise InvalidRecord(f"payload must be an object, not {type(payload).__name__}")
    return cast(JobRecord, obj)


def encode(record: JobRecord) -> bytes:
    """Compact UTF-8 JSON of a valid record (never writes junk)."""
    return _dumps(validate_record(record))


def decode(data: bytes | bytearray | memoryview, job_id: str | None = None) -> JobRecord:
    """A validated record from stored bytes (its status a JobStatus); InvalidRecord on
    anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidRecord(f"record data must be bytes, not {type(data).__name__}")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"record is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidRecord("record JSON is nested too deeply") from None
    except ValueError as exc:
        raise InvalidRecord(f"record is not JSON: {exc}") from None
    problem = json_problem(obj, MAX_RECORD_DEPTH, "record")
    if problem is not None:  # e.g. 1e400, read as inf: it could never be written back
        raise InvalidRecord(problem)
    record = validate_record(obj, job_id)
    record["status"] = JobStatus(record["status"])
    return record


def _reject_constant(name: str) -> Any:
    """NaN/Infinity are not JSON: such a record could never be written back."""
    raise ValueError(f"{name} is not a JSON value")


def _dumps(record: JobRecord) -> bytes:
    problem = json_problem(record, MAX_RECORD_DEPTH, "record")
    if problem is not None:  # what decode would refuse is never written
        raise InvalidRecord(f"record is not plain JSON: {problem}")
    try:
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidRecord(f"record is not plain JSON: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a hand-built string
        raise InvalidRecord("record has text that is not valid Unicode") from None
