"""The policy at its edges: boundaries, defaults and messages that mutation testing
(`make mutate`) showed no other test pinned. Pure logic, no services."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import job_queue as q
from shared.job_queue import IllegalTransition

NOW = datetime(2026, 7, 26, 12, 0, 0, tzinfo=UTC)


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "j1", "status": "queued", "attempts": 0, "history": []}
    return {**base, **fields}


# --------------------------------------------------------------------------- messages

BUILDERS = {
    "claim": lambda j: q.claim_fields(j, "o", NOW),
    "heartbeat": lambda j: q.heartbeat_fields(j, NOW),
    "checkpoint": lambda j: q.checkpoint_fields(j, NOW, "s", 1, {}),
    "requeue": lambda j: q.requeue_fields(j, NOW),
    "fail": lambda j: q.fail_fields(j, NOW, {"stage": None}),
    "finish": lambda j: q.done_fields(j, NOW, {}),
    "cancel": lambda j: q.cancel_fields(j, NOW, by="me"),
}


@pytest.mark.parametrize("action", sorted(BUILDERS))
def test_an_illegal_move_names_the_action_and_the_status(action: str) -> None:
    """The CLI prints these words to operators (`illegal transition: cannot ...`)."""
    with pytest.raises(IllegalTransition, match=rf"^cannot {action} a job that is 'done'"):
        BUILDERS[action](job(status="done"))


def test_retry_messages_say_what_is_wrong() -> None:
    with pytest.raises(IllegalTransition, match=r"^cannot retry a job that is 'queued'"):
        q.retry_fields(job(), NOW, by="me", default_max_attempts=3)
    with pytest.raises(IllegalTransition, match=r"^cannot retry: default_max_attempts must be"):
        q.retry_fields(job(status="failed"), NOW, by="me", default_max_attempts=0)
    with pytest.raises(IllegalTransition, match=r"^cannot retry: max_attempts would exceed"):
        q.retry_fields(
            job(status="failed", attempts=q.MAX_ATTEMPTS_LIMIT),
            NOW,
            by="me",
            default_max_attempts=1,
        )
    with pytest.raises(IllegalTransition, match=r"^cannot claim: attempts is unreadable"):
        q.claim_fields(job(attempts="x"), "o", NOW)


def test_terminal_jobs_refuse_every_builder_but_retry() -> None:
    """A terminal status in `allowed` is still refused unless allow_terminal says so."""
    with pytest.raises(IllegalTransition):
        q._require(job(status="failed"), ("failed",), "poke")
    q._require(job(status="failed"), ("failed",), "poke", allow_terminal=True)


# --------------------------------------------------------------------------- fields cleared


@pytest.mark.parametrize(
    "build",
    [
        lambda j: q.done_fields(j, NOW, {}),
        lambda j: q.fail_fields(j, NOW, {"stage": None}),
        lambda j: q.cancel_fields(j, NOW, by="me"),
    ],
)
def test_a_final_write_clears_not_before(build: Any) -> None:
    fields = build(job(not_before=(NOW + timedelta(hours=1)).isoformat()))
    assert "not_before" in fields and fields["not_before"] is None


def test_retry_clears_backoff_and_result_so_the_job_is_due_at_once() -> None:
    later = (NOW + timedelta(hours=1)).isoformat()
    record = job(status="cancelled", attempts=2, not_before=later, result={"old": 1})
    fields = q.retry_fields(record, NOW, by="me", default_max_attempts=3)
    assert fields["not_before"] is None and fields["result"] is None
    assert q.is_due({**record, **fields}, NOW)


def test_retry_up_to_the_limit_is_allowed() -> None:
    record = job(status="failed", attempts=q.MAX_ATTEMPTS_LIMIT - 3)
    fields = q.retry_fields(record, NOW, by="me", default_max_attempts=3)
    assert fields["max_attempts"] == q.MAX_ATTEMPTS_LIMIT


def test_retry_with_unreadable_attempts_and_no_history_starts_from_zero() -> None:
    fields = q.retry_fields(
        job(status="failed", attempts="x"), NOW, by="me", default_max_attempts=3
    )
    assert (fields["attempts"], fields["max_attempts"]) == (0, 3)
    fields = q.retry_fields(
        job(status="failed", attempts="x", history="not a list"),
        NOW,
        by="me",
        default_max_attempts=3,
    )
    assert fields["attempts"] == 0
    history = [{"attempt": 0}, {"attempt": -1}, {"attempt": 2}, {"attempt": True}]
    fields = q.retry_fields(
        job(status="failed", attempts=None, history=history), NOW, by="me", default_max_attempts=3
    )
    assert (fields["attempts"], fields["max_attempts"]) == (2, 5)
    fields = q.retry_fields(
        job(status="failed", attempts=None, history=[{"attempt": 0}]),
        NOW,
        by="me",
        default_max_attempts=1,
    )
    assert fields["attempts"] == 0


def test_the_failed_entry_keeps_when_which_attempt_and_why() -> None:
    error = {"stage": "s1", "message": "boom"}
    fields = q.fail_fields(job(status="running", attempts=2, stage="s0"), NOW, error)
    entry = fields["history"][-1]
    assert entry == {"at": q.format_time(NOW), "event": "failed", "attempt": 2, "error": error}
    assert fields["stage"] == "s1"


def test_checkpoint_outputs_of_a_record_without_a_checkpoint() -> None:
    assert q.checkpoint_outputs(job(checkpoint=None)) == []
    assert q.checkpoint_outputs(job(checkpoint={"outputs": ["a", 1, "b"]})) == ["a", "b"]


# --------------------------------------------------------------------------- boundaries


def test_max_attempts_up_to_the_limit_is_believed() -> None:
    assert q.max_attempts_of(job(max_attempts=q.MAX_ATTEMPTS_LIMIT), 3) == q.MAX_ATTEMPTS_LIMIT
    assert q.max_attempts_of(job(max_attempts=q.MAX_ATTEMPTS_LIMIT + 1), 3) == 3


def test_an_error_message_of_exactly_the_limit_is_kept_whole() -> None:
    message = "x" * q.ERROR_MESSAGE_LIMIT
    info = q.error_info(ValueError(message), stage=None, attempt=1, now=NOW, retryable=True)
    assert info["message"] == message
    longer = q.error_info(ValueError(message + "y"), stage=None, attempt=1, now=NOW, retryable=True)
    assert longer["message"] == message + "..."


def test_attempts_read_as_integral_floats_including_zero() -> None:
    assert q.attempts_of(job(attempts=0.0)) == 0
    assert q.attempts_of(job(attempts=2.0)) == 2
    assert q.attempts_of(job(attempts=-1.0)) == q.ATTEMPTS_UNREADABLE


def test_a_timestamp_exactly_at_the_skew_limit_is_believed() -> None:
    at_limit = NOW + timedelta(seconds=30)
    record = job(status="running", attempts=1, updated_at=at_limit.isoformat())
    assert not q.claimable(record, NOW, 60, 3, skew_s=30)  # dated (fresh), not stale
    past = job(status="running", attempts=1, updated_at=(at_limit + timedelta(0, 1)).isoformat())
    assert q.claimable(past, NOW, 60, 3, skew_s=30)  # beyond the skew: undated, stale


def test_no_skew_means_no_future_timestamp_is_believed() -> None:
    soon = (NOW + timedelta(seconds=0.5)).isoformat()
    assert q.claimable(job(status="running", attempts=1, updated_at=soon), NOW, 60, 3, skew_s=0)
    assert q.claimable(job(status="running", attempts=1, updated_at=soon), NOW, 60, 3, skew_s=-5)


def test_a_nan_or_huge_skew_is_survived() -> None:
    soon = (NOW + timedelta(seconds=0.5)).isoformat()
    running = job(status="running", attempts=1, updated_at=soon)
    assert q.claimable(running, NOW, 60, 3, skew_s=math.nan)  # NaN: no skew allowed
    assert not q.claimable(running, NOW, 60, 3, skew_s=1e300)  # overflow: everything believed


def test_claimable_passes_its_skew_to_the_queued_due_check() -> None:
    """A queued job's not_before beyond MAX_DELAY_S + skew is ignored: with a big skew
    it is believed (not due), with the default skew it is not (due)."""
    far = NOW + timedelta(seconds=q.MAX_DELAY_S + 1000)
    record = job(not_before=far.isoformat())
    assert q.claimable(record, NOW, 60, 3)
    assert not q.claimable(record, NOW, 60, 3, skew_s=2000)


def test_parse_time_takes_datetimes_as_they_are() -> None:
    assert q.parse_time(NOW) == NOW
    naive = datetime(2026, 1, 1, 12, 0)
    assert q.parse_time(naive) == naive.replace(tzinfo=UTC)


@pytest.fixture
def local_zone() -> Iterator[None]:
    """A process time zone far from UTC: naive times must still be read as UTC."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "America/Los_Angeles"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.usefixtures("local_zone")
def test_naive_times_are_utc_whatever_the_machines_zone() -> None:
    naive = datetime(2026, 1, 1, 12, 0)
    assert q.format_time(naive) == "2026-01-01T12:00:00+00:00"
    offset = datetime.fromisoformat("2026-01-01T12:00:00+02:00")
    assert q.format_time(offset) == "2026-01-01T10:00:00+00:00"
    assert q.parse_time("2026-01-01T12:00:00+02:00") == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert q.parse_time("2026-01-01T12:00:00+02:00").tzinfo == UTC  # type: ignore[union-attr]


# --------------------------------------------------------------------------- backoff


def test_zero_base_or_cap_means_no_backoff() -> None:
    assert q.backoff_seconds(3, 0.0, 300.0, rand=lambda: 1.0) == 0.0
    assert q.backoff_seconds(3, 5.0, 0.0, rand=lambda: 1.0) == 0.0


def test_a_random_source_out_of_range_is_clamped() -> None:
    assert q.backoff_seconds(1, 5.0, 300.0, rand=lambda: 7.0) == 5.0
    assert q.backoff_seconds(1, 5.0, 300.0, rand=lambda: -1.0) == 0.0


@pytest.mark.parametrize(
    ("delay", "expect_not_before"),
    [(0.5, True), (1.0, True), (0.0, False), (-3.0, False), (math.nan, False), ("x", False)],
)
def test_requeue_delay_becomes_not_before_only_when_positive(
    delay: Any, expect_not_before: bool
) -> None:
    fields = q.requeue_fields(job(status="running", attempts=1), NOW, delay_s=delay)
    assert (fields["not_before"] is not None) == expect_not_before
    if expect_not_before:
        assert q.parse_time(fields["not_before"]) == NOW + timedelta(seconds=float(delay))
