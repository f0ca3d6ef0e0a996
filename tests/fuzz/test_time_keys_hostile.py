"""Every time field and key field of the OpenAPI document, and the cron tick header,
attacked with what an outside attack found: integers beyond the double range, lone
surrogates, and timestamps at the calendar's edges (tests/fuzz/strategies.py), over HTTP
against the submit function on fake-gcs-server.

A big integer or a surrogate is always a 400 with a reason, and a batch holding one is
refused whole; a calendar edge is refused or accepted as docs/time.md says; a tick at a
calendar edge or far in the future is a 400. A refused request writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.fuzz_support import Functions, functions, fuzz
from tests.fuzz.openapi_support import document, resolve, validate_answer
from tests.fuzz.strategies import (
    big_integer_text,
    calendar_edge,
    seconds_text,
    surrogate_text,
    timestamp_text,
)

SCHEDULES = {
    "schedules": [
        {"name": "utc", "cron": "* * * * *", "time_zone": "UTC", "pipeline": "demo"},
        {
            "name": "east",
            "cron": "7 * * * *",
            "time_zone": "Pacific/Kiritimati",
            "pipeline": "demo",
        },
        {"name": "west", "cron": "7 * * * *", "time_zone": "Pacific/Pago_Pago", "pipeline": "demo"},
    ]
}


def _job_fields() -> dict[str, Any]:
    return dict(resolve(document()["components"]["schemas"]["JobRequest"])["properties"])


TIME_FIELDS = sorted(
    k for k, v in _job_fields().items() if v.get("format") == "date-time" or k.endswith("_seconds")
)
"""The document's time fields: its timestamps and its numbers of seconds."""
NUMBER_FIELDS = [k for k in TIME_FIELDS if k.endswith("_seconds")]
KEY_FIELDS = sorted(k for k in _job_fields() if k in ("id", "batch_id") or k.endswith("_key"))
"""The document's key fields: what names a job, a batch, a lock or a limit."""


def test_the_fields_come_from_the_document() -> None:
    """A field renamed or added in the document is attacked too, never silently skipped."""
    assert set(NUMBER_FIELDS) >= {
        "delay_seconds",
        "ttl_seconds",
        "timeout_seconds",
        "unique_for_seconds",
    }
    assert {"run_at", "expires_at"} <= set(TIME_FIELDS)
    assert {"id", "batch_id", "unique_key", "concurrency_key"} <= set(KEY_FIELDS)


@pytest.fixture(scope="module")
def submit_fn(
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    log_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Functions]:
    schedules = tmp_path_factory.mktemp("fuzz-time") / "schedules.json"
    schedules.write_text(json.dumps(SCHEDULES))
    with functions(
        emulator_env,
        gcs_client,
        publisher,
        log_dir,
        (("submit", "submit"),),
        {"RECLAIM_STALE_SECONDS": "600", "RECLAIM_SCHEDULES_FILE": str(schedules)},
    ) as fns:
        yield fns


def _post(fns: Functions, body: str) -> requests.Response:
    return requests.post(
        f"{fns.urls['submit']}/jobs",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )


def _job(field: str, text: str, n: int) -> str:
    """A demo job as JSON text with `field` set to raw JSON `text`."""
    fields = {"pipeline": '"demo"'}
    if field == "unique_for_seconds":
        fields["unique_key"] = json.dumps(f"fuzz-window-{n}")
    fields[field] = text
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"


def _check(fns: Functions, body: str, *, must_refuse: bool) -> None:
    before = fns.snapshot()
    response = _post(fns, body)
    assert response.status_code < 500, response.text
    answer = response.json()
    validate_answer("/jobs", "post", response.status_code, answer)
    if must_refuse:
        assert 400 <= response.status_code < 500, response.text
    if response.status_code >= 400:
        assert answer["reason"], answer
        assert fns.snapshot() == before, f"refused ({response.status_code}) yet wrote"


_numbers = st.tuples(st.sampled_from(NUMBER_FIELDS), big_integer_text)


@fuzz(examples=25)
@given(attack=_numbers, alone=st.booleans(), n=st.integers(0, 10**6))
@example(attack=("delay_seconds", "1" + "0" * 400), alone=False, n=0)
@example(attack=("unique_for_seconds", "-" + "9" * 400), alone=True, n=1)
def test_a_big_integer_in_any_time_field_is_refused_whole(
    submit_fn: Functions, attack: tuple[str, str], alone: bool, n: int
) -> None:
    field, text = attack
    job = _job(field, text, n)
    body = (
        job
        if alone
        else '{"jobs":[{"pipeline":"demo","id":"fuzz-fine-' + str(n) + '"},' + job + "]}"
    )
    _check(submit_fn, body, must_refuse=True)


@fuzz(examples=25)
@given(field=st.sampled_from(KEY_FIELDS), text=surrogate_text, alone=st.booleans())
@example(field="unique_key", text='"\\ud800"', alone=False)
def test_a_lone_surrogate_in_any_key_field_is_refused_whole(
    submit_fn: Functions, field: str, text: str, alone: bool
) -> None:
    job = _job(field, text, 0)
    batch = '{"jobs":[{"pipeline":"demo","id":"fuzz-fine-key"},' + job + "]}"
    _check(submit_fn, job if alone else batch, must_refuse=True)


@fuzz(examples=40)
@given(
    field=st.sampled_from(TIME_FIELDS),
    text=st.one_of(timestamp_text, seconds_text),
    n=st.integers(0, 10**6),
)
@example(field="run_at", text='"9999-12-31T23:59:59-14:00"', n=0)
@example(field="expires_at", text='"0001-01-01T00:00:00+14:00"', n=0)
def test_calendar_edges_in_any_time_field_answer_as_documented(
    submit_fn: Functions, field: str, text: str, n: int
) -> None:
    """Refused with a reason and nothing written, or accepted (a run_at in the past runs
    now): never a 5xx."""
    _check(submit_fn, _job(field, text, n), must_refuse=False)


def _far_future(minutes: int) -> str:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return (now + timedelta(days=2, minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


tick_header = st.one_of(
    calendar_edge(),
    st.integers(0, 60 * 24 * 365 * 100).map(_far_future),
)


@fuzz(examples=25)
@given(name=st.sampled_from([s["name"] for s in SCHEDULES["schedules"]]), header=tick_header)
@example(name="utc", header="9999-12-31T23:07:00Z")
@example(name="utc", header="0001-01-01T00:07:00Z")
@example(name="east", header="9999-12-31T23:07:00Z")
@example(name="west", header="0001-01-01T00:07:00Z")
def test_a_tick_at_a_calendar_edge_or_far_ahead_is_refused(
    submit_fn: Functions, name: str, header: str
) -> None:
    before = submit_fn.snapshot()
    response = requests.post(
        f"{submit_fn.urls['submit']}/schedules/{name}/tick",
        headers={"X-CloudScheduler-ScheduleTime": header},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    validate_answer("/schedules/{name}/tick", "post", 400, response.json())
    assert response.json()["reason"]
    assert submit_fn.snapshot() == before
