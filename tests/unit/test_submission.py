"""shared.submission.create on MemoryStore with a recording doorbell."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import records
from shared.config import Settings
from shared.features.table import context
from shared.queue import parse_submission
from shared.storage import job_object, pending_object
from shared.stores.memory import MemoryStore
from shared.submission.create import Conflict, InvalidSubmission, submit
from shared.submission.parse import MAX_PAYLOAD_BYTES, decode_body
from shared.submission.upload_routes import Routes, Uploaded
from shared.submission.uploads import route_upload
from tests.unit.unit_support import Bell

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SETTINGS = Settings.from_env({}, max_batch_jobs=5)


class OrderedStore(MemoryStore):
    """Logs the writes in the order they happen."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None:
        self.writes.append(("pending", job_id))
        super().add_pending(job_id, pool=pool, pipeline=pipeline)

    def add_to_batch(self, batch_id: str, job_id: str) -> None:
        self.writes.append(("batch", job_id))
        super().add_to_batch(batch_id, job_id)

    def create(self, record: dict[str, Any], *, fresh_id: bool = False) -> Any:
        self.writes.append(("record", record["id"]))
        return super().create(record, fresh_id=fresh_id)


def run(store: MemoryStore, bell: Bell, body: Any) -> Any:
    return submit(
        context(store, bell, Settings.from_env({})), parse_submission(body, SETTINGS), NOW
    )


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([], "body must be a JSON object"),
        ({}, "pipeline must be a string"),
        ({"pipeline": "nope"}, "is unknown; known: "),  # then every registered name
        ({"pipeline": 3}, "pipeline must be a string"),
        ({"pipeline": "demo", "colour": 1, "shape": 2}, "unknown key(s) colour, shape"),
        ({"pipeline": "demo", "payload": [1]}, "payload must be a JSON object"),
        ({"pipeline": "demo", "payload": "x"}, "payload must be a JSON object"),
        ({"pipeline": "demo", "id": "a/b"}, "id: "),
        ({"pipeline": "demo", "id": "a..b"}, "must not contain '..'"),
        ({"pipeline": "demo", "id": 5}, "must be a string"),
        ({"pipeline": "demo", "id": ""}, "must not be empty"),
        ({"pipeline": "demo", "batch_id": "../x"}, "batch_id"),
        ({"pipeline": "demo", "max_attempts": 0}, "max_attempts"),
        ({"pipeline": "demo", "max_attempts": 101}, "max_attempts"),
        ({"pipeline": "demo", "max_attempts": True}, "max_attempts"),
        ({"pipeline": "demo", "max_attempts": 2.0}, "max_attempts"),
        ({"pipeline": "demo", "payload": {"stages": "many"}}, "rejected by pipeline 'demo'"),
        ({"pipeline": "upload-digest", "payload": {}}, "rejected by pipeline"),
        ({"jobs": "x"}, "jobs must be a list"),
        ({"jobs": []}, "jobs must not be empty"),
        ({"jobs": [{"pipeline": "demo"}] * 6}, "at most 5 jobs"),
        ({"jobs": [{"pipeline": "demo"}], "extra": 1}, "unknown key(s) extra"),
        ({"jobs": [{"pipeline": "demo"}, 7]}, "jobs[1] must be a JSON object"),
        ({"jobs": [{"pipeline": "demo"}, {"pipeline": "x"}]}, "jobs[1].pipeline"),
        (
            {"jobs": [{"pipeline": "demo", "id": "a"}, {"pipeline": "demo", "id": "a"}]},
            "appears more than once",
        ),
        ({"batch_id": "b1", "jobs": [{"pipeline": "demo", "batch_id": "b2"}]}, "differs"),
        ({"jobs": [{"pipeline": "demo", "batch_id": "b2"}]}, "on the batch"),
    ],
)
def test_invalid_bodies_are_rejected(body: Any, reason: str) -> None:
    with pytest.raises(InvalidSubmission) as info:
        parse_submission(body, SETTINGS)
    assert reason in info.value.reason


def test_every_problem_of_a_batch_is_listed() -> None:
    body = {"jobs": [{"pipeline": "x"}, {"pipeline": "demo", "id": "a/b"}, {"pipeline": "demo"}]}
    with pytest.raises(InvalidSubmission) as info:
        parse_submission(body, SETTINGS)
    problems = info.value.problems
    assert len(problems) == 2
    assert problems[0].startswith("jobs[0].pipeline") and problems[1].startswith("jobs[1].id")


def test_payload_size_is_bounded() -> None:
    big = {"pipeline": "demo", "payload": {"blob": "x" * MAX_PAYLOAD_BYTES}}
    with pytest.raises(InvalidSubmission, match="limit is"):
        parse_submission(big, SETTINGS)


def test_payload_with_lone_surrogate_is_rejected() -> None:
    body = decode_body(b'{"pipeline": "demo", "payload": {"a": "\\ud800"}}')
    with pytest.raises(InvalidSubmission, match="not valid Unicode"):
        parse_submission(body, SETTINGS)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{", "malformed JSON"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b"\xff\xfe", "malformed JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed JSON"),
    ],
)
def test_decode_body_rejects(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidSubmission, match=reason):
        decode_body(raw)


def test_valid_single_and_batch_parse() -> None:
    one = parse_submission({"pipeline": "demo", "id": "j1", "max_attempts": 2}, SETTINGS)
    assert not one.is_batch and one.jobs[0].client_id == "j1" and one.jobs[0].max_attempts == 2
    assert one.jobs[0].payload == {}
    many = parse_submission({"jobs": [{"pipeline": "demo"}, {"pipeline": "demo"}]}, SETTINGS)
    assert many.is_batch and many.batch_id and all(j.batch_id == many.batch_id for j in many.jobs)


def test_generated_batch_id_is_stable_when_every_job_has_an_id() -> None:
    body = {"jobs": [{"pipeline": "demo", "id": "a"}, {"pipeline": "demo", "id": "b"}]}
    first = parse_submission(body, SETTINGS).batch_id
    assert first == parse_submission(body, SETTINGS).batch_id
    anonymous = {"jobs": [{"pipeline": "demo"}]}
    assert (
        parse_submission(anonymous, SETTINGS).batch_id
        != parse_submission(anonymous, SETTINGS).batch_id
    )


# ------------------------------------------------------------------ creation


def test_single_job_created_in_order_and_rung() -> None:
    store, bell = OrderedStore(), Bell()
    result = run(store, bell, {"pipeline": "demo", "payload": {"stages": 2}, "id": "job-1"})
    assert result.created
    assert result.to_json() == {
        "id": "job-1",
        "status": "queued",
        "status_url": "/jobs/job-1",
        "created": True,
    }
    assert store.writes == [("pending", "job-1"), ("record", "job-1")]
    assert bell.rung == ["job-1"]
    record = store.read("job-1").record
    assert (record["pipeline"], record["payload"], record["client_id"]) == (
        "demo",
        {"stages": 2},
        "job-1",
    )
    assert store.names("pending/") == [pending_object("job-1")]


def test_job_without_client_id_gets_a_random_id() -> None:
    store, bell = MemoryStore(), Bell()
    first = run(store, bell, {"pipeline": "demo"}).jobs[0].job_id
    second = run(store, bell, {"pipeline": "demo"}).jobs[0].job_id
    assert first != second
    assert store.read(first).record["client_id"] is None


def test_replay_returns_the_existing_job_with_200_and_writes_nothing() -> None:
    store, bell = OrderedStore(), Bell()
    body = {"pipeline": "demo", "payload": {"stages": 1}, "id": "same"}
    run(store, bell, body)
    before = (list(store.writes), store.read("same").generation)
    replay = run(store, bell, body)
    assert not replay.created
    assert replay.to_json()["created"] is False and replay.to_json()["id"] == "same"
    assert (store.writes, store.read("same").generation) == before
    assert bell.rung == ["same"]


@pytest.mark.parametrize(
    "changed",
    [
        {"pipeline": "demo", "payload": {"stages": 2}, "id": "same"},
        {"pipeline": "demo", "payload": {"stages": 1}, "id": "same", "batch_id": "b"},
    ],
)
def test_same_id_other_content_is_a_conflict(changed: dict[str, Any]) -> None:
    store, bell = OrderedStore(), Bell()
    run(store, bell, {"pipeline": "demo", "payload": {"stages": 1}, "id": "same"})
    writes, generation = list(store.writes), store.read("same").generation
    with pytest.raises(Conflict) as info:
        run(store, bell, changed)
    assert "'same'" in info.value.reason
    assert store.writes == writes and store.read("same").generation == generation


FULL = {
    "pipeline": "demo",
    "payload": {"stages": 1},
    "id": "whole",
    "run_at": "2026-11-30T10:00:00Z",
    "expires_at": "2026-12-01T10:00:00Z",
    "timeout_seconds": 60,
    "unique_key": "nightly",
    "concurrency_key": "customer-1",
    "max_running": 2,
    "rate": "5/s",
}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"run_at": "2026-11-30T11:00:00Z"}, ["run_at"]),
        ({"run_at": None}, ["run_at"]),
        ({"expires_at": "2026-12-02T10:00:00Z"}, ["expires_at"]),
        ({"timeout_seconds": 61}, ["timeout_seconds"]),
        ({"unique_key": "weekly"}, ["unique_key"]),
        ({"concurrency_key": "customer-2"}, ["concurrency_key"]),
        ({"max_running": 3, "rate": None}, ["max_running", "rate"]),
        ({"payload": {"stages": 2}, "timeout_seconds": None}, ["payload", "timeout_seconds"]),
    ],
)
def test_a_replay_compares_every_field_and_names_each_that_differs(
    change: dict[str, Any], named: list[str]
) -> None:
    store, bell = OrderedStore(), Bell()
    run(store, bell, FULL)
    assert run(store, bell, dict(FULL)).jobs[0].created is False  # the same request: 200
    writes, generation = list(store.writes), store.read("whole").generation
    replay = {k: v for k, v in {**FULL, **change}.items() if v is not None}
    with pytest.raises(Conflict) as info:
        run(store, bell, replay)
    assert f"different {', '.join(named)};" in info.value.reason
    assert store.writes == writes and store.read("whole").generation == generation


def test_a_replay_of_a_relative_time_matches_the_time_it_resolved_to() -> None:
    store, bell = MemoryStore(), Bell()
    body = {"pipeline": "demo", "id": "later", "delay_seconds": 600, "ttl_seconds": 7200}
    run(store, bell, body)
    assert run(store, bell, body).jobs[0].created is False
    with pytest.raises(Conflict, match="different run_at, expires_at;"):
        run(store, bell, {"pipeline": "demo", "id": "later"})


def test_corrupt_existing_record_is_a_conflict_and_untouched() -> None:
    store = MemoryStore()
    store.put_raw("broken", b"{not json")
    with pytest.raises(Conflict, match="unreadable"):
        run(store, Bell(), {"pipeline": "demo", "id": "broken"})
    assert store.raw(store.bucket_name, job_object("broken")).data == b"{not json"  # type: ignore[union-attr]
    assert store.names("pending/") == []


def test_batch_creates_markers_records_then_one_ring_many() -> None:
    store, bell = OrderedStore(), Bell()
    body = {"batch_id": "cat-1", "jobs": [{"pipeline": "demo", "id": f"p{i}"} for i in range(3)]}
    result = run(store, bell, body)
    body = result.to_json()
    assert result.created
    assert body["batch_id"] == "cat-1" and body["batch_url"] == "/batches/cat-1"
    assert (body["created"], body["existing"]) == (3, 0)
    assert [j["id"] for j in body["jobs"]] == ["p0", "p1", "p2"]
    for i in range(3):
        mine = [w for w in store.writes if w[1] == f"p{i}"]
        # the batch marker follows the record that proves the membership (issue 16)
        assert mine == [("pending", f"p{i}"), ("record", f"p{i}"), ("batch", f"p{i}")]
    assert sorted(bell.rung) == ["p0", "p1", "p2"]
    assert store.list_batch("cat-1") == ["p0", "p1", "p2"]


def test_batch_with_one_conflict_writes_nothing() -> None:
    store, bell = OrderedStore(), Bell()
    run(store, bell, {"pipeline": "demo", "payload": {"stages": 1}, "id": "taken"})
    writes = list(store.writes)
    body = {
        "jobs": [
            {"pipeline": "demo", "id": "new-1"},
            {"pipeline": "demo", "id": "taken", "payload": {"stages": 3}},
        ]
    }
    with pytest.raises(Conflict):
        run(store, bell, body)
    assert store.writes == writes


def test_batch_replay_is_200_and_partial_replay_is_202() -> None:
    store, bell = MemoryStore(), Bell()
    body = {"jobs": [{"pipeline": "demo", "id": "x1"}, {"pipeline": "demo", "id": "x2"}]}
    first = run(store, bell, body)
    replay = run(store, bell, body)
    assert (first.created, replay.created) == (True, False)
    assert replay.batch_id == first.batch_id
    more = {
        "jobs": body["jobs"] + [{"pipeline": "demo", "id": "x3"}],
        "batch_id": first.batch_id,
    }
    partial = run(store, bell, more)
    counts = partial.to_json()
    assert partial.created and (counts["created"], counts["existing"]) == (1, 2)
    assert bell.rung.count("x1") == 1 and bell.rung.count("x3") == 1


def test_failed_doorbell_still_creates_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryStore()
    result = run(store, Bell(fail=True), {"pipeline": "demo", "id": "quiet"})
    assert result.created and store.read("quiet").record["status"] == "queued"
    assert store.names("pending/") == [pending_object("quiet")]
    warnings = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(w["severity"] == "WARNING" and "doorbell" in w["message"] for w in warnings)


def test_failed_batch_doorbell_still_creates_the_jobs() -> None:
    store = MemoryStore()
    result = run(store, Bell(fail=True), {"jobs": [{"pipeline": "demo"}, {"pipeline": "demo"}]})
    assert result.created and len(store.names("jobs/")) == 2


def test_single_job_in_a_named_batch() -> None:
    store = MemoryStore()
    result = run(store, Bell(), {"pipeline": "demo", "id": "solo", "batch_id": "grp"})
    body = result.to_json()
    assert body["batch_id"] == "grp" and body["batch_url"] == "/batches/grp"
    assert store.list_batch("grp") == ["solo"]


# ------------------------------------------------------------------ uploads


def upload(store: MemoryStore, bell: Bell, generation: int = 7) -> Any:
    obj = Uploaded("up", "in/a.csv", generation, content_type="text/csv", size=12)
    done = route_upload(context(store, bell, SETTINGS), Routes(), obj, NOW)
    assert done.job is not None
    return done.job


def test_upload_job_is_created_once_per_generation() -> None:
    store, bell = MemoryStore(), Bell()
    first = upload(store, bell)
    again = upload(store, bell)
    newer = upload(store, bell, generation=8)
    assert first.created and not again.created and newer.created
    assert first.job_id == again.job_id == records.upload_job_id("up", "in/a.csv", 7)
    assert bell.rung == [first.job_id, newer.job_id]
    record = store.read(first.job_id).record
    assert record["pipeline"] == "upload-digest"
    assert record["payload"] == {
        "bucket": "up",
        "name": "in/a.csv",
        "generation": 7,
        "content_type": "text/csv",
        "size": 12,
    }
    assert record["source"] == {"bucket": "up", "name": "in/a.csv", "generation": 7}


def test_upload_over_corrupt_record_is_a_conflict() -> None:
    store = MemoryStore()
    store.put_raw(records.upload_job_id("up", "in/a.csv", 7), b"\x00")
    with pytest.raises(Conflict, match="unreadable"):
        upload(store, Bell())


# ------------------------------------------------------------------ fuzz

from hypothesis import given  # noqa: E402
from hypothesis import settings as hsettings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
)
_json = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
_ids = st.text(alphabet="ab1._-/", min_size=1, max_size=6) | _json
_job = st.fixed_dictionaries(
    {"pipeline": st.sampled_from(["demo", "upload-digest", "nope"]) | _json},
    optional={
        "payload": st.dictionaries(
            st.sampled_from(["stages", "bucket", "name", "k"]), _json, max_size=3
        )
        | _json,
        "id": _ids,
        "max_attempts": st.integers(-1, 102) | _json,
        "x": _json,
    },
)
_good_job = st.fixed_dictionaries(
    {"pipeline": st.just("demo")},
    optional={
        "payload": st.just({}) | st.fixed_dictionaries({"stages": st.integers(0, 5)}),
        "id": st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),
        "max_attempts": st.integers(1, 100),
    },
)
_any_job = _good_job | _job
_body = (
    _json
    | _any_job
    | st.fixed_dictionaries(
        {"jobs": st.lists(_any_job, max_size=4) | _json}, optional={"batch_id": _ids}
    )
)


@hsettings(max_examples=300, deadline=None)
@given(body=_body)
def test_any_body_is_a_submission_or_a_400(body: Any) -> None:
    try:
        parsed = parse_submission(decode_body(json.dumps(body).encode()), SETTINGS)
    except InvalidSubmission as exc:
        assert exc.reason
        return
    store = MemoryStore()
    result = submit(context(store, Bell(), Settings.from_env({})), parsed, NOW)
    assert result.created and len(store.names("jobs/")) == len(parsed.jobs)
