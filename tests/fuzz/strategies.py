"""Hypothesis strategies for hostile input: JSON text (not Python values, so that
literals such as 1e400 survive to the parser), records, push envelopes and odd
object names.

Why text: Python's json never writes a number outside the double range (it writes
`Infinity`, which parsers refuse), but a client or a hand edit can, and the
parser then turns 1e400 into inf. Only text reaches that path.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from shared import records

# Numbers at the edges of the double range, as a JSON parser meets them.
EDGE_NUMBERS = (
    "1e400",
    "-1e400",
    "1E+999",
    "2e308",
    "1.7976931348623159e308",  # rounds past the largest double: inf
    "1.7976931348623157e308",  # the largest double: fine
    "-1.7976931348623157e308",
    "5e-324",
    "1e-400",  # underflows to 0.0: fine
    "-0.0",
    "9007199254740993",
    "1" + "0" * 309,  # an integer beyond the double range
    "-" + "9" * 400,
)

_scalar_text = st.one_of(
    st.sampled_from(("null", "true", "false")),
    st.sampled_from(EDGE_NUMBERS),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=12).map(lambda s: json.dumps(s)),
)


def _array(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def _object(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs.items()) + "}"


json_text = st.recursive(
    _scalar_text,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(_array),
        st.dictionaries(st.text(max_size=8), inner, max_size=4).map(_object),
    ),
    max_leaves=10,
)


@st.composite
def deep_text(draw: Any, min_depth: int = 20, max_depth: int = 1500) -> str:
    """Containers nested `depth` levels, around any small JSON value."""
    depth = draw(st.integers(min_value=min_depth, max_value=max_depth))
    kind = draw(st.sampled_from(("list", "object", "mixed")))
    inner = draw(_scalar_text)
    opens, closes = [], []
    for i in range(depth):
        as_list = kind == "list" or (kind == "mixed" and i % 2 == 0)
        opens.append("[" if as_list else '{"k":')
        closes.append("]" if as_list else "}")
    return "".join(opens) + inner + "".join(reversed(closes))


any_json_text = st.one_of(json_text, deep_text())


def object_text(values: st.SearchStrategy[str] = json_text) -> st.SearchStrategy[str]:
    """A JSON object (as text) with arbitrary keys and values."""
    return st.dictionaries(st.text(max_size=8), values, max_size=4).map(_object)


def nest(inner: str, depth: int) -> str:
    """`inner` wrapped in `depth` objects: {"a":{"a":...inner...}}."""
    return '{"a":' * depth + inner + "}" * depth


# ----------------------------------------------------------------- records

RECORD_FIELDS = (
    "schema",
    "id",
    "pipeline",
    "payload",
    "batch_id",
    "client_id",
    "source",
    "status",
    "stage",
    "attempts",
    "max_attempts",
    "owner",
    "created_at",
    "updated_at",
    "not_before",
    "rescues",
    "checkpoint",
    "result",
    "error",
    "history",
    "outputs",
    "history_dropped",
    "write_id",
    "traceparent",
)
STATUS_TEXT = st.sampled_from(
    [json.dumps(s) for s in ("queued", "running", "done", "failed", "cancelled")]
)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# A trace context as a hand edit or another client might leave it (shared.tracing).
traceparent_text = st.one_of(
    st.just(json.dumps(TRACEPARENT)),
    st.sampled_from(
        ("00-" + "0" * 32 + "-" + "0" * 16 + "-01", "ff-" + TRACEPARENT[3:], "00-x")
    ).map(json.dumps),
    st.text(max_size=60).map(json.dumps),
)

# Payload keys that would make the demo pipeline sleep or fail on purpose: a hostile
# record must not turn a fuzz run into a long one.
SLOW_KEYS = ("sleep_s", "fail_at", "block")


def base_record(job_id: str, status: str = "queued") -> dict[str, Any]:
    """A valid record, the starting point every hostile one is carved from."""
    record = records.new_record(
        job_id,
        "demo",
        {"stages": 1},
        datetime(2026, 1, 1, tzinfo=UTC),
        batch_id="fuzz-batch",
        traceparent=TRACEPARENT,
    )
    record["status"] = status
    return record


@st.composite
def hostile_record(draw: Any, job_id: str) -> bytes:
    """The bytes of a record: a valid one with some fields replaced by arbitrary JSON
    (edge numbers and deep nesting included), or no record shape at all."""
    shape = draw(st.sampled_from(("fields", "fields", "fields", "garbage", "deep")))
    if shape == "garbage":
        return draw(st.one_of(st.binary(max_size=64), any_json_text.map(str.encode)))
    status = draw(st.sampled_from(("queued", "running", "done", "failed", "cancelled")))
    fields = {k: json.dumps(v) for k, v in base_record(job_id, status).items()}
    if shape == "deep":
        where = draw(st.sampled_from(("payload", "result", "checkpoint", "history", "error")))
        fields[where] = draw(deep_text(min_depth=20, max_depth=1200))
    replaced = draw(st.lists(st.sampled_from(RECORD_FIELDS), max_size=5, unique=True))
    for key in replaced:
        if key == "status":
            fields[key] = draw(st.one_of(STATUS_TEXT, any_json_text))
        elif key == "traceparent":
            fields[key] = draw(st.one_of(traceparent_text, any_json_text))
        elif key == "payload":
            fields[key] = draw(st.one_of(object_text(any_json_text), any_json_text))
        else:
            fields[key] = draw(any_json_text)
    for key in draw(st.lists(st.sampled_from(RECORD_FIELDS), max_size=2, unique=True)):
        fields.pop(key, None)
    extra = draw(st.dictionaries(st.text(max_size=6), json_text, max_size=2))
    for key, value in extra.items():
        fields.setdefault(key, value)
    return _object(fields).encode()


def record_text(record: dict[str, Any], **replace: str) -> bytes:
    """A record as JSON text with some fields replaced by raw JSON text (a hand edit
    can hold what Python's json would never write, such as 1e400)."""
    fields = {k: json.dumps(v) for k, v in record.items()}
    fields.update(replace)
    return _object(fields).encode()


def is_quick(data: bytes) -> bool:
    """False for a record whose demo payload would sleep or fail on purpose."""
    text = data.decode("utf-8", "replace")
    return not any(f'"{key}"' in text for key in SLOW_KEYS)


# ----------------------------------------------------------------- object names

ODD_SEGMENTS = (
    "has space",
    "..",
    "a..b",
    "-lead",
    ".hidden",
    "ünïcode",
    "x" * 200,
    "%2e%2e",
    "a/b",
    "semi;colon",
    "q?x=1",
    "hash#tag",
    "tab\tin",
    "emoji-😀",
)
odd_segment = st.one_of(
    st.sampled_from(ODD_SEGMENTS),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc")),
        min_size=1,
        max_size=30,
    ),
)


# ----------------------------------------------------------------- push envelopes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@st.composite
def push_envelope(draw: Any, job_ids: list[str]) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a Pub/Sub push or a binary CloudEvent, valid or hostile in
    any field; the job id is one of `job_ids`, an odd one, or arbitrary JSON."""
    job_id = draw(
        st.one_of(
            st.sampled_from(job_ids).map(json.dumps),
            odd_segment.map(json.dumps),
            json_text,
        )
    )
    data_text = draw(
        st.one_of(
            st.just('{"job_id":' + job_id + "}"),
            object_text(),
            json_text,
        )
    )
    data = draw(st.one_of(st.just(_b64(data_text.encode())), st.text(max_size=20).map(json.dumps)))
    attributes = draw(
        st.one_of(
            st.just('{"job_id":' + job_id + "}"),
            traceparent_text.map(lambda t: '{"job_id":' + job_id + ',"traceparent":' + t + "}"),
            object_text(),
            json_text,
        )
    )
    message = {
        "data": json.dumps(data) if not data.startswith('"') else data,
        "attributes": attributes,
        "messageId": json.dumps("m-1"),
        "publishTime": json.dumps("2026-01-01T00:00:00Z"),
    }
    for key in draw(st.lists(st.sampled_from(sorted(message)), max_size=2, unique=True)):
        message[key] = draw(json_text)
    envelope = {
        "message": _object(message),
        "subscription": json.dumps("projects/p/subscriptions/reclaim-claim"),
    }
    if draw(st.booleans()):
        envelope["message"] = draw(any_json_text)
    if draw(st.integers(0, 9)) == 0:  # a binary CloudEvent instead of a raw push
        headers = {
            "ce-id": "1",
            "ce-source": "//pubsub.googleapis.com/projects/p/topics/t",
            "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
            "ce-specversion": draw(st.sampled_from(("1.0", "0.3", "9"))),
            "Content-Type": "application/json",
        }
        return _object(envelope).encode(), headers
    return _object(envelope).encode(), {"Content-Type": "application/json"}


# ----------------------------------------------------------------- time and key fields
# What an outside attack on time found (big integers, lone surrogates, the calendar's
# edges): generated for every time field and key field of the OpenAPI document and for
# the tick header (tests/fuzz/test_time_keys_hostile.py).

big_integer_text = st.one_of(
    st.integers(min_value=2**1024).map(str),  # beyond the double range: no float holds it
    st.integers(max_value=-(2**1024)).map(str),
    st.integers(min_value=309, max_value=4000).map(lambda n: "1" + "0" * n),
)
"""An integer literal a JSON parser keeps exact but cannot turn into a double."""

seconds_text = st.one_of(big_integer_text, st.sampled_from(EDGE_NUMBERS), _scalar_text)


def _with_surrogate(text: str, surrogate: str, at: int) -> str:
    at = min(at, len(text))
    return text[:at] + surrogate + text[at:]


lone_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
surrogate_text = st.builds(
    _with_surrogate, st.text(max_size=20), lone_surrogate, st.integers(0, 20)
).map(json.dumps)
"""A JSON string holding a lone surrogate ("\\ud800"): valid JSON text, not valid
Unicode; json.dumps writes it as an escape, as a hostile client would."""

CALENDAR_EDGES = (
    "9999-12-31T23:07:00Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-14:00",  # past year 9999 in UTC
    "9999-12-31T00:00:00+14:00",
    "0001-01-01T00:07:00Z",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
    "0001-01-01T23:59:59-14:00",
)


@st.composite
def calendar_edge(draw: Any) -> str:
    """A zoned timestamp within a few days of year 1's start or year 9999's end, with
    any whole-minute offset a timestamp may carry (RFC 3339: up to +-23:59)."""
    if draw(st.booleans()):
        return draw(st.sampled_from(CALENDAR_EDGES))
    low = draw(st.booleans())
    day = draw(st.integers(1, 3))
    when = datetime(1, 1, day) if low else datetime(9999, 12, 28 + day)
    when = when.replace(hour=draw(st.integers(0, 23)), minute=draw(st.integers(0, 59)), second=0)
    minutes = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    if minutes == 0 and draw(st.booleans()):
        return when.isoformat() + "Z"
    sign = "+" if minutes >= 0 else "-"
    return f"{when.isoformat()}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


timestamp_text = st.one_of(calendar_edge().map(json.dumps), surrogate_text, _scalar_text)
