"""The admin function (terraform/admin.tf): the operator routes' own deployment, invoked
by var.operators alone, running as a service account that holds only what its code uses,
and the variable that names the operators (typed, empty by default, never public)."""

from __future__ import annotations

import re
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

ADMIN_FN = "google_cloudfunctions2_function.admin"
ADMIN_SA = "google_service_account.admin"


def _iam_members() -> dict[str, dict[str, Any]]:
    return {
        f"{rtype}.{name}": b
        for rtype, named in config()["resource"].items()
        if rtype.endswith("_iam_member")
        for name, b in named.items()
    }


def test_only_the_operators_invoke_the_admin_function() -> None:
    """Exactly one grant names the admin function: run.invoker for each of var.operators.
    Not the invoker SA, not submit_invokers, not dashboard_viewers."""
    on_admin = {
        address: b
        for address, b in _iam_members().items()
        if f"{ADMIN_FN}." in str(unquote(b.get("name", "")))
    }
    assert list(on_admin) == ["google_cloud_run_v2_service_iam_member.operators"]
    grant = on_admin["google_cloud_run_v2_service_iam_member.operators"]
    assert unquote(grant["for_each"]) == "toset(var.operators)"
    assert unquote(grant["role"]) == "roles/run.invoker"
    assert unquote(grant["member"]) == "each.value"
    assert unquote(grant["name"]) == f"{ADMIN_FN}.name"
    # and the operators are granted nothing anywhere else
    elsewhere = [
        a
        for a, b in _iam_members().items()
        if "var.operators" in str(unquote(b.get("for_each", ""))) and a not in on_admin
    ]
    assert elsewhere == []


def test_the_admin_runs_as_its_own_account_with_only_records_and_the_jobs_topic() -> None:
    fn = resources("google_cloudfunctions2_function")["admin"]
    service = block(fn, "service_config")
    assert unquote(service["service_account_email"]) == f"{ADMIN_SA}.email"
    granted = {
        address: (unquote(b["role"]), unquote(b.get("bucket") or b.get("topic")))
        for address, b in _iam_members().items()
        if f"${{{ADMIN_SA}.email}}" in unquote(b["member"])
    }
    assert granted == {
        "google_storage_bucket_iam_member.admin_records": (
            "roles/storage.objectUser",
            "google_storage_bucket.records.name",
        ),
        "google_storage_bucket_iam_member.admin_record_shards": (  # the same on each shard
            "roles/storage.objectUser",
            "google_storage_bucket.record_shards[count.index].name",
        ),
        "google_pubsub_topic_iam_member.admin_rings_jobs": (
            "roles/pubsub.publisher",
            "google_pubsub_topic.topics[each.key].name",
        ),
    }
    rings = resources("google_pubsub_topic_iam_member")["admin_rings_jobs"]
    # the jobs topics only: the default pool's and each pool's (pools.tf), no other topic
    assert unquote(rings["for_each"]) == 'toset(concat(["jobs"], keys(local.pool_topics)))'

    sa = resources("google_service_account")["admin"]
    assert unquote(sa["account_id"]) == "${var.name_prefix}-admin"


def test_the_admin_function_is_built_from_its_own_folder_with_the_common_settings() -> None:
    fn = resources("google_cloudfunctions2_function")["admin"]
    build = block(fn, "build_config")
    assert unquote(build["entry_point"]) == "admin"
    source = block(block(build, "source"), "storage_source")
    assert unquote(source["object"]) == 'google_storage_bucket_object.source["admin"].name'
    assert "functions/${src}" in unquote(config()["locals"]["archives"])
    assert '["admin", "waitpoints"]' in unquote(config()["locals"]["archives"])
    assert (ROOT / "functions" / "admin" / "main.py").is_file()
    service = block(fn, "service_config")
    env = unquote(service["environment_variables"])
    assert env == "merge(local.reclaim_env, {THREADS = tostring(var.admin_function.concurrency)})"
    assert unquote(service["max_instance_request_concurrency"]) == (
        "var.admin_function.concurrency"
    )
    assert "time_sleep.grants_propagate" in [unquote(d) for d in fn["depends_on"]]
    # sized like the dashboard
    assert optional_defaults("admin_function") == optional_defaults("dashboard_function")
    outputs = config()["output"]
    assert unquote(outputs["admin_url"]["value"]) == f"{ADMIN_FN}.service_config[0].uri"


def test_the_operators_variable_is_typed_empty_by_default_and_never_public() -> None:
    variable = config()["variable"]["operators"]
    assert unquote(variable["type"]) == "list(string)"
    assert variable_default("operators") == []
    (validation,) = variable["validation"]
    condition = unquote(validation["condition"])
    pattern = re.search(r'regex\("(.*?)", m\)', condition)
    assert pattern is not None, condition
    regex = pattern.group(1).replace("\\\\", "\\")
    for good in ("user:ops@example.com", "group:ops@example.com", "domain:example.com"):
        assert re.search(regex, good), good
    for bad in ("allUsers", "allAuthenticatedUsers", "ops@example.com", "user:a b"):
        assert not re.search(regex, bad), bad


@pytest.mark.parametrize(
    ("members", "ok"),
    [
        ([], True),
        (["user:ops@example.com", "serviceAccount:bot@p.iam.gserviceaccount.com"], True),
        (["allUsers"], False),
        (["user:ops@example.com", "allAuthenticatedUsers"], False),
        (["ops@example.com"], False),
    ],
)
def test_the_operators_validation_evaluated(members: list[str], ok: bool) -> None:
    conditions = [unquote(v["condition"]) for v in config()["variable"]["operators"]["validation"]]
    assert all(evaluate(c, {"operators": members}) is ok for c in conditions)


def test_the_outputs_name_the_admin_function_its_account_and_the_jobs() -> None:
    """Issue 42, F14: service_accounts and function_urls left the admin function out, and
    nothing named the Cloud Run jobs or their image."""
    outputs = config()["output"]
    accounts = unquote(outputs["service_accounts"]["value"])
    assert "admin = google_service_account.admin.email" in accounts
    urls = unquote(outputs["function_urls"]["value"])
    assert "admin = google_cloudfunctions2_function.admin.service_config[0].uri" in urls
    jobs = str(outputs["run_jobs"]["value"])
    assert "google_cloud_run_v2_job.pool" in jobs and "task_image" in jobs
