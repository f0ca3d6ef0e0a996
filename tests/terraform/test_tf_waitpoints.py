"""The waitpoints function (terraform/waitpoints.tf, docs/waiting.md): its own deployment
of POST /waitpoints/<token>, invoked by var.waitpoint_invokers (allUsers by default: the
signed token is the caller's proof), running as a service account that holds only the
records buckets and the jobs topics; claim is told its URL, and it is not told its own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import (
    ROOT,
    block,
    config,
    optional_defaults,
    resources,
    unquote,
    variable_default,
)

FN = "google_cloudfunctions2_function.waitpoints"
SA = "google_service_account.waitpoints"


def _iam_members() -> dict[str, dict[str, Any]]:
    return {
        f"{rtype}.{name}": b
        for rtype, named in config()["resource"].items()
        if rtype.endswith("_iam_member")
        for name, b in named.items()
    }


def test_only_the_waitpoint_invokers_invoke_it() -> None:
    on_it = {
        address: b
        for address, b in _iam_members().items()
        if unquote(b.get("name", "")) == f"{FN}.name"
    }
    assert list(on_it) == ["google_cloud_run_v2_service_iam_member.waitpoint_invokers"]
    grant = on_it["google_cloud_run_v2_service_iam_member.waitpoint_invokers"]
    assert unquote(grant["role"]) == "roles/run.invoker"
    assert unquote(grant["for_each"]) == "toset(var.waitpoint_invokers)"
    assert [unquote(m).strip('"') for m in variable_default("waitpoint_invokers")] == ["allUsers"]


def test_it_runs_as_its_own_account_with_only_the_records_and_the_jobs_topics() -> None:
    fn = resources("google_cloudfunctions2_function")["waitpoints"]
    assert unquote(block(fn, "service_config")["service_account_email"]) == f"{SA}.email"
    granted = {
        address: (unquote(b["role"]), unquote(b.get("bucket") or b.get("topic")))
        for address, b in _iam_members().items()
        if f"${{{SA}.email}}" in unquote(b["member"])
    }
    assert granted == {
        "google_storage_bucket_iam_member.waitpoints_records": (
            "roles/storage.objectUser",
            "google_storage_bucket.records.name",
        ),
        "google_storage_bucket_iam_member.waitpoints_record_shards": (
            "roles/storage.objectUser",
            "google_storage_bucket.record_shards[count.index].name",
        ),
        "google_pubsub_topic_iam_member.waitpoints_rings_jobs": (
            "roles/pubsub.publisher",
            "google_pubsub_topic.topics[each.key].name",
        ),
    }
    rings = resources("google_pubsub_topic_iam_member")["waitpoints_rings_jobs"]
    assert unquote(rings["for_each"]) == 'toset(concat(["jobs"], keys(local.pool_topics)))'


def test_it_is_built_from_its_own_folder_and_claim_learns_its_url() -> None:
    fn = resources("google_cloudfunctions2_function")["waitpoints"]
    build = block(fn, "build_config")
    assert unquote(build["entry_point"]) == "waitpoints"
    source = block(block(build, "source"), "storage_source")
    assert unquote(source["object"]) == 'google_storage_bucket_object.source["waitpoints"].name'
    assert (ROOT / "functions" / "waitpoints" / "main.py").is_file()
    service = block(fn, "service_config")
    env = unquote(service["environment_variables"])
    assert "RECLAIM_WAITPOINT_URL" not in env and "waits_env" not in env  # no cycle
    assert unquote(service["ingress_settings"]) == "ALLOW_ALL"
    assert optional_defaults("waitpoints_function") == optional_defaults("admin_function")
    waits_env = config()["locals"]["waits_env"]
    assert unquote(waits_env["RECLAIM_WAITPOINT_URL"]) == f"{FN}.service_config[0].uri"
    claims = unquote(
        block(resources("google_cloudfunctions2_function")["fn"], "service_config")[
            "environment_variables"
        ]
    )
    assert 'local.waits_env : k => v if local.identity[each.key] == "claim"' in claims
    outputs = config()["output"]
    assert unquote(outputs["waitpoints_url"]["value"]) == f"{FN}.service_config[0].uri"


@pytest.mark.parametrize(
    ("members", "ok"),
    [
        (["allUsers"], True),
        (["user:ann@example.com", "serviceAccount:farm@p.iam.gserviceaccount.com"], True),
        ([], True),
        (["allAuthenticatedUsers"], False),
        (["ann@example.com"], False),
    ],
)
def test_the_invokers_variable_takes_principals_or_all_users(members: list[str], ok: bool) -> None:
    validations = config()["variable"]["waitpoint_invokers"]["validation"]
    conditions = [unquote(v["condition"]) for v in validations]
    assert all(evaluate(c, {"waitpoint_invokers": members}) is ok for c in conditions)
