"""shared.tracing: W3C traceparent parsing, child spans, Cloud Logging's trace fields."""

from __future__ import annotations

import pytest

from shared import tracing

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_header_is_read() -> None:
    ctx = tracing.parse(VALID)
    assert ctx == tracing.TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)
    assert ctx.traceparent == VALID
    assert tracing.parse(VALID[:-2] + "00").sampled is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        42,
        "garbage",
        VALID.upper(),  # the spec's hex is lowercase
        "ff" + VALID[2:],  # version ff is forbidden
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        VALID + "-extra",  # version 00 has exactly four fields
        VALID[:-1],
    ],
)
def test_an_invalid_header_is_ignored(value: object) -> None:
    assert tracing.parse(value) is None


def test_a_future_version_is_read_by_its_first_four_fields() -> None:
    assert tracing.parse("01" + VALID[2:] + "-what-comes-next") is not None
    assert tracing.parse("01" + VALID[2:] + "x") is None


def test_a_job_is_a_trace_of_its_own_and_the_request_trace_is_only_named() -> None:
    """Cloud Run sets a traceparent on every request: a child of it would put a whole
    batch in one trace."""
    one, other = tracing.for_job(), tracing.for_job()
    assert one.trace_id != other.trace_id != "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.parse(one.traceparent) == one
    assert tracing.trace_id(VALID) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.trace_id("nonsense") is None and tracing.trace_id(None) is None


def test_log_fields_name_the_trace_resource_of_the_project() -> None:
    assert tracing.log_fields(VALID, "proj") == {
        "logging.googleapis.com/trace": "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736",
        "logging.googleapis.com/spanId": "00f067aa0ba902b7",
        "logging.googleapis.com/trace_sampled": True,
    }
    assert tracing.log_fields("bad", "proj") == {}
    assert tracing.log_fields(VALID, None) == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
    }
