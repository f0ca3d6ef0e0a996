"""terraform/uploads.tf, offline: its locals are evaluated on routes files (hcl_eval) and
must make one storage notification per needed bucket and prefix, no wider, the same set
shared/submission/upload_routes.py computes; a bad route fails the plan naming it."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import InvalidInput
from shared.submission.upload_routes import parse
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import block, config, resources, unquote

ORDER = (
    "upload_routes",
    "upload_buckets",
    "upload_unrouted",
    "upload_needs",
    "upload_notifications",
    "upload_pipelines",
    "upload_route_problems",
)
MODULE_TEXT = 'NAME = "csv-summary"\n'  # what the example module's file holds
UPLOADS = "reclaim-uploads"


def plan(doc: dict[str, Any], uploads_prefix: str = "") -> dict[str, Any]:
    """uploads.tf's locals for a routes file (the file's text and the modules' text given)."""
    found: dict[str, Any] = {"upload_doc": doc, "upload_module_text": MODULE_TEXT}
    for name in ORDER:
        found[name] = evaluate(
            unquote(config()["locals"][name]), {"uploads_prefix": uploads_prefix}, found
        )
    return found


def route(**over: Any) -> dict[str, Any]:
    return {"name": "csv", "prefix": "reports/", "pipeline": "csv-summary", **over}


def pairs(notifications: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((n["bucket"] or UPLOADS, n["prefix"]) for n in notifications.values())


DOCS = [
    {"routes": [route()]},
    {"unrouted": "ignore", "routes": [route()]},
    {
        "unrouted": "ignore",
        "buckets": ["acme-inbox"],
        "routes": [
            route(suffixes=[".csv"]),
            route(name="renders", prefix="renders/", pipeline="demo"),
            route(name="inbox", prefix="in/", bucket="acme-inbox", pipeline="demo"),
            route(name="wav", prefix="reports/", suffixes=[".wav"], pipeline="demo"),
        ],
    },
    {
        "unrouted": "ignore",
        "routes": [
            route(suffixes=[".csv"]),
            route(name="deep", prefix="reports/x/", suffixes=[".png"], pipeline="demo"),
        ],
    },
    {},
]


@pytest.mark.parametrize("doc", DOCS)
def test_one_notification_per_needed_prefix_the_same_set_as_the_code(doc: dict[str, Any]) -> None:
    planned = plan(doc)
    assert planned["upload_route_problems"] == []
    expected = parse(doc, None).notifications(UPLOADS)
    assert pairs(planned["upload_notifications"]) == expected
    assert len(planned["upload_notifications"]) == len(set(expected))


def test_no_wider_than_needed() -> None:
    only = plan({"unrouted": "ignore", "routes": [route()]})["upload_notifications"]
    assert pairs(only) == [(UPLOADS, "reports/")]  # not the whole bucket
    nested = plan(DOCS[3])["upload_notifications"]
    assert pairs(nested) == [(UPLOADS, "reports/")]  # reports/x/ is covered: no second one
    default = plan({"routes": [route()]}, uploads_prefix="in/")["upload_notifications"]
    assert pairs(default) == [(UPLOADS, "in/"), (UPLOADS, "reports/")]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"routes": [route(pipeline="nope")]}, 'route csv: pipeline "nope" is unknown'),
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
            'route csv: pipeline "gone" is unknown',
        ),
        ({"routes": [route(bucket="elsewhere")]}, 'route csv: bucket "elsewhere" is unknown'),
        (
            {"routes": [route(), route(name="deeper", prefix="reports/2026/")]},
            'route deeper: prefix "reports/2026/" overlaps route csv',
        ),
        (
            {"routes": [route(suffixes=[".csv"]), route(name="s", suffixes=["s.csv"])]},
            "route s: prefix",
        ),
        (
            {
                "routes": [
                    route(content_types=["text/csv"]),
                    route(name="t", content_types=["TEXT/CSV"]),
                ]
            },
            "route t: prefix",
        ),
    ],
)
def test_a_bad_route_fails_the_plan_naming_it(doc: dict[str, Any], words: str) -> None:
    problems = plan(doc)["upload_route_problems"]
    assert len(problems) == 1 and words in problems[0], problems
    note = resources("google_storage_notification")["uploads"]
    (check,) = block(note, "lifecycle")["precondition"]
    assert unquote(check["condition"]) == "length(local.upload_route_problems) == 0"
    assert 'join("; ", local.upload_route_problems)' in unquote(check["error_message"])


def test_told_apart_by_suffix_or_type_is_no_overlap() -> None:
    doc = {
        "routes": [
            route(suffixes=[".csv"]),
            route(name="w", suffixes=[".wav"]),
            route(name="p", content_types=["image/png"]),
            route(name="j", prefix="reports/x/", content_types=["image/jpeg"]),
        ]
    }
    with pytest.raises(InvalidInput):  # the code refuses p (no filter of the same kind as csv)
        parse(doc, None)
    assert plan(doc)["upload_route_problems"]  # and so does the plan
    ok = {"routes": [route(suffixes=[".csv"]), route(name="w", suffixes=[".wav"])]}
    assert plan(ok)["upload_route_problems"] == [] and parse(ok, None)


def test_the_notification_resource_follows_the_routes() -> None:
    note = resources("google_storage_notification")["uploads"]
    assert unquote(note["for_each"]) == "local.upload_notifications"
    assert (
        unquote(note["object_name_prefix"]) == 'each.value.prefix == "" ? null : each.value.prefix'
    )
    assert "google_storage_bucket.uploads.name" in unquote(note["bucket"])
    assert unquote(note["topic"]) == 'google_pubsub_topic.topics["uploads"].id'
    assert unquote(note["payload_format"]) == "JSON_API_V1"
    assert "time_sleep.grants_propagate" in str(note["depends_on"])
    env = config()["locals"]["reclaim_env"]
    assert unquote(env["RECLAIM_UPLOADS_FILE"]) == "local.uploads_setting"
    assert unquote(env["RECLAIM_UPLOADS_BUCKET"]) == "local.buckets.uploads"
