"""The policy, example by example: the core (claimable, claim_fields, stale_action)
first, then every helper beside it. Pure logic, no services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from shared import job_queue as q
from shared.job_queue import IllegalTransition
from shared.jobs import JobStatus

NOW = datetime(2026, 7, 26, 12, 0, 0, tzinfo=UTC)
STALE = 60.0
MAX = 3


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat()


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j1",
        "status": "queued",
        "attempts": 0,
        "owner": None,
        "stage": None,
        "updated_at": ago(0),
        "history": [],
    }
    return {**base, **fields}


def running(**fields: Any) -> dict[str, Any]:
    return job(**{"status": "running", "attempts": 1, "owner": "i1", **fields})


def apply(record: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {**record, **fields}


# --------------------------------------------------------------------------- states


def test_states_is_the_one_list() -> None:
    assert set(JobStatus) == (
        set(q.PENDING_STATUSES) | set(q.TERMINAL_STATUSES) | set(q.WAITING_STATUSES)
    )
    assert q.PENDING_STATUSES == ("queued", "running")
    assert q.WAITING_STATUSES == ("waiting",)
    assert q.CANCELLABLE_STATUSES == ("queued", "running", "waiting")
    assert q.TERMINAL_STATUSES == ("done", "failed", "cancelled")
    assert set(q.RETRYABLE_STATUSES) < set(q.TERMINAL_STATUSES)


# --------------------------------------------------------------------------- claimable


def test_queued_job_is_claimable() -> None:
    assert q.claimable(job(), NOW, STALE, MAX)


def test_queued_job_is_claimable_however_old() -> None:
    assert q.claimable(job(updated_at=ago(10 * STALE)), NOW, STALE, MAX)


def test_running_fresh_job_is_not_claimable() -> None:
    assert not q.claimable(running(updated_at=ago(STALE - 1)), NOW, STALE, MAX)


def test_running_job_at_exactly_stale_s_is_not_claimable() -> None:
    assert not q.claimable(running(updated_at=ago(STALE)), NOW, STALE, MAX)


def test_running_stale_job_is_claimable() -> None:
    assert q.claimable(running(updated_at=ago(STALE + 1)), NOW, STALE, MAX)


@pytest.mark.parametrize("status", ["done", "failed", "cancelled", "weird", None])
def test_non_pending_job_is_never_claimable(status: str | None) -> None:
    assert not q.claimable(job(status=status, updated_at=ago(1e6)), NOW, STALE, MAX)


@pytest.mark.parametrize("status", ["queued", "running"])
def test_job_out_of_attempts_is_not_claimable(status: str) -> None:
    assert not q.claimable(job(status=status, attempts=MAX, updated_at=ago(1e6)), NOW, STALE, MAX)
    assert not q.claimable(job(status=status, attempts=MAX + 5), NOW, STALE, MAX)


def test_job_with_attempts_left_is_claimable() -> None:
    assert q.claimable(job(attempts=MAX - 1), NOW, STALE, MAX)


def test_missing_attempts_counts_as_zero() -> None:
    record = job()
    del record["attempts"]
    assert q.claimable(record, NOW, STALE, 1)
    assert q.claim_fields(record, "i1", NOW)["attempts"] == 1


# --------------------------------------------------------------------------- claim_fields


def test_claim_fields_marks_running_counts_and_stamps_the_owner() -> None:
    fields = q.claim_fields(job(attempts=1), "inst-7", NOW)
    assert fields["status"] == "running"
    assert fields["stage"] == "claimed"
    assert fields["attempts"] == 2
    assert fields["owner"] == "inst-7"
    assert fields["updated_at"] == NOW.isoformat()


def test_claim_fields_clears_not_before_and_records_the_claim() -> None:
    fields = q.claim_fields(job(not_before=ago(5), history=[{"event": "submitted"}]), "i9", NOW)
    assert fields["not_before"] is None
    assert fields["history"] == [
        {"event": "submitted"},
        {"at": NOW.isoformat(), "event": "claimed", "owner": "i9", "attempt": 1},
    ]


def test_claim_fields_takes_over_a_stale_running_job() -> None:
    fields = q.claim_fields(running(attempts=2, owner="dead"), "alive", NOW)
    assert (fields["owner"], fields["attempts"]) == ("alive", 3)


@pytest.mark.parametrize("status", q.TERMINAL_STATUSES)
def test_claim_fields_refuses_terminal_jobs(status: str) -> None:
    with pytest.raises(IllegalTransition):
        q.claim_fields(job(status=status), "i1", NOW)


def test_claim_fields_refuses_unreadable_attempts() -> None:
    with pytest.raises(IllegalTransition):
        q.claim_fields(job(attempts="lots"), "i1", NOW)


# --------------------------------------------------------------------------- stale_action


def test_stale_action_leaves_fresh_running_job_alone() -> None:
    assert q.stale_action(running(updated_at=ago(STALE - 1)), NOW, STALE, MAX) is None


def test_stale_action_requeues_stale_running_job_with_attempts_left() -> None:
    assert q.stale_action(running(updated_at=ago(STALE + 1)), NOW, STALE, MAX) == "requeue"


def test_stale_action_fails_stale_running_job_out_of_attempts() -> None:
    record = running(attempts=MAX, updated_at=ago(STALE + 1))
    assert q.stale_action(record, NOW, STALE, MAX) == "fail"


def test_stale_action_requeues_stale_queued_job() -> None:
    """A queued job nobody claimed for stale_s lost its doorbell: ring again."""
    assert q.stale_action(job(updated_at=ago(STALE + 1)), NOW, STALE, MAX) == "requeue"
    assert q.stale_action(job(updated_at=ago(STALE - 1)), NOW, STALE, MAX) is None


def test_a_queued_job_re_rung_in_a_row_waits_twice_as_long_each_time() -> None:
    """A backlog that waits past the stale time still holds its doorbells in Pub/Sub:
    the sweep re-rings such a job after stale, 2x stale, 4x stale... (at most 16x)."""
    record = job(updated_at=ago(0))
    for n in range(6):
        record = {**record, **q.requeue_fields(record, NOW - timedelta(seconds=1))}
        assert q.rerings(record) == n + 1
        limit = STALE * 2 ** min(n + 1, q.RERING_DOUBLINGS_MAX)
        waited = {**record, "updated_at": ago(limit - 1)}
        assert q.stale_action(waited, NOW, STALE, MAX) is None
        waited = {**record, "updated_at": ago(limit + 1)}
        assert q.stale_action(waited, NOW, STALE, MAX) == "requeue"


def test_only_re_rings_in_a_row_count() -> None:
    ring = {"at": ago(5), "event": "requeued", "owner": None, "attempt": 1}
    assert q.rerings(job(history=[])) == q.rerings(job()) == 0
    assert q.rerings(job(history=[{"event": "submitted"}, ring, ring])) == 2
    # a hand-back, a retry after an error or a rescue between them starts the count again
    error = {**ring, "error": {"type": "Boom"}}
    rescued = {**ring, "event": "rescued", "owner": "i-1"}
    assert q.rerings(job(history=[ring, error, ring])) == 1
    assert q.rerings(job(history=[ring, rescued])) == 0
    # a running job's own staleness is not stretched: it is not queued
    stale_running = running(updated_at=ago(STALE + 1), history=[ring, ring, ring])
    assert q.stale_action(stale_running, NOW, STALE, MAX) == "requeue"


@pytest.mark.parametrize("status", ["done", "failed", "cancelled", "bogus"])
def test_stale_action_ignores_non_pending(status: str) -> None:
    assert q.stale_action(job(status=status, updated_at=None), NOW, STALE, MAX) is None


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "updated_at", [None, 17, 1.5e9, "", "yesterday", "2026-13-45T00:00:00", [], {}, True]
)
def test_undated_running_job_is_stale(updated_at: object) -> None:
    record = running(updated_at=updated_at)
    assert q.claimable(record, NOW, STALE, MAX)
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"
    assert q.stale_action({**record, "attempts": MAX}, NOW, STALE, MAX) == "fail"


def test_missing_updated_at_is_stale() -> None:
    record = running()
    del record["updated_at"]
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"


def test_naive_timestamp_is_read_as_utc() -> None:
    naive = (NOW - timedelta(seconds=10)).replace(tzinfo=None).isoformat()
    assert q.parse_time(naive) == NOW - timedelta(seconds=10)
    assert q.stale_action(running(updated_at=naive), NOW, STALE, MAX) is None


def test_aware_timestamp_in_another_zone_is_converted() -> None:
    plus2 = timezone(timedelta(hours=2))
    local = (NOW - timedelta(seconds=10)).astimezone(plus2).isoformat()
    assert q.parse_time(local) == NOW - timedelta(seconds=10)
    assert q.stale_action(running(updated_at=local), NOW, STALE, MAX) is None


def test_zulu_suffix_is_understood() -> None:
    assert q.parse_time("2026-07-26T12:00:00Z") == NOW


def test_parse_time_rejects_non_strings_and_overflow() -> None:
    assert q.parse_time(1_700_000_000) is None
    assert q.parse_time(None) is None
    assert q.parse_time("0001-01-01T00:00:00+05:00") is None
    assert q.parse_time("x" * 1000) is None


def test_naive_now_is_read_as_utc() -> None:
    naive_now = NOW.replace(tzinfo=None)
    assert q.stale_action(running(updated_at=ago(STALE + 1)), naive_now, STALE, MAX) == "requeue"
    assert q.stale_action(running(updated_at=ago(1)), naive_now, STALE, MAX) is None


def test_timestamp_slightly_in_future_is_fresh() -> None:
    """Another instance's clock may run ahead by up to skew_s."""
    record = running(updated_at=(NOW + timedelta(seconds=200)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX) is None
    assert not q.claimable(record, NOW, STALE, MAX)


def test_timestamp_far_in_future_does_not_pin_the_job() -> None:
    record = running(updated_at=(NOW + timedelta(days=365)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"
    assert q.claimable(record, NOW, STALE, MAX)


def test_skew_s_is_adjustable() -> None:
    record = running(updated_at=(NOW + timedelta(seconds=200)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX, skew_s=100) == "requeue"
    assert q.claimable(record, NOW, STALE, MAX, skew_s=100)
    assert not q.claimable(record, NOW, STALE, MAX, skew_s=300)


def test_format_time_is_utc_iso() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert q.format_time(NOW.astimezone(plus2)) == "2026-07-26T12:00:00+00:00"
    assert q.format_time(NOW.replace(tzinfo=None)) == "2026-07-26T12:00:00+00:00"


# --------------------------------------------------------------------------- attempts


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (2, 2), (2.0, 2), ("2", 2), (" 3 ", 3)],
)
def test_attempts_of_reads_sane_values(value: object, expected: int) -> None:
    assert q.attempts_of(job(attempts=value)) == expected


@pytest.mark.parametrize(
    "value", [None, -1, True, False, 1.5, float("nan"), float("inf"), "two", "-1", [], {}]
)
def test_unreadable_attempts_count_as_exhausted(value: object) -> None:
    """Garbage attempts must lead to a terminal state, never to endless retries."""
    assert q.attempts_of(job(attempts=value)) == q.ATTEMPTS_UNREADABLE
    assert not q.claimable(job(attempts=value), NOW, STALE, MAX)
    assert not q.claimable(running(attempts=value, updated_at=None), NOW, STALE, MAX)
    assert q.stale_action(running(attempts=value, updated_at=None), NOW, STALE, MAX) == "fail"
    assert q.stale_action(job(attempts=value, updated_at=ago(STALE + 1)), NOW, STALE, MAX) == (
        "fail"
    )


def test_per_job_max_attempts_wins_over_the_argument() -> None:
    assert q.claimable(job(attempts=4, max_attempts=5), NOW, STALE, MAX)
    assert not q.claimable(job(attempts=1, max_attempts=1), NOW, STALE, MAX)
    record = running(attempts=4, max_attempts=5, updated_at=None)
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"
    assert q.stale_action({**record, "attempts": 5}, NOW, STALE, MAX) == "fail"


@pytest.mark.parametrize("value", [None, 0, -2, True, 2.0, "5", q.MAX_ATTEMPTS_LIMIT + 1])
def test_invalid_per_job_max_attempts_falls_back(value: object) -> None:
    assert q.max_attempts_of(job(max_attempts=value), MAX) == MAX
    assert not q.claimable(job(attempts=MAX, max_attempts=value), NOW, STALE, MAX)


# --------------------------------------------------------------------------- backoff


def test_backoff_is_full_jitter_exponential() -> None:
    assert q.backoff_seconds(1, 2.0, 100.0, rand=lambda: 1.0) == 2.0
    assert q.backoff_seconds(3, 2.0, 100.0, rand=lambda: 1.0) == 8.0
    assert q.backoff_seconds(3, 2.0, 100.0, rand=lambda: 0.5) == 4.0
    assert q.backoff_seconds(3, 2.0, 100.0, rand=lambda: 0.0) == 0.0


def test_backoff_is_capped_and_survives_huge_attempts() -> None:
    assert q.backoff_seconds(10_000, 2.0, 100.0, rand=lambda: 1.0) == 100.0
    assert q.backoff_seconds(0, 2.0, 100.0, rand=lambda: 1.0) == 2.0
    assert q.backoff_seconds(-5, 2.0, 100.0, rand=lambda: 1.0) == 2.0


def test_backoff_uses_randomness_by_default() -> None:
    values = {q.backoff_seconds(5, 1.0, 100.0) for _ in range(50)}
    assert len(values) > 1
    assert all(0.0 <= v <= 16.0 for v in values)


# --------------------------------------------------------------------------- not_before


def test_queued_job_backing_off_is_not_claimable_until_due() -> None:
    record = job(not_before=(NOW + timedelta(seconds=30)).isoformat())
    assert not q.is_due(record, NOW)
    assert not q.claimable(record, NOW, STALE, MAX)
    later = NOW + timedelta(seconds=30)
    assert q.is_due(record, later)
    assert q.claimable(record, later, STALE, MAX)


def test_job_backing_off_is_not_stale_before_due() -> None:
    """Age counts from max(updated_at, not_before)."""
    record = job(updated_at=ago(1000), not_before=(NOW + timedelta(seconds=600)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX) is None
    due = NOW + timedelta(seconds=600)
    assert q.stale_action(record, due + timedelta(seconds=STALE), STALE, MAX) is None
    assert q.stale_action(record, due + timedelta(seconds=STALE + 1), STALE, MAX) == "requeue"


def test_backing_off_job_with_undated_updated_at_counts_from_not_before() -> None:
    record = job(updated_at="garbage", not_before=(NOW + timedelta(seconds=10)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX) is None


@pytest.mark.parametrize("value", [None, "soon", 12, (NOW - timedelta(seconds=1)).isoformat()])
def test_missing_garbage_or_past_not_before_is_due(value: object) -> None:
    assert q.is_due(job(not_before=value), NOW)
    assert q.claimable(job(not_before=value), NOW, STALE, MAX)


def test_absurd_not_before_does_not_pin_the_job() -> None:
    record = job(updated_at=ago(STALE + 1), not_before="9999-01-01T00:00:00+00:00")
    assert q.is_due(record, NOW)
    assert q.claimable(record, NOW, STALE, MAX)
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"


def test_not_before_does_not_matter_for_running_jobs() -> None:
    record = running(updated_at=ago(STALE + 1), not_before=(NOW + timedelta(hours=1)).isoformat())
    assert q.stale_action(record, NOW, STALE, MAX) == "requeue"


# --------------------------------------------------------------------------- small readers


def test_is_terminal() -> None:
    statuses = [q.is_terminal(job(status=s)) for s in JobStatus]
    assert statuses == [False, False, True, True, True, False]


def test_owns_checks_status_owner_and_attempt() -> None:
    record = running(owner="i1", attempts=2)
    assert q.owns(record, "i1", 2)
    assert not q.owns(record, "i2", 2)
    assert not q.owns(record, "i1", 1)
    assert not q.owns({**record, "status": "done"}, "i1", 2)
    assert not q.owns({**record, "attempts": "junk"}, "i1", 2)


def test_checkpoint_of_tolerates_garbage() -> None:
    assert q.checkpoint_of(job(checkpoint={"next_stage": 2, "state": {"k": 1}})) == (2, {"k": 1})
    assert q.checkpoint_of(job()) == (0, {})
    assert q.checkpoint_of(job(checkpoint="x")) == (0, {})
    assert q.checkpoint_of(job(checkpoint={"next_stage": -1, "state": {}})) == (0, {})
    assert q.checkpoint_of(job(checkpoint={"next_stage": 1, "state": None})) == (1, {})


# --------------------------------------------------------------------------- builders


def test_heartbeat_moves_only_the_clock() -> None:
    assert q.heartbeat_fields(running(), NOW) == {"updated_at": NOW.isoformat()}


@pytest.mark.parametrize("status", ["queued", *q.TERMINAL_STATUSES])
def test_heartbeat_and_checkpoint_need_a_running_job(status: str) -> None:
    with pytest.raises(IllegalTransition):
        q.heartbeat_fields(job(status=status), NOW)
    with pytest.raises(IllegalTransition):
        q.checkpoint_fields(job(status=status), NOW, "s", 1, {})


def test_checkpoint_records_next_stage_and_state() -> None:
    fields = q.checkpoint_fields(running(attempts=2), NOW, "render", 2, {"done": ["a"]})
    assert fields["stage"] == "render"
    assert fields["checkpoint"] == {"next_stage": 2, "state": {"done": ["a"]}}
    assert fields["updated_at"] == NOW.isoformat()
    assert fields["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "checkpoint",
        "stage": "render",
        "next_stage": 2,
        "attempt": 2,
    }


def test_requeue_hands_back_keeping_attempts_and_checkpoint() -> None:
    record = running(attempts=2, stage="render", checkpoint={"next_stage": 1, "state": {}})
    new = apply(record, q.requeue_fields(record, NOW))
    assert new["status"] == "queued"
    assert new["owner"] is None and new["stage"] is None
    assert new["attempts"] == 2
    assert new["checkpoint"] == {"next_stage": 1, "state": {}}
    assert new["not_before"] is None
    assert new["updated_at"] == NOW.isoformat()
    assert new["history"][-1]["event"] == "requeued"
    assert "rescues" not in new
    assert q.claimable(new, NOW, STALE, MAX)


def test_requeue_with_delay_sets_not_before() -> None:
    record = running()
    new = apply(record, q.requeue_fields(record, NOW, delay_s=45))
    assert new["not_before"] == (NOW + timedelta(seconds=45)).isoformat()
    assert new["history"][-1]["not_before"] == new["not_before"]
    assert not q.claimable(new, NOW, STALE, MAX)
    assert q.claimable(new, NOW + timedelta(seconds=45), STALE, MAX)


@pytest.mark.parametrize("delay", [-5, 0, float("nan"), float("-inf")])
def test_requeue_without_a_real_delay_is_due_now(delay: float) -> None:
    assert q.requeue_fields(running(), NOW, delay_s=delay)["not_before"] is None


def test_requeue_delay_is_clamped() -> None:
    fields = q.requeue_fields(running(), NOW, delay_s=float("inf"))
    assert fields["not_before"] == (NOW + timedelta(seconds=q.MAX_DELAY_S)).isoformat()


def test_handback_requeues_due_now_and_gives_the_attempt_back() -> None:
    record = running(attempts=3, max_attempts=3, checkpoint={"next_stage": 2, "state": {"k": 1}})
    assert not q.claimable(apply(record, q.requeue_fields(record, NOW)), NOW, STALE, MAX)
    new = apply(record, q.handback_fields(record, NOW, max_attempts=MAX))
    assert (new["status"], new["owner"], new["stage"], new["not_before"]) == (
        "queued",
        None,
        None,
        None,
    )
    assert new["attempts"] == 3 and new["max_attempts"] == 4 and new["handbacks"] == 1
    assert new["checkpoint"] == {"next_stage": 2, "state": {"k": 1}}
    assert new["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "handed back",
        "owner": "i1",
        "attempt": 3,
        "max_attempts": 4,
    }
    assert q.claimable(new, NOW, STALE, MAX)  # the last attempt was not spent
    assert "rescues" not in new and "error" not in new


def test_handback_uses_the_budget_in_force() -> None:
    assert q.handback_fields(running(), NOW, max_attempts=5)["max_attempts"] == 6
    assert q.handback_fields(running(max_attempts=2), NOW, max_attempts=5)["max_attempts"] == 3
    at_limit = running(max_attempts=q.MAX_ATTEMPTS_LIMIT)
    assert q.handback_fields(at_limit, NOW, max_attempts=5)["max_attempts"] == q.MAX_ATTEMPTS_LIMIT


@pytest.mark.parametrize("status", ["queued", "done", "failed", "cancelled"])
def test_only_a_running_job_can_be_handed_back(status: str) -> None:
    with pytest.raises(IllegalTransition, match="cannot hand back"):
        q.handback_fields(job(status=status), NOW, max_attempts=MAX)


def test_requeue_rescued_counts_rescues() -> None:
    record = running(owner="dead", attempts=1, rescues=2)
    fields = q.requeue_fields(record, NOW, rescued=True)
    assert fields["rescues"] == 3
    assert fields["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "rescued",
        "owner": "dead",
        "attempt": 1,
    }  # when the silent owner was last seen is the watchdog's to add (shared.recovery)
    assert q.requeue_fields(running(rescues="x"), NOW, rescued=True)["rescues"] == 1
    assert q.requeue_fields(running(), NOW, rescued=True)["rescues"] == 1


def test_requeue_with_error_keeps_it() -> None:
    err = q.error_info(OSError("disk"), stage="s", attempt=1, now=NOW, retryable=True)
    fields = q.requeue_fields(running(), NOW, error=err, delay_s=1)
    assert fields["error"] == err
    assert fields["history"][-1]["error"] == err


def test_fail_sets_error_and_keeps_owner() -> None:
    record = running(owner="i1", stage="render")
    err = {"type": "X", "message": "boom"}
    new = apply(record, q.fail_fields(record, NOW, err))
    assert new["status"] == "failed"
    assert new["error"] == err
    assert new["owner"] == "i1" and new["stage"] == "render"
    assert new["history"][-1]["event"] == "failed"
    assert not q.claimable(new, NOW, STALE, MAX)


def test_fail_works_on_a_queued_job_the_watchdog_gives_up_on() -> None:
    assert q.fail_fields(job(attempts=MAX), NOW, {"message": "out"})["status"] == "failed"


def test_done_sets_result_and_keeps_owner() -> None:
    record = running(owner="i1", attempts=2)
    new = apply(record, q.done_fields(record, NOW, {"digest": "abc"}))
    assert new["status"] == "done"
    assert new["result"] == {"digest": "abc"}
    assert new["owner"] == "i1"
    assert new["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "done",
        "owner": "i1",
        "attempt": 2,
    }


@pytest.mark.parametrize("status", ["queued", "running"])
def test_cancel_from_pending(status: str) -> None:
    record = job(status=status)
    new = apply(record, q.cancel_fields(record, NOW, by="alice", reason="typo"))
    assert new["status"] == "cancelled"
    assert new["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "cancelled",
        "by": "alice",
        "reason": "typo",
    }
    assert not q.claimable(new, NOW, STALE, MAX)
    assert q.stale_action(new, NOW, STALE, MAX) is None


@pytest.mark.parametrize("status", q.TERMINAL_STATUSES)
def test_terminal_states_are_absorbing(status: str) -> None:
    record = job(status=status)
    builders = [
        lambda: q.claim_fields(record, "i", NOW),
        lambda: q.heartbeat_fields(record, NOW),
        lambda: q.checkpoint_fields(record, NOW, "s", 1, {}),
        lambda: q.requeue_fields(record, NOW),
        lambda: q.requeue_fields(record, NOW, rescued=True),
        lambda: q.fail_fields(record, NOW, {}),
        lambda: q.done_fields(record, NOW, {}),
        lambda: q.cancel_fields(record, NOW, by="x"),
    ]
    for build in builders:
        with pytest.raises(IllegalTransition):
            build()


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_retry_gives_a_fresh_budget_without_resetting_attempts(status: str) -> None:
    record = job(status=status, attempts=3, owner="i1", stage="render", result=None)
    new = apply(record, q.retry_fields(record, NOW, by="bob", default_max_attempts=MAX))
    assert new["status"] == "queued"
    assert new["attempts"] == 3
    assert new["max_attempts"] == 6
    assert new["owner"] is None and new["stage"] is None
    assert new["history"][-1] == {
        "at": NOW.isoformat(),
        "event": "retried",
        "by": "bob",
        "from": status,
    }
    assert q.claimable(new, NOW, STALE, MAX)
    claimed = apply(new, q.claim_fields(new, "i2", NOW))
    assert claimed["attempts"] == 4


@pytest.mark.parametrize("status", ["queued", "running", "done", "bogus"])
def test_retry_only_from_failed_or_cancelled(status: str) -> None:
    with pytest.raises(IllegalTransition):
        q.retry_fields(job(status=status), NOW, by="bob", default_max_attempts=MAX)


def test_retry_with_unreadable_attempts_uses_history_floor() -> None:
    record = job(
        status="failed",
        attempts="??",
        history=[{"event": "claimed", "attempt": 4}, {"event": "x", "attempt": "9"}],
    )
    fields = q.retry_fields(record, NOW, by="bob", default_max_attempts=2)
    assert (fields["attempts"], fields["max_attempts"]) == (4, 6)


def test_retry_refuses_a_bad_budget() -> None:
    with pytest.raises(IllegalTransition):
        q.retry_fields(job(status="failed"), NOW, by="b", default_max_attempts=0)
    with pytest.raises(IllegalTransition):
        q.retry_fields(
            job(status="failed", attempts=q.MAX_ATTEMPTS_LIMIT), NOW, by="b", default_max_attempts=1
        )


@pytest.mark.parametrize("status", ["bogus", None])
def test_builders_refuse_unknown_status(status: object) -> None:
    with pytest.raises(IllegalTransition):
        q.claim_fields(job(status=status), "i", NOW)
    with pytest.raises(IllegalTransition):
        q.cancel_fields(job(status=status), NOW, by="x")


def test_error_info_shape_and_bound() -> None:
    err = q.error_info(ValueError("x" * 5000), stage="render", attempt=2, now=NOW, retryable=False)
    assert err["type"] == "ValueError"
    assert err["stage"] == "render" and err["attempt"] == 2 and err["retryable"] is False
    assert err["at"] == NOW.isoformat()
    assert len(err["message"]) <= q.ERROR_MESSAGE_LIMIT + 3


# --------------------------------------------------------------------------- history


def test_history_keeps_the_newest_and_counts_the_rest() -> None:
    record = running(history=[{"event": "old", "n": i} for i in range(q.HISTORY_LIMIT)])
    fields = q.checkpoint_fields(record, NOW, "s", 1, {})
    assert len(fields["history"]) == q.HISTORY_LIMIT
    assert fields["history"][0] == {"event": "old", "n": 1}
    assert fields["history"][-1]["event"] == "checkpoint"
    assert fields["history_dropped"] == 1
    again = apply(record, fields)
    assert q.checkpoint_fields(again, NOW, "s", 2, {})["history_dropped"] == 2


def test_history_that_is_not_a_list_is_restarted() -> None:
    fields = q.claim_fields(job(history="broken", history_dropped="x"), "i", NOW)
    assert [e["event"] for e in fields["history"]] == ["claimed"]
    assert fields["history_dropped"] == 0


def test_builders_do_not_mutate_their_input() -> None:
    record = running(history=[{"event": "submitted"}])
    snapshot = {**record, "history": list(record["history"])}
    q.checkpoint_fields(record, NOW, "s", 1, {})
    q.requeue_fields(record, NOW, rescued=True)
    q.done_fields(record, NOW, {})
    assert record == snapshot


def test_terminal_builders_leave_a_stage_that_tells_the_truth() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    running = {
        "status": "running",
        "attempts": 1,
        "stage": "stage-0",
        "updated_at": now.isoformat(),
    }
    assert q.done_fields(running, now, {})["stage"] is None
    failed = q.fail_fields(running, now, {"stage": "stage-1", "message": "boom"})
    assert failed["stage"] == "stage-1"
    assert q.fail_fields(running, now, {"message": "exhausted"})["stage"] == "stage-0"


def test_claiming_a_stale_running_job_counts_as_a_rescue() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    running = {"status": "running", "attempts": 1, "owner": "gone", "rescues": 2}
    fields = q.claim_fields(running, "me", now)
    assert fields["rescues"] == 3
    assert fields["history"][-1]["took_over_from"] == "gone"
    queued = q.claim_fields({"status": "queued", "attempts": 0}, "me", now)
    assert "rescues" not in queued and "took_over_from" not in queued["history"][-1]
