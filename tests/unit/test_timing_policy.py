"""The pure time policy (shared.timing and its hook in shared.job_queue), property-tested:
a delayed job is never claimable before its run_at and always after; the submit fields
are validated with reasons; expiry and unique-lock rules; hour buckets bound a listing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import job_queue, records, timing
from shared.shards import TIME_INDEX_FANOUT, fanout_slots

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
offsets = st.floats(min_value=-timing.MAX_DELAY_S, max_value=timing.MAX_DELAY_S)


def record(**fields: Any) -> dict[str, Any]:
    return {**records.new_record("j1", "demo", {}, NOW - timedelta(hours=1)), **fields}


@given(offset=offsets, later=st.floats(min_value=0, max_value=3600))
def test_a_delayed_job_is_never_claimable_before_run_at_and_always_after(
    offset: float, later: float
) -> None:
    run_at = NOW + timedelta(seconds=offset)
    job = record(run_at=run_at.isoformat())
    before = run_at - timedelta(seconds=0.001)
    assert not job_queue.claimable(job, before, 30, 3)  # type: ignore[arg-type]
    assert job_queue.claimable(job, run_at + timedelta(seconds=later), 30, 3)  # type: ignore[arg-type]


@given(offset=st.floats(min_value=1, max_value=timing.MAX_DELAY_S))
def test_a_waiting_delayed_job_is_never_stale(offset: float) -> None:
    job = record(run_at=(NOW + timedelta(seconds=offset)).isoformat())
    assert job_queue.stale_action(job, NOW, 30, 3) is None  # type: ignore[arg-type]


def test_a_run_at_beyond_the_maximum_is_not_believed() -> None:
    far = NOW + timedelta(seconds=timing.MAX_DELAY_S + 3600)
    assert job_queue.claimable(record(run_at=far.isoformat()), NOW, 30, 3)  # type: ignore[arg-type]


@given(seconds=st.floats(min_value=0, max_value=timing.MAX_DELAY_S))
def test_delay_seconds_resolves_to_a_run_at_that_far_ahead(seconds: float) -> None:
    problems: list[str] = []
    spec = timing.parse_fields({"delay_seconds": seconds}, "", problems)
    fields, more = timing.resolve(spec, NOW)
    assert problems == [] and more == []
    if seconds > 0:
        assert datetime.fromisoformat(fields["run_at"]) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"run_at": "2026-06-01T12:00:00"}, "no time zone"),
        ({"run_at": "2026-06-01"}, "no time zone"),
        ({"run_at": "tomorrow"}, "not an RFC 3339"),
        ({"run_at": "2026-06-01T12:00:00Z", "delay_seconds": 5}, "not both"),
        ({"delay_seconds": timing.MAX_DELAY_S + 1}, "delay_seconds must be from"),
        ({"delay_seconds": -1}, "delay_seconds must be from"),
        ({"delay_seconds": True}, "a number of seconds"),
        ({"ttl_seconds": -5}, "ttl_seconds must be from"),
        ({"ttl_seconds": 5, "expires_at": "2026-06-02T00:00:00Z"}, "not both"),
        ({"timeout_seconds": 0}, "timeout_seconds must be from"),
        ({"unique_key": ""}, "unique_key must be"),
        ({"unique_for_seconds": 10}, "needs a unique_key"),
        ({"delay_seconds": 10, "ttl_seconds": 10}, "ttl_seconds must exceed"),
        (
            {"run_at": "2026-06-02T00:00:00Z", "expires_at": "2026-06-01T23:00:00+00:00"},
            "expires_at must be after run_at",
        ),
    ],
)
def test_bad_time_fields_are_refused_with_a_reason(fields: dict[str, Any], reason: str) -> None:
    problems: list[str] = []
    timing.parse_fields(fields, "", problems)
    assert any(reason in p for p in problems), problems


def test_resolve_refuses_what_needs_the_clock() -> None:
    far = timing.parse_fields({"run_at": (NOW + timedelta(days=31)).isoformat()}, "", [])
    assert "days ahead" in timing.resolve(far, NOW)[1][0]
    late = timing.parse_fields(
        {"run_at": (NOW + timedelta(hours=2)).isoformat(), "ttl_seconds": 3600}, "", []
    )
    assert "could never run" in timing.resolve(late, NOW)[1][0]


def test_a_run_at_in_the_past_runs_now_and_is_kept() -> None:
    spec = timing.parse_fields({"run_at": "2020-01-01T00:00:00+02:00"}, "", [])
    fields, problems = timing.resolve(spec, NOW)
    assert problems == [] and fields["run_at"] == "2019-12-31T22:00:00+00:00"
    assert job_queue.claimable(record(**fields), NOW, 30, 3)  # type: ignore[arg-type]


@given(zone_h=st.integers(min_value=-12, max_value=14), minute=st.integers(0, 59))
def test_zoned_timestamps_are_read_as_the_same_instant(zone_h: int, minute: int) -> None:
    text = f"2026-06-01T10:{minute:02d}:00{zone_h:+03d}:00"
    assert timing.parse_zoned(text, "t") == datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:03+03:00", "9999-12-31T23:59:59-03:00"])
def test_a_time_whose_offset_leaves_the_calendar_is_a_reason_not_a_crash(text: str) -> None:
    # found by schemathesis (tests/fuzz/test_submit_api.py): astimezone raised
    # OverflowError, and submit answered 500
    with pytest.raises(ValueError, match="outside the years 1 to 9999"):
        timing.parse_zoned(text, "run_at")
    problems: list[str] = []
    timing.parse_fields({"run_at": text}, "", problems)
    assert problems and "outside the years" in problems[0]
    # as stored (a hand edit): unreadable, not an exception
    assert timing.read_time(text) is None
    assert timing.expired(record(expires_at=text), NOW) is False


@given(age=st.integers(min_value=-7200, max_value=7200), attempts=st.integers(0, 3))
def test_expired_only_when_queued_never_started_and_past_expiry(age: int, attempts: int) -> None:
    expires = NOW - timedelta(seconds=age)
    job = record(expires_at=expires.isoformat(), attempts=attempts)
    assert timing.expired(job, NOW) == (age >= 0 and attempts == 0)
    assert not timing.expired(record(status="running", expires_at=expires.isoformat()), NOW)


def test_expire_fields_cancel_with_an_expired_error() -> None:
    job = record(expires_at=NOW.isoformat())
    new = {**job, **job_queue.expire_fields(job, NOW)}  # type: ignore[arg-type]
    assert new["status"] == "cancelled" and new["error"]["type"] == "Expired"
    assert "never ran" in new["error"]["message"] and new["history"][-1]["by"] == "expiry"


@given(
    run_at=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
    now=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
)
def test_a_due_jobs_bucket_is_inside_the_listing_and_a_later_hours_is_not(
    run_at: datetime, now: datetime
) -> None:
    ranges = timing.scheduled_ranges(now)
    for job_id in ("j1", "order-0001", "order-0002", "order-0003"):
        # the entry as written now, and as written before the fan-out: each is in exactly
        # one listing while due, in none before its hour
        for name in (
            timing.scheduled_name(job_id, run_at),
            timing.legacy_scheduled_name(job_id, run_at),
        ):
            hits = [p for p, end in ranges if name.startswith(p) and name < end]
            assert len(hits) == (run_at.replace(minute=0, second=0, microsecond=0) <= now)
            if run_at <= now:
                assert hits  # every due job is listed


def test_sequential_ids_of_one_hour_spread_over_every_slot() -> None:
    names = {timing.scheduled_name(f"order-{i:04d}", NOW) for i in range(200)}
    slots = {n.split("/")[1] for n in names}
    assert slots == set(fanout_slots()) and len(slots) == TIME_INDEX_FANOUT > 1


@given(
    until=st.one_of(st.none(), st.integers(min_value=-3600, max_value=3600)),
    status=st.sampled_from([None, "waiting", "queued", "running", "done", "failed", "cancelled"]),
    age=st.floats(min_value=0, max_value=3600),
)
def test_a_unique_lock_never_blocks_forever(
    until: int | None, status: str | None, age: float
) -> None:
    lock = timing.lock_data(
        "j1",
        "k",
        None if until is None else (NOW + timedelta(seconds=until)).isoformat(),
        NOW - timedelta(seconds=age),
    )
    holds = timing.lock_holds(lock, status, NOW, grace_s=120)
    if until is not None and until <= 0:
        assert not holds  # the window is over
    if status is None and age > 120:
        assert not holds  # a crash between lock and record, past the grace
    if until is None and status in ("done", "failed", "cancelled"):
        assert not holds  # "while pending" and the holder ended
    if status in ("waiting", "queued", "running") and (until is None or until > 0):
        assert holds  # a holder waiting for its parents is pending too


@given(
    value=st.one_of(
        st.integers(min_value=2**1024), st.integers(max_value=-(2**1024)), st.integers()
    )
)
def test_any_integer_is_read_as_seconds_or_refused_never_an_overflow(value: int) -> None:
    problems: list[str] = []
    spec = timing.parse_fields({"delay_seconds": value}, "", problems)
    assert (spec.delay_s is not None) and bool(problems) == (not 0 <= value <= timing.MAX_DELAY_S)
    assert timing.timeout_of({"timeout_seconds": value}, 7.0) == (
        float(value) if 0 < value <= timing.MAX_TIMEOUT_S else 7.0
    )


@pytest.mark.parametrize("key", ["\ud800", "a\udfffb", "bytes-\udcff"])
def test_a_key_that_is_not_valid_unicode_is_a_reason(key: str) -> None:
    problems: list[str] = []
    timing.parse_fields({"unique_key": key}, "jobs[1].", problems)
    assert problems == [
        "jobs[1].unique_key has text that is not valid Unicode (a lone surrogate or a byte"
        " that is not UTF-8)"
    ]
    with pytest.raises(ValueError, match="not valid Unicode"):
        timing.unique_lock_name(key)


def test_tick_job_ids_are_valid_and_one_per_tick() -> None:
    a = timing.tick_job_id("nightly", datetime(2026, 6, 1, 3, 0, tzinfo=UTC))
    b = timing.tick_job_id("nightly", datetime(2026, 6, 1, 5, 0, tzinfo=timing.UTC))
    assert records.validate_job_id(a) == "cron-nightly-20260601T030000Z" and a != b
