"""The first `terraform apply` on a fresh project, read from terraform/ with python-hcl2:
the build SA can read the gcf-v2-sources bucket (and nothing else), every call into
a freshly enabled API and every first use of a fresh grant waits for propagation,
and Google's service agents exist before anything is granted to them."""

from __future__ import annotations

import re

from tests.terraform.tfhcl import (
    addresses,
    block,
    block_of,
    config,
    dependencies,
    references,
    resources,
    unquote,
    variable_default,
)

BUILDER = "serviceAccount:${google_service_account.builder.email}"
GCF_SOURCES = "gcf-v2-sources-${data.google_project.this.number}-${var.region}"


# --- 1. the build reads its sources -------------------------------------------------


def _cel_allows(expression: str, resource_name: str) -> bool:
    """The builder grant's condition, which must be `A || B` of == / startsWith terms."""
    results = []
    for term in expression.split("||"):
        term = term.strip()
        if m := re.fullmatch(r'resource\.name == "([^"]+)"', term):
            results.append(resource_name == m.group(1))
        elif m := re.fullmatch(r'resource\.name\.startsWith\("([^"]+)"\)', term):
            results.append(resource_name.startswith(m.group(1)))
        else:
            raise AssertionError(f"unexpected condition term {term!r}")
    return any(results)


def test_the_builder_reads_the_gcf_sources_bucket_through_a_named_condition() -> None:
    assert unquote(config()["locals"]["gcf_sources_bucket"]) == GCF_SOURCES
    grant = resources("google_project_iam_member")["builder_reads_gcf_sources"]
    assert unquote(grant["role"]) == "roles/storage.objectViewer"
    assert unquote(grant["member"]) == BUILDER
    condition = block(grant, "condition")
    expression = unquote(condition["expression"]).replace('\\"', '"')
    assert "${local.gcf_sources_bucket}" in expression and unquote(condition["title"])
    bucket = "gcf-v2-sources-123456789-us-central1"
    expression = expression.replace("${local.gcf_sources_bucket}", bucket)
    assert "gcf-v2-sources-" in expression
    allowed = [
        f"projects/_/buckets/{bucket}",  # storage.objects.list is checked on the bucket
        f"projects/_/buckets/{bucket}/objects/reclaim-claim/function-source.zip",
    ]
    refused = [
        f"projects/_/buckets/{bucket}0",  # a bucket whose name merely starts the same
        f"projects/_/buckets/{bucket}0/objects/x.zip",
        "projects/_/buckets/my-project-reclaim-records/objects/jobs/a.json",
        "projects/_/buckets/gcf-v2-sources-999-us-central1/objects/x.zip",
    ]
    assert all(_cel_allows(expression, name) for name in allowed)
    assert not any(_cel_allows(expression, name) for name in refused)


def test_no_one_but_the_builder_reads_function_sources() -> None:
    for rtype, named in config()["resource"].items():
        if not rtype.endswith("_iam_member"):
            continue
        for name, b in named.items():
            text = repr(b)
            if "gcf_sources_bucket" in text or "google_storage_bucket.sources" in text:
                assert unquote(b["member"]) == BUILDER, f"{rtype}.{name}"


# --- 2. propagation -------------------------------------------------------------------


def _sleep(name: str) -> dict:
    return resources("time_sleep")[name]


def _seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)s", duration)
    assert m, duration
    return float(m.group(1))


def test_every_call_into_the_project_waits_for_the_enabled_apis() -> None:
    apis = _sleep("apis_propagate")
    assert references(apis) == {"google_project_service.enabled"}
    assert _seconds(unquote(apis["create_duration"])) >= 60  # the provider's examples wait 60 s
    assert "local.apis" in unquote(apis["triggers"]["apis"]), "a new API must wait again"
    first = _sleep("first_apis_propagate")
    assert references(first) == {"google_project_service.enabled"} and "triggers" not in first
    assert _seconds(unquote(first["create_duration"])) >= 60
    exempt = {
        "google_project_service.enabled",  # enabling them is the call we wait after
        "time_sleep.apis_propagate",
        "time_sleep.first_apis_propagate",
        "data.archive_file.source",  # local zip, no API
    }
    for address in sorted(addresses() - exempt):
        deps = dependencies(address)
        assert {"time_sleep.apis_propagate", "time_sleep.first_apis_propagate"} & deps, address


def test_a_new_api_does_not_replace_the_grants_built_from_data_sources() -> None:
    """A data source whose depends_on has a planned change is read at apply, so its values
    are unknown at plan: the data sources wait for the sleep without triggers, never for
    the one a new API replaces, and the grants built from them stay put."""
    for address in ("data.google_project.this", "data.google_storage_project_service_account.this"):
        deps = dependencies(address)
        assert "time_sleep.apis_propagate" not in deps, address
        assert "time_sleep.first_apis_propagate" in deps, address
    # ...and they are what these grants' values come from
    assert "data.google_project.this" in references(
        resources("google_project_iam_member")["builder_reads_gcf_sources"]
    )
    assert "data.google_storage_project_service_account.this" in references(
        resources("google_pubsub_topic_iam_member")["gcs_agent_publishes_uploads"]
    )


def _grants() -> dict[str, dict]:
    return {
        f"{rtype}.{name}": b
        for rtype, named in config()["resource"].items()
        if rtype.endswith("_iam_member")
        for name, b in named.items()
    }


def _made_after_first_use(grant: dict) -> bool:
    """A grant on a function, subscription or Cloud Run job can only follow it (their users
    retry; the job grants are waited for by a wait of their own before the functions
    deploy: run_jobs.tf, time_sleep.run_jobs_grants_propagate)."""
    deps = references(grant)
    return any(
        d.startswith(
            (
                "google_cloudfunctions2_function.",
                "google_pubsub_subscription.",
                "google_cloud_run_v2_job.",
            )
        )
        for d in deps
    )


def test_the_grants_wait_precedes_every_first_use_inside_the_apply() -> None:
    grants = _sleep("grants_propagate")
    waited = {unquote(d) for d in grants["depends_on"]}
    assert unquote(grants["create_duration"]) == "${var.iam_propagation_seconds}s"
    # IAM: "typically 2 minutes" (cloud.google.com/iam/docs/access-change-propagation)
    assert variable_default("iam_propagation_seconds") >= 120
    for address, grant in _grants().items():
        if _made_after_first_use(grant):
            assert address not in waited, f"{address} cannot be waited for (it needs the target)"
        else:
            assert address in waited, f"{address} is used in this apply; wait for it"
    # the first users of those grants inside this apply
    for user in (
        "google_cloudfunctions2_function.fn",  # Cloud Build reads sources, writes images, logs
        "google_storage_notification.uploads",  # checks the GCS agent may publish
        "google_pubsub_subscription.push",  # the Pub/Sub agent mints tokens, dead-letters
    ):
        assert "time_sleep.grants_propagate" in [
            unquote(d) for d in block_of(user).get("depends_on", [])
        ], f"{user} must depend on time_sleep.grants_propagate explicitly"


def test_the_grants_made_after_their_target_are_the_documented_ones() -> None:
    late = sorted(a for a, g in _grants().items() if _made_after_first_use(g))
    assert late == [
        "google_cloud_run_v2_job_iam_member.cancellers",  # waited for: run_jobs_grants_propagate
        "google_cloud_run_v2_job_iam_member.claim_runs",  # waited for too; a refused :run is free
        "google_cloud_run_v2_job_iam_member.sweep_reads",  # waited for; the stale rule still runs
        "google_cloud_run_v2_service_iam_member.cron_invoker",  # Scheduler retries a tick
        "google_cloud_run_v2_service_iam_member.dashboard_viewers",
        "google_cloud_run_v2_service_iam_member.invoker",
        "google_cloud_run_v2_service_iam_member.operators",  # admin.tf
        "google_cloud_run_v2_service_iam_member.submitters",
        "google_cloud_run_v2_service_iam_member.waitpoint_invokers",  # waitpoints.tf
        "google_pubsub_subscription_iam_member.dashboard_reads_dead_letters",
        "google_pubsub_subscription_iam_member.pubsub_agent_acks_dead_letters",
    ]


# --- 2. service agents ------------------------------------------------------------------


def test_service_agents_are_created_before_they_are_granted_anything() -> None:
    identity = resources("google_project_service_identity")["pubsub"]
    assert unquote(identity["provider"]) == "google-beta"
    assert unquote(identity["service"]) == "pubsub.googleapis.com"
    assert "time_sleep.apis_propagate" in dependencies("google_project_service_identity.pubsub")
    agents = config()["locals"]
    assert unquote(agents["pubsub_agent"]) == (
        "serviceAccount:${google_project_service_identity.pubsub.email}"
    )
    assert unquote(agents["gcs_agent"]) == (
        "serviceAccount:${data.google_storage_project_service_account.this.email_address}"
    )
    gcs = config()["data"]["google_storage_project_service_account"]["this"]
    assert [unquote(d) for d in gcs["depends_on"]] == ["time_sleep.first_apis_propagate"]
    # no grant spells an agent's address itself (it may not exist yet)
    for address, grant in _grants().items():
        member = unquote(grant["member"])
        assert "gcp-sa-" not in member and "gs-project-accounts" not in member, address
        if "agent" in address:
            # ours, or another project's Cloud Storage agent (uploads.tf), read from the
            # data source that creates it
            routed = unquote(grant.get("for_each", "")).startswith(
                "data.google_storage_project_service_account."
            )
            assert member in ("local.pubsub_agent", "local.gcs_agent") or routed, address
    assert "gcp-sa-pubsub" not in repr(config()["locals"])


def test_the_readmes_walk_through_counts_what_terraform_makes() -> None:
    """The first-deploy walk-through names the API count, the archives and builds, the
    alert policies and the late grants: each must be the configuration's."""
    from tests.terraform.tfhcl import TF_DIR

    readme = (TF_DIR / "README.md").read_text()
    apis = config()["locals"]["apis"]
    count = len(re.findall(r'"[a-z]+\.googleapis\.com"', str(apis)))
    assert f"google_project_service.enabled ({count} APIs)" in readme
    functions = config()["locals"]["functions"]
    sources = {re.search(r'source = "(\w+)"', str(v)).group(1) for v in functions.values()}  # type: ignore[union-attr]
    sources |= {"admin", "waitpoints"}  # admin.tf, waitpoints.tf: beside local.functions
    assert "admin" in unquote(config()["locals"]["archives"])
    assert "waitpoints" in unquote(config()["locals"]["archives"])
    numbers = {
        4: "four",
        5: "five",
        6: "six",
        7: "seven",
        8: "eight",
        9: "nine",
        10: "ten",
        11: "eleven",
    }
    assert f"one archive per source folder ({numbers[len(sources)]}:" in readme
    assert f"the {numbers[len(functions) + 2]} Cloud Builds" in readme  # with admin, waitpoints
    alerts = resources("google_monitoring_alert_policy")
    assert f"and {numbers[len(alerts)]} alert policies" in readme
    late = sum(1 for g in _grants().values() if _made_after_first_use(g))
    assert f"{numbers[late].capitalize()} grants can only be made after their target" in readme
