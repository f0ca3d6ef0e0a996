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
    "upload_route_buckets",
    "upload_needs",
    "upload_notifications",
    "upload_pipelines",
    "upload_notification_buckets",
    "upload_bucket_problems",
    "upload_route_problems",
)
MODULE_TEXT = 'NAME = "csv-summary"\n'  # what the example module's file holds
UPLOADS = "reclaim-uploads"


def plan(
    doc: dict[str, Any], uploads_prefix: str = "", projects: dict[str, str] | None = None
) -> dict[str, Any]:
    """uploads.tf's locals for a routes file (the file's text and the modules' text given;
    the uploads bucket named UPLOADS)."""
    found: dict[str, Any] = {
        "upload_doc": doc,
        "upload_module_text": MODULE_TEXT,
        "upload_home": UPLOADS,
        "builtin_pipelines": [unquote(p) for p in config()["locals"]["builtin_pipelines"]],
    }
    variables = {"uploads_prefix": uploads_prefix, "upload_bucket_projects": projects or {}}
    for name in ORDER:
        found[name] = evaluate(unquote(config()["locals"][name]), variables, found)
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


def _many(count: int, bucket: str | None = None) -> dict[str, Any]:
    extra = {"bucket": bucket} if bucket else {}
    return {
        "unrouted": "ignore",
        "buckets": [bucket] if bucket else [],
        "routes": [route(name=f"r{i}", prefix=f"p{i}/", **extra) for i in range(count)],
    }


def test_a_bucket_needing_more_than_ten_notifications_fails_the_plan_naming_the_routes() -> None:
    """F2: Cloud Storage allows 10 notifications per bucket and event type
    (cloud.google.com/storage/docs/pubsub-notifications): the 11th would fail the apply."""
    assert plan(_many(10))["upload_route_problems"] == []
    problems = plan(_many(11))["upload_route_problems"]
    assert len(problems) == 1 and f"bucket {UPLOADS} needs 11" in problems[0]
    assert "r0" in problems[0] and "r10" in problems[0]
    elsewhere = plan(_many(11, "acme-inbox"))["upload_route_problems"]
    assert len(elsewhere) == 1 and "bucket acme-inbox needs 11" in elsewhere[0]
    # routes under one prefix share its notification: 11 routes, one notification
    nested = {
        "unrouted": "ignore",
        "routes": [route(name=f"r{i}", prefix="in/", suffixes=[f".x{i}"]) for i in range(11)],
    }
    assert plan(nested)["upload_route_problems"] == [] and parse(nested, None)
    assert len(plan(nested)["upload_notifications"]) == 1


def test_a_route_naming_the_uploads_bucket_shares_its_notifications() -> None:
    """F14: the uploads bucket named by name is the bucket "" names, as the code reads it:
    one notification, not two overlapping ones (every upload delivered twice)."""
    doc = {"buckets": [UPLOADS], "routes": [route(bucket=UPLOADS, prefix="")]}
    planned = plan(doc)
    assert pairs(planned["upload_notifications"]) == parse(doc, None).notifications(UPLOADS)
    assert pairs(planned["upload_notifications"]) == [(UPLOADS, "")]


def test_a_routed_bucket_of_another_project_has_its_agent_granted_publish() -> None:
    """F2: the project owning a bucket publishes its notifications, as its own Cloud
    Storage service agent: upload_bucket_projects names it, terraform grants it publisher
    on the uploads topic before any notification is made."""
    agents = config()["data"]["google_storage_project_service_account"]["routed"]
    assert "var.upload_bucket_projects" in unquote(agents["for_each"])
    assert unquote(agents["project"]) == "each.value"
    grant = resources("google_pubsub_topic_iam_member")["routed_gcs_agents_publish"]
    assert unquote(grant["for_each"]) == "data.google_storage_project_service_account.routed"
    assert unquote(grant["role"]) == "roles/pubsub.publisher"
    assert unquote(grant["member"]) == "serviceAccount:${each.value.email_address}"
    assert unquote(grant["topic"]) == 'google_pubsub_topic.topics["uploads"].name'
    waited = resources("time_sleep")["grants_propagate"]["depends_on"]
    assert "google_pubsub_topic_iam_member.routed_gcs_agents_publish" in map(unquote, waited)
    doc = {"buckets": ["acme-inbox"], "routes": [route(bucket="acme-inbox")]}
    assert plan(doc, projects={"acme-inbox": "acme-other"})["upload_route_problems"] == []
    typo = plan(doc, projects={"acme-inbx": "acme-other"})["upload_route_problems"]
    assert typo and "acme-inbx" in typo[0]
