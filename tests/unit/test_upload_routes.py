"""Upload routes (pure): parsing refuses a bad file naming the route; matching is first
match in file order; payloads and batch ids; the notifications the routes need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.errors import InvalidInput
from shared.submission.upload_routes import Routes, Uploaded, load, overlap, parse, uploads_file

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ("upload-digest", "demo", "csv-summary", "webhook")
DEFAULT = "reclaim-uploads"


def route(**over: Any) -> dict[str, Any]:
    return {"name": "csv", "prefix": "reports/", "pipeline": "csv-summary", **over}


def refused(doc: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        parse(doc, KNOWN)
    return info.value.reason


def obj(name: str, **over: Any) -> Uploaded:
    return Uploaded(**{"bucket": DEFAULT, "name": name, "generation": 3, **over})


def test_the_repository_example_parses_and_routes_csv_to_csv_summary() -> None:
    routes = load(ROOT / "pipelines" / "uploads.json", KNOWN)
    assert routes.unrouted == "upload-digest"
    found = routes.route_for(obj("reports/2026-12/a.csv"), DEFAULT)
    assert found is not None and found.pipeline == "csv-summary"
    assert routes.route_for(obj("reports/2026-12/a.txt"), DEFAULT) is None
    closing = routes.route_for(obj("reports/2026-12/_done"), DEFAULT)
    assert closing is not None and closing.closes(obj("reports/2026-12/_done"), DEFAULT)


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"routes": [route(pipeline="nope")]}, ["routes[0] (csv)", "pipeline 'nope' is unknown"]),
        ({"routes": [route(bucket="elsewhere")]}, ["routes[0] (csv)", "bucket 'elsewhere'"]),
        (
            {"routes": [route(), route(name="deeper", prefix="reports/2026/")]},
            ["route deeper", "overlaps route csv"],
        ),
        ({"routes": [route(), route()]}, ["used twice: csv"]),
        ({"routes": [route(extra=1)]}, ["routes[0] (csv)", "unknown key(s) extra"]),
        ({"routes": [route(payload={"name": "x"})]}, ["routes[0] (csv)", "payload"]),
        ({"routes": [route(metadata={"bucket": "b"})]}, ["routes[0] (csv)", "metadata"]),
        (
            {"routes": [route(batch={"from": "folder", "on_complete": {"pipeline": "demo"}})]},
            ["routes[0] (csv)", "close_with"],
        ),
        (
            {
                "routes": [
                    route(
                        batch={
                            "from": "folder",
                            "close_with": "_done",
                            "on_complete": {"pipeline": "gone"},
                        }
                    )
                ]
            },
            ["routes[0] (csv)", "pipeline 'gone'"],
        ),
        ({"routes": [route(batch={"from": "metadata"})]}, ["routes[0] (csv)", "batch.key"]),
        ({"unrouted": "drop"}, ["unrouted must be one of"]),
        ({"routes": {}}, ["routes must be a list"]),
        ([], ["routes"]),
    ],
)
def test_a_bad_file_is_refused_naming_the_route(doc: Any, words: list[str]) -> None:
    reason = refused(doc)
    for word in words:
        assert word in reason


def test_nested_prefixes_told_apart_by_suffix_or_type_are_allowed() -> None:
    a = parse({"routes": [route(suffixes=[".csv"])]}, KNOWN).routes[0]
    b = parse({"routes": [route(name="b", prefix="reports/x/", suffixes=[".wav"])]}, KNOWN).routes[
        0
    ]
    c = parse({"routes": [route(name="c", suffixes=["s.csv"])]}, KNOWN).routes[0]
    assert not overlap(a, b) and overlap(a, c)
    typed = parse(
        {
            "routes": [
                route(content_types=["text/csv"]),
                route(name="img", content_types=["image/png"]),
            ]
        },
        KNOWN,
    )
    assert len(typed.routes) == 2
    assert parse({"routes": [route(), route(name="other", prefix="renders/")]}, KNOWN).routes


def test_first_match_in_file_order_with_suffixes_and_content_types() -> None:
    routes = parse(
        {
            "routes": [
                route(name="csv", suffixes=[".csv"]),
                route(name="typed", content_types=["Text/Plain"], suffixes=[".txt"]),
                route(name="wav", prefix="audio/", pipeline="demo"),
            ]
        },
        KNOWN,
    )
    pick = lambda o: getattr(routes.route_for(o, DEFAULT), "name", None)  # noqa: E731
    assert pick(obj("reports/a.csv")) == "csv"
    assert pick(obj("reports/a.txt", content_type="text/plain; charset=utf-8")) == "typed"
    assert pick(obj("reports/a.txt", content_type="image/png")) is None
    assert pick(obj("audio/x.wav")) == "wav"
    assert pick(obj("audio/x.wav", bucket="other")) is None


def test_payload_has_fixed_fields_metadata_fields_and_always_the_object() -> None:
    routes = parse(
        {
            "routes": [
                route(payload={"max_rows": 10}, metadata={"delimiter": "sep", "who": "owner"})
            ]
        },
        KNOWN,
    )
    upload = obj("reports/a.csv", content_type="text/csv", size=9, metadata={"sep": ";"})
    assert routes.routes[0].build_payload(upload) == {
        "max_rows": 10,
        "delimiter": ";",
        "bucket": DEFAULT,
        "name": "reports/a.csv",
        "generation": 3,
        "content_type": "text/csv",
        "size": 9,
    }


def test_batch_ids_from_the_folder_or_a_metadata_field() -> None:
    folder = parse({"routes": [route(batch={"from": "folder"})]}, KNOWN).routes[0]
    a = folder.batch_id(obj("reports/2026 12/a.csv"))
    assert a == folder.batch_id(obj("reports/2026 12/b.csv"))
    assert a is not None and a.startswith("csv-reports-2026-12-")
    assert folder.batch_id(obj("reports/2026-12/a.csv")) != a  # the hash keeps keys apart
    meta = parse({"routes": [route(batch={"from": "metadata", "key": "order"})]}, KNOWN).routes[0]
    assert meta.batch_id(obj("reports/a.csv", metadata={"order": "o-1"})) == meta.batch_id(
        obj("reports/zz.csv", metadata={"order": "o-1"})
    )
    assert meta.batch_id(obj("reports/a.csv")) is None


def test_notifications_are_one_per_needed_prefix_and_no_wider() -> None:
    doc = {
        "unrouted": "ignore",
        "buckets": ["acme-inbox"],
        "routes": [
            route(),
            route(name="renders", prefix="renders/", pipeline="demo"),
            route(name="inbox", prefix="in/", bucket="acme-inbox", pipeline="demo"),
        ],
    }
    routes = parse(doc, KNOWN)
    assert routes.notifications(DEFAULT) == [
        ("acme-inbox", "in/"),
        (DEFAULT, "renders/"),
        (DEFAULT, "reports/"),
    ]
    assert routes.notified(DEFAULT, "renders/x", DEFAULT)
    assert not routes.notified(DEFAULT, "other/x", DEFAULT)
    everything = parse({**doc, "unrouted": "upload-digest"}, KNOWN)
    assert everything.notifications(DEFAULT) == [("acme-inbox", "in/"), (DEFAULT, "")]
    assert Routes().notifications(DEFAULT) == [(DEFAULT, "")]


def test_an_eleventh_notification_on_a_bucket_is_refused_as_the_plan_refuses_it() -> None:
    """Issue 42, F2: Cloud Storage allows 10 notifications per bucket and event type;
    terraform's plan refuses an 11th (tests/terraform/test_tf_uploads.py), and the file's
    parser must too, or `make dev` runs routes a deploy cannot make."""

    def doc(n: int, bucket: str | None) -> dict[str, Any]:
        extra = {"bucket": bucket} if bucket else {}
        routes = [route(name=f"r{i}", prefix=f"p{i}/", pipeline="demo", **extra) for i in range(n)]
        return {"unrouted": "ignore", "buckets": ["acme-inbox"], "routes": routes}

    assert len(parse(doc(10, "acme-inbox"), KNOWN).notifications(DEFAULT)) == 10
    assert "bucket acme-inbox needs 11 notifications" in refused(doc(11, "acme-inbox"))
    assert "bucket uploads needs 11 notifications" in refused(doc(11, None))
    shared = doc(11, "acme-inbox")
    for r in shared["routes"]:
        r["suffixes"] = [".csv"]  # told apart from the route below by their filters
    shared["routes"].append(
        route(name="all", prefix="", pipeline="demo", bucket="acme-inbox", suffixes=[".zip"])
    )
    assert parse(shared, KNOWN)  # "" covers the eleven: one notification


def test_the_file_is_found_through_the_setting(tmp_path: Path) -> None:
    assert uploads_file({}) is None and load(None) == Routes()
    assert uploads_file({"RECLAIM_UPLOADS_FILE": "pipelines/uploads.json"}) == (
        ROOT / "pipelines" / "uploads.json"
    )
    bad = tmp_path / "uploads.json"
    bad.write_text(json.dumps({"routes": [route(pipeline="nope")]}))
    with pytest.raises(InvalidInput, match="routes\\[0\\] \\(csv\\)"):
        load(uploads_file({"RECLAIM_UPLOADS_FILE": str(bad)}), KNOWN)
    with pytest.raises(InvalidInput, match="does not exist"):
        load(tmp_path / "missing.json", KNOWN)
