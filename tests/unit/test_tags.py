"""Job tags (shared.features.tags) through the front door on MemoryStore: the rules at submit, the
tags/ markers written before the record, the views, the dashboard's job page, and the
listing filter that reads the markers instead of every record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flask
import pytest

from reclaim import cli
from shared.dashboard import app as dashboard_app
from shared.dashboard import figures
from shared.errors import InvalidInput, InvalidSubmission
from shared.features import tags
from shared.jobs import JobRecord, JobStatus
from shared.queue import Queue, parse_submission
from shared.storage import Stored
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, settings


class Ordered(MemoryStore):
    """Logs the writes a submit makes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def put_blob(self, name: str, data: bytes, *, generation: int) -> int:
        self.log.append(name)
        return super().put_blob(name, data, generation=generation)

    def create(self, record: JobRecord, *, fresh_id: bool = False) -> Stored:
        self.log.append(f"record {record['id']}")
        return super().create(record, fresh_id=fresh_id)


def queue_on(store: MemoryStore) -> Queue:
    return Queue(store, Bell(), settings())


def post(queue: Queue, body: dict[str, Any]) -> Any:
    return queue.submit(parse_submission(body, queue.settings))


def tagged_batch(queue: Queue, batch_id: str, *jobs: tuple[str, str | None]) -> None:
    """A batch of jobs (id, its one tag or None)."""
    members = [{"pipeline": "demo", "id": i, **({"tags": [t]} if t else {})} for i, t in jobs]
    post(queue, {"batch_id": batch_id, "jobs": members})


def problems_of(body: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidSubmission) as caught:
        parse_submission(body, settings())
    return list(caught.value.problems)


# --- the rules


def test_good_tags_become_the_record_field_in_the_order_given() -> None:
    fields = parse_submission({"pipeline": "demo", "tags": ["b", "a-1", "x.y_z"]}, settings())
    assert dict(fields.jobs[0].fields) == {"tags": ["b", "a-1", "x.y_z"]}
    assert dict(parse_submission({"pipeline": "demo", "tags": []}, settings()).jobs[0].fields) == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("nightly", "tags must be a list of strings"),
        ([f"t{i}" for i in range(tags.MAX_TAGS + 1)], f"at most {tags.MAX_TAGS}"),
        (["x" * (tags.MAX_TAG_LENGTH + 1)], "is not 1 to 32"),
        (["Nightly"], "tag 'Nightly' is not"),
        (["a b"], "tag 'a b' is not"),
        (["-a"], "tag '-a' is not"),
        ([""], "tag '' is not"),
        ([7], "a tag must be a string, got int"),
        (["a", "b", "a"], "names a more than once"),
    ],
)
def test_a_bad_list_is_a_400_with_its_reason(value: Any, reason: str) -> None:
    problems = problems_of({"jobs": [{"pipeline": "demo"}, {"pipeline": "demo", "tags": value}]})
    assert len(problems) == 1 and problems[0].startswith("jobs[1].tags")
    assert reason in problems[0]


def test_every_bad_tag_of_a_batch_is_listed() -> None:
    body = {
        "jobs": [{"pipeline": "demo", "tags": ["A"]}, {"pipeline": "demo", "tags": ["ok", "B"]}]
    }
    assert [p.split(":")[0] for p in problems_of(body)] == ["jobs[0].tags", "jobs[1].tags"]


# --- submit, views, listing


def test_markers_are_written_before_the_record_and_a_replay_rewrites_none() -> None:
    store = Ordered()
    queue = queue_on(store)
    body = {"pipeline": "demo", "id": "j1", "tags": ["night", "team-a"]}
    assert post(queue, body).jobs[0].created
    assert store.log == ["tags/night/j1", "tags/team-a/j1", "record j1"]
    assert not post(queue, body).jobs[0].created
    assert store.log == ["tags/night/j1", "tags/team-a/j1", "record j1"]
    assert store.names("tags/") == ["tags/night/j1", "tags/team-a/j1"]


def test_a_job_without_tags_writes_no_marker_and_shows_none() -> None:
    store = MemoryStore()
    queue = queue_on(store)
    post(queue, {"pipeline": "demo", "id": "plain"})
    assert store.names("tags/") == [] and "tags" not in queue.get("plain").to_json()


def test_the_views_show_the_tags() -> None:
    queue = queue_on(MemoryStore())
    tagged_batch(queue, "b1", ("t1", "red"), ("t2", None))
    assert queue.get("t1").to_json()["tags"] == ["red"]
    members = {m["id"]: m for m in queue.get_batch("b1").to_json()["jobs"]}
    assert members["t1"]["tags"] == ["red"] and "tags" not in members["t2"]


def test_list_by_tag_reads_the_marked_records_only_and_the_record_decides() -> None:
    store = MemoryStore()
    queue = queue_on(store)
    for i in range(6):
        post(queue, {"pipeline": "demo", "id": f"j{i}", "tags": ["even" if i % 2 == 0 else "odd"]})
    store.put_blob(tags.marker_name("even", "j1"), b"", generation=0)  # stale: j1 is odd
    store.put_blob(tags.marker_name("even", "lost"), b"", generation=0)  # no record came
    store.calls.clear()
    found = queue.list_jobs(where={"tag": "even"})
    assert [r["id"] for r in found.records] == ["j0", "j2", "j4"]
    assert found.missing == ["lost"]
    # never the whole history; the lost record is looked for under its old name too
    assert store.calls["read"] == 6 and store.calls["list"] == 1
    assert [r["id"] for r in queue.list_jobs(where={"tag": "even"}, limit=2).records] == [
        "j0",
        "j2",
    ]
    assert queue.list_jobs(where={"tag": "none-such"}).records == []


def test_list_by_tag_combines_with_status_and_batch() -> None:
    queue = queue_on(MemoryStore())
    tagged_batch(queue, "b1", ("a", "x"), ("b", None))
    post(queue, {"pipeline": "demo", "id": "c", "tags": ["x"]})
    queue.cancel("c", by="test")
    assert [r["id"] for r in queue.list_jobs(where={"tag": "x"}, batch="b1").records] == ["a"]
    cancelled = queue.list_jobs(where={"tag": "x"}, status=JobStatus.CANCELLED)
    assert [r["id"] for r in cancelled.records] == ["c"]


@pytest.mark.parametrize("value", ["Bad", "a/b", "..", ""])
def test_an_invalid_tag_filter_is_refused_before_anything_is_read(value: str) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidInput):
        queue_on(store).list_jobs(where={"tag": value})
    assert sum(store.calls.values()) == 0


def test_reclaim_list_takes_a_tag() -> None:
    args = cli.build_parser().parse_args(["list", "--tag", "nightly", "--status", "failed"])
    assert (args.where_tag, args.status) == ("nightly", "failed")


def test_the_dashboards_job_page_shows_the_tags(tmp_path: Path) -> None:
    clock = Clock()
    queue = Queue(MemoryStore(), Bell(), settings(), clock=clock)
    post(queue, {"pipeline": "demo", "id": "d1", "tags": ["night", "team-a"]})
    post(queue, {"pipeline": "demo", "id": "d2"})
    web = flask.Flask(__name__, static_folder=None)

    @web.route("/<path:path>")
    def any_path(path: str) -> flask.Response:
        source = figures.LogFiles(tmp_path)
        return dashboard_app.handle(flask.request, queue, source, clock=clock, peek=lambda p, s: [])

    page = web.test_client().get("/jobs/d1").get_data(as_text=True)
    assert '<dt>tags</dt><dd class="fact-tags">night, team-a</dd>' in page
    assert "<dt>tags</dt>" not in web.test_client().get("/jobs/d2").get_data(as_text=True)
