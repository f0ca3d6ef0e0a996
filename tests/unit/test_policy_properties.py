"""Properties of the policy: a state machine drives a record through every
operation (claim, heartbeat, checkpoint, sweep, requeue, fail, done, cancel,
retry, hand edits, clock moves), and the policy functions are fed arbitrary
JSON-like records. Pure logic, no services."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from shared import job_queue as q
from shared import records as r
from shared import tracing
from shared.job_queue import IllegalTransition
from shared.jobs import JobStatus

STALE = 60.0
MAX = 3
START = datetime(2026, 7, 26, 12, 0, 0, tzinfo=UTC)
FAST = settings(max_examples=200, deadline=None)

owners = st.sampled_from(["i1", "i2", "i3"])
delays = st.one_of(
    st.floats(min_value=0, max_value=600, allow_nan=False), st.sampled_from([-1.0, 1e9])
)
garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=10),
    st.floats(allow_nan=False, allow_infinity=False),  # stored records are plain JSON
    st.text(max_size=8),
    st.just("9999-12-31T23:59:59+00:00"),
    st.just([]),
)


def _walk_to_terminal(record: dict[str, Any], now: datetime) -> tuple[dict[str, Any], int]:
    """Every instance dies right after claiming: only the watchdog acts."""
    steps = 0
    bound = 2 * (q.max_attempts_of(record, MAX) + 3)
    while not q.is_terminal(record):
        steps += 1
        assert steps <= bound, f"job never reached a terminal state: {record}"
        # past the longest a stale job may be left: a queued job re-rung in a row waits
        # stale x 2**n (q.RERING_DOUBLINGS_MAX), as long as its not_before allows
        stale_max = STALE * 2**q.RERING_DOUBLINGS_MAX
        now += timedelta(seconds=stale_max + q.MAX_DELAY_S + q.DEFAULT_SKEW_S + 1)
        if q.claimable(record, now, STALE, MAX):
            record = {**record, **q.claim_fields(record, "doomed", now)}
            continue
        action = q.stale_action(record, now, STALE, MAX)
        assert action is not None, f"stale pending job left alone: {record}"
        if action == "requeue":
            record = {**record, **q.requeue_fields(record, now, rescued=True)}
        else:
            record = {**record, **q.fail_fields(record, now, {"message": "out of attempts"})}
    return record, steps


class JobLife(RuleBasedStateMachine):
    """One job's record under every operation the system (or a person) can apply."""

    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.record: dict[str, Any] = {}
        self.edited = False  # a person hand-edited attempts: the budget is theirs

    @initialize(max_attempts=st.one_of(st.none(), st.integers(min_value=1, max_value=5)))
    def submit(self, max_attempts: int | None) -> None:
        self.trace = tracing.new_trace().traceparent
        self.record = r.new_record(
            r.new_job_id(), "demo", {}, self.now, max_attempts=max_attempts, traceparent=self.trace
        )

    # -- helpers

    def _apply(self, build: Any, *args: Any, **kwargs: Any) -> bool:
        """Apply a builder; a terminal job must refuse and stay untouched."""
        before = copy.deepcopy(self.record)
        try:
            fields = build(self.record, *args, **kwargs)
        except IllegalTransition:
            assert self.record == before
            return False
        assert self.record == before, "builders must not mutate their input"
        assert not q.is_terminal(before) or build is q.retry_fields, "terminal is absorbing"
        self.record = {**self.record, **fields}
        return True

    # -- rules

    @rule(seconds=st.floats(min_value=0, max_value=3 * STALE))
    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(owner=owners)
    def claim(self, owner: str) -> None:
        if q.claimable(self.record, self.now, STALE, MAX):
            before = q.attempts_of(self.record)
            assert self._apply(q.claim_fields, owner, self.now)
            assert q.owns(self.record, owner, before + 1)

    @rule()
    def heartbeat(self) -> None:
        ok = self._apply(q.heartbeat_fields, self.now)
        assert ok == (self.record["status"] == "running")

    @rule(next_stage=st.integers(min_value=0, max_value=5))
    def checkpoint(self, next_stage: int) -> None:
        if self._apply(q.checkpoint_fields, self.now, f"s{next_stage}", next_stage, {"n": 1}):
            assert q.checkpoint_of(self.record) == (next_stage, {"n": 1})

    @rule()
    def sweep(self) -> None:
        action = q.stale_action(self.record, self.now, STALE, MAX)
        if self.record["status"] == "running":
            # A running job is claimable exactly when the watchdog would requeue it.
            assert q.claimable(self.record, self.now, STALE, MAX) == (action == "requeue")
        if action == "requeue":
            assert self._apply(q.requeue_fields, self.now, rescued=True)
            assert q.claimable(self.record, self.now, STALE, MAX)
        elif action == "fail":
            assert self._apply(q.fail_fields, self.now, {"message": "out of attempts"})
        else:
            assert action is None

    @rule(delay=delays, with_error=st.booleans())
    def owner_requeues(self, delay: float, with_error: bool) -> None:
        err = {"message": "transient"} if with_error else None
        if self._apply(q.requeue_fields, self.now, delay_s=delay, error=err) and err:
            assert self.record["error"] == err

    @rule()
    def owner_hands_back(self) -> None:
        """SIGTERM: the owner hands the job back; the attempt it used is not spent."""
        was = self.record["status"]
        left = q.max_attempts_of(self.record, MAX) - q.attempts_of(self.record)
        checkpoint = copy.deepcopy(self.record.get("checkpoint"))
        ok = self._apply(q.handback_fields, self.now, max_attempts=MAX)
        assert ok == (was == "running")
        if ok:
            assert self.record["status"] == "queued" and self.record["owner"] is None
            assert self.record["checkpoint"] == checkpoint
            assert self.record["history"][-1]["event"] == "handed back"
            if not self.edited and q.max_attempts_of(self.record, MAX) < q.MAX_ATTEMPTS_LIMIT:
                assert q.max_attempts_of(self.record, MAX) - q.attempts_of(self.record) == left + 1
            if not self.edited:  # due at once, whatever the budget
                assert q.claimable(self.record, self.now, STALE, MAX) == (
                    q.attempts_of(self.record) < q.max_attempts_of(self.record, MAX)
                )

    @rule()
    def owner_fails(self) -> None:
        self._apply(q.fail_fields, self.now, {"message": "permanent"})

    @rule()
    def owner_finishes(self) -> None:
        self._apply(q.done_fields, self.now, {"ok": True})

    @rule(reason=st.one_of(st.none(), st.text(max_size=5)))
    def cancel(self, reason: str | None) -> None:
        was = self.record["status"]
        ok = self._apply(q.cancel_fields, self.now, by="alice", reason=reason)
        assert ok == (was in q.PENDING_STATUSES)

    @rule(budget=st.integers(min_value=1, max_value=4))
    def retry(self, budget: int) -> None:
        was = self.record["status"]
        attempts = q.attempts_of(self.record)
        ok = self._apply(q.retry_fields, self.now, by="bob", default_max_attempts=budget)
        if attempts == q.ATTEMPTS_UNREADABLE:  # the history's highest attempt is the floor
            attempts = q._highest_attempt_in_history(self.record)
        in_budget = attempts + budget <= q.MAX_ATTEMPTS_LIMIT
        assert ok == (was in q.RETRYABLE_STATUSES and in_budget)
        if ok:
            assert self.record["attempts"] >= min(attempts, q.MAX_ATTEMPTS_LIMIT) or self.edited
            assert q.claimable(self.record, self.now, STALE, MAX)
            self.edited = False

    @precondition(lambda self: not q.is_terminal(self.record))
    @rule(field=st.sampled_from(["attempts", "updated_at", "not_before"]), value=garbage)
    def hand_edit(self, field: str, value: Any) -> None:
        self.record = {**self.record, field: value}
        self.edited = self.edited or field == "attempts"

    # -- invariants

    @invariant()
    def attempts_never_exceed_max(self) -> None:
        if not self.edited:
            assert 0 <= q.attempts_of(self.record) <= q.max_attempts_of(self.record, MAX)

    @invariant()
    def record_stays_valid(self) -> None:
        assert self.record["status"] in set(JobStatus)
        assert r.decode(r.encode(self.record), self.record["id"]) == self.record

    @invariant()
    def the_trace_never_changes(self) -> None:
        assert self.record["traceparent"] == self.trace  # every transition keeps the carrier

    @invariant()
    def a_due_queued_job_has_a_dated_non_negative_wait(self) -> None:
        job, now = self.record, self.now
        if self.edited or job["status"] != JobStatus.QUEUED or not q.is_due(job, now):
            return
        age = q.due_age_seconds(job, now)
        assert age is not None and age >= 0
        # a job is never older in the queue than the job itself
        assert age <= (now - q.parse_time(job["created_at"])).total_seconds() + 1e-6  # type: ignore[operator]

    @invariant()
    def history_is_bounded(self) -> None:
        assert len(self.record["history"]) <= q.HISTORY_LIMIT

    @invariant()
    def always_reaches_a_terminal_state(self) -> None:
        final, _ = _walk_to_terminal(copy.deepcopy(self.record), self.now)
        assert final["status"] in q.TERMINAL_STATUSES
        if not q.is_terminal(self.record) and not self.edited:
            assert q.attempts_of(final) <= q.max_attempts_of(final, MAX)


JobLife.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestJobLife = JobLife.TestCase


# --------------------------------------------------------------------------- sequences


@FAST
@given(
    attempts=st.integers(min_value=0, max_value=MAX - 1),
    idle=st.floats(min_value=STALE + 0.001, max_value=1e6),
    owner=owners,
)
def test_claim_then_stale_then_requeue_stays_legal(attempts: int, idle: float, owner: str) -> None:
    record = {**r.new_record("j", "demo", {}, START), "attempts": attempts}
    claimed = {**record, **q.claim_fields(record, owner, START)}
    later = START + timedelta(seconds=idle)
    action = q.stale_action(claimed, later, STALE, MAX)
    assert action == ("requeue" if attempts + 1 < MAX else "fail")
    if action == "requeue":
        back = {**claimed, **q.requeue_fields(claimed, later, rescued=True)}
        assert back["status"] == "queued" and back["owner"] is None
        assert back["rescues"] == 1 and back["attempts"] == attempts + 1
        assert q.claimable(back, later, STALE, MAX)
        again = {**back, **q.claim_fields(back, "other", later)}
        assert again["attempts"] == attempts + 2 <= MAX
    r.validate_record(claimed)


@FAST
@given(
    budget=st.one_of(st.none(), st.integers(min_value=1, max_value=5)),
    handbacks=st.integers(min_value=1, max_value=20),
    stages=st.lists(st.integers(min_value=0, max_value=9), max_size=20),
)
def test_hand_backs_never_spend_the_budget(
    budget: int | None, handbacks: int, stages: list[int]
) -> None:
    """Claim and hand back as often as instances are SIGTERMed: the remaining budget is
    what it was, attempt numbers only grow, the checkpoint survives, the job stays due."""
    record: dict[str, Any] = r.new_record("j", "demo", {}, START, max_attempts=budget)
    left = q.max_attempts_of(record, MAX) - q.attempts_of(record)
    seen: list[int] = []
    now = START
    for n in range(handbacks):
        assert q.claimable(record, now, STALE, MAX)
        record = {**record, **q.claim_fields(record, f"i{n}", now)}
        seen.append(record["attempts"])
        if stages:
            step = stages[n % len(stages)]
            record = {**record, **q.checkpoint_fields(record, now, f"s{step}", step, {"n": n})}
        mark = q.checkpoint_of(record)
        record = {**record, **q.handback_fields(record, now, max_attempts=MAX)}
        assert q.checkpoint_of(record) == mark
        assert q.max_attempts_of(record, MAX) - q.attempts_of(record) == left
        assert record["handbacks"] == n + 1 and record["rescues"] == 0
        now += timedelta(seconds=1)
    assert seen == list(range(1, handbacks + 1))  # never reused: outputs are keyed by them
    last = record["history"][-1]
    assert (last["event"], last["attempt"]) == ("handed back", handbacks)
    r.validate_record(record)


@FAST
@given(
    offset_ms=st.integers(min_value=-(10**10), max_value=10**10),
    zone_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
    naive=st.booleans(),
)
def test_any_dated_running_job_is_stale_or_fresh_consistently(
    offset_ms: int, zone_minutes: int, naive: bool
) -> None:
    """Fresh exactly when updated_at is within stale_s behind and skew_s ahead of now."""
    stamp = START + timedelta(milliseconds=offset_ms)
    zoned = stamp.astimezone(timezone(timedelta(minutes=zone_minutes)))
    text = stamp.replace(tzinfo=None).isoformat() if naive else zoned.isoformat()
    record = {**r.new_record("j", "demo", {}, START), "status": "running", "updated_at": text}
    offset = offset_ms / 1000
    fresh = offset <= q.DEFAULT_SKEW_S and -offset <= STALE
    expected = None if fresh else "requeue"
    assert q.stale_action(record, START, STALE, MAX) == expected
    assert q.claimable(record, START, STALE, MAX) == (not fresh)


# --------------------------------------------------------------------------- arbitrary records

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(datetime.isoformat),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=12,
)
policy_keys = st.sampled_from(
    [
        "status",
        "attempts",
        "max_attempts",
        "updated_at",
        "not_before",
        "owner",
        "history",
        "history_dropped",
        "rescues",
        "checkpoint",
        "schema",
        "id",
        "pipeline",
        "payload",
    ]
)
statuses = st.one_of(st.sampled_from([*JobStatus, "bogus"]), json_values)
arbitrary_records = st.dictionaries(
    st.one_of(policy_keys, st.text(max_size=6)), json_values, max_size=10
).flatmap(lambda d: statuses.map(lambda s: {**d, "status": s}))
nows = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.one_of(st.none(), st.just(UTC)),
)
numbers = st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=1e7)


@FAST
@given(job=arbitrary_records, now=nows, stale_s=numbers, max_attempts=st.integers(-2, 10))
def test_policy_never_raises_on_arbitrary_records(
    job: dict[str, Any], now: datetime, stale_s: float, max_attempts: int
) -> None:
    snapshot = copy.deepcopy(job)
    assert isinstance(q.claimable(job, now, stale_s, max_attempts), bool)
    assert q.stale_action(job, now, stale_s, max_attempts) in (None, "requeue", "fail")
    assert isinstance(q.is_due(job, now), bool)
    age = q.due_age_seconds(job, now)
    assert age is None or age >= 0
    assert q.attempts_of(job) >= 0
    assert q.max_attempts_of(job, max_attempts) in range(-2, q.MAX_ATTEMPTS_LIMIT + 1)
    assert isinstance(q.owns(job, "i1", 1), bool)
    assert isinstance(q.is_terminal(job), bool)
    next_stage, state = q.checkpoint_of(job)
    assert next_stage >= 0 and isinstance(state, dict)
    for value in job.values():
        parsed = q.parse_time(value)
        assert parsed is None or parsed.tzinfo is not None
    assert job == snapshot


@FAST
@given(job=arbitrary_records, now=nows.map(lambda d: d.replace(tzinfo=UTC)))
def test_builders_either_build_or_refuse(job: dict[str, Any], now: datetime) -> None:
    builders = [
        lambda: q.claim_fields(job, "i1", now),
        lambda: q.heartbeat_fields(job, now),
        lambda: q.checkpoint_fields(job, now, "s", 1, {}),
        lambda: q.requeue_fields(job, now, delay_s=5, rescued=True),
        lambda: q.fail_fields(job, now, {}),
        lambda: q.done_fields(job, now, {}),
        lambda: q.cancel_fields(job, now, by="x"),
        lambda: q.handback_fields(job, now, max_attempts=3),
        lambda: q.retry_fields(job, now, by="x", default_max_attempts=3),
    ]
    for build in builders:
        try:
            fields = build()
        except IllegalTransition:
            continue
        assert isinstance(fields, dict)
        assert q.parse_time(fields["updated_at"]) is not None
        new = {**job, **fields}
        assert new["status"] in set(JobStatus)
        if "history" in fields:
            assert len(fields["history"]) <= q.HISTORY_LIMIT
    if q.is_terminal(job):
        for build in builders[:-1]:
            try:
                build()
            except IllegalTransition:
                continue
            raise AssertionError("a terminal job must refuse every builder but retry")


@FAST
@given(obj=json_values, job_id=st.one_of(st.none(), st.text(max_size=5)))
def test_validate_record_only_raises_invalid_record(obj: Any, job_id: str | None) -> None:
    try:
        r.validate_record(obj, job_id)
    except r.InvalidRecord as exc:
        assert exc.reason


@FAST
@given(data=st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode())))
def test_decode_only_raises_invalid_record(data: bytes) -> None:
    try:
        r.decode(data)
    except r.InvalidRecord as exc:
        assert exc.reason


@FAST
@given(value=st.text(max_size=140))
def test_job_id_validation_never_lets_a_path_through(value: str) -> None:
    try:
        r.validate_job_id(value)
    except r.InvalidInput as exc:
        assert exc.reason.startswith("job id")
        return
    assert "/" not in value and ".." not in value and 1 <= len(value) <= 128
    assert value.isascii() and (value[0].isalnum())


@FAST
@given(payload=st.dictionaries(st.text(max_size=6), json_values, max_size=4))
def test_new_records_round_trip_or_refuse(payload: dict[str, Any]) -> None:
    try:
        rec = r.new_record("j", "demo", payload, START)
    except r.InvalidInput as exc:
        assert "payload" in exc.reason
        return
    assert r.decode(r.encode(rec), "j") == rec
