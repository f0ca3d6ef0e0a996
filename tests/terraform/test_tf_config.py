"""Properties of terraform/ read with python-hcl2: identities, least privilege,
push subscriptions, hardened buckets, archives, env vars from the code, timing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import functions_framework
import pytest

from shared.config import ENV_VARS
from shared.features.table import context
from tests.terraform.tfhcl import (
    ROOT,
    all_text,
    block,
    config,
    optional_defaults,
    resources,
    unquote,
    variable_default,
)

FUNCTIONS = {  # function -> (source folder, target), as the README lays out
    "submit": ("submit", "submit"),
    "submit_upload": ("submit", "submit_upload"),
    "claim": ("claim", "claim"),
    "sweep": ("sweep", "sweep"),
    "dashboard": ("dashboard", "dashboard"),
}
PUSHED = {"claim": "jobs", "submit_upload": "uploads"}
PUBLIC = ("allUsers", "allAuthenticatedUsers")


def _locals() -> dict:
    return config()["locals"]


def _fn() -> dict:
    return resources("google_cloudfunctions2_function")["fn"]


def _framework_env_vars() -> set[str]:
    """Env vars functions-framework's gunicorn server reads that we must set: THREADS."""
    source = Path(functions_framework.__file__).parent / "_http" / "gunicorn.py"
    read = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            read.add(node.args[0].value)
    assert "THREADS" in read, "functions-framework no longer reads THREADS; revisit functions.tf"
    return {"THREADS"}


# --- functions and their identities ---------------------------------------------------


def test_the_entry_points_match_the_contract() -> None:
    funcs = _locals()["functions"]
    assert set(funcs) == set(FUNCTIONS)
    for name, (folder, target) in FUNCTIONS.items():
        expr = unquote(funcs[name])
        assert f'source = "{folder}"' in expr and f'entry_point = "{target}"' in expr, expr
        assert (ROOT / "functions" / folder).is_dir()
    fn = _fn()
    # the five, and each pool's claim (terraform/pools.tf: test_tf_pools.py)
    assert unquote(fn["for_each"]) == "local.all_functions"
    pools = config()["locals"]
    assert unquote(pools["all_functions"]) == "merge(local.functions, local.pool_functions)"
    build = block(fn, "build_config")
    assert unquote(build["entry_point"]) == "each.value.entry_point"
    assert re.fullmatch(r"python3(1[1-9])", unquote(build["runtime"]))


def test_each_function_runs_as_its_own_service_account() -> None:
    sas = resources("google_service_account")
    assert unquote(sas["fn"]["for_each"]) == "local.functions"
    service = block(_fn(), "service_config")
    # local.identity: each of the five its own; a pool's claim runs as claim (test_tf_pools)
    assert (
        unquote(service["service_account_email"])
        == "google_service_account.fn[local.identity[each.key]].email"
    )
    # account ids differ per function and from the invoker / builder accounts
    ids = {
        unquote(sas["fn"]["account_id"]),
        *(unquote(sas[k]["account_id"]) for k in ("invoker", "builder")),
    }
    assert len(ids) == 3 and "each.key" in unquote(sas["fn"]["account_id"])
    build = block(_fn(), "build_config")
    assert unquote(build["service_account"]) == "google_service_account.builder.id"


def test_env_vars_are_exactly_what_the_code_reads() -> None:
    reclaim_env = _locals()["reclaim_env"]
    assert set(reclaim_env) == {v.name for v in ENV_VARS}
    service = block(_fn(), "service_config")
    expr = unquote(service["environment_variables"])
    # a pool's claim gets its pool's RECLAIM_* on top (local.pool_env: test_tf_pools.py)
    # and claim its waitpoints' completion URL (local.waits_env: test_tf_waitpoints.py)
    waits = (
        r"\{for k, v in local\.waits_env : k => v "
        r'if local\.identity\[each\.key\] == "claim"\}, '
    )
    m = re.fullmatch(
        r"merge\(local\.reclaim_env, local\.pool_env\[each\.key\], " + waits + r"\{(.*)\}\)",
        expr,
    )
    assert m, f"every function gets reclaim_env plus framework vars, got {expr}"
    extra = set(re.findall(r"(\w+)\s*=", m.group(1)))
    assert extra == _framework_env_vars()


def test_concurrency_drives_threads_max_concurrent_and_needs_a_cpu() -> None:
    service = block(_fn(), "service_config")
    assert unquote(service["max_instance_request_concurrency"]) == "each.value.concurrency"
    assert "THREADS = tostring(each.value.concurrency)" in unquote(service["environment_variables"])
    assert unquote(service["available_cpu"]) == "each.value.cpu"
    assert (
        unquote(_locals()["reclaim_env"]["RECLAIM_MAX_CONCURRENT"])
        == "tostring(local.functions.claim.concurrency)"
    )
    conditions = [unquote(p["condition"]) for p in block(_fn(), "lifecycle")["precondition"]]
    assert "each.value.concurrency == 1 || tonumber(each.value.cpu) >= 1" in conditions
    for var in ("submit_function", "submit_upload_function", "claim_function", "sweep_function"):
        d = optional_defaults(var)
        assert d["concurrency"] == 1 or float(d["cpu"]) >= 1, var
        assert 0 <= d["min_instances"] <= d["max_instances"], var


def test_queue_defaults_equal_the_code_defaults() -> None:
    tf = optional_defaults("queue")
    code = {v.field: v.default for v in ENV_VARS}
    for field, value in tf.items():
        assert field in code, f"queue.{field} is not a setting of shared/config.py"
        expected = code[field]
        got = value if isinstance(value, str) else float(value)
        want = expected if isinstance(value, str) else float(expected)
        assert got == want, f"queue.{field}: terraform {value!r}, code {expected!r}"
    # the rest are names terraform derives (project, bucket, topic), claim's concurrency,
    # and the retention days, which come from var.retention_days
    retention = optional_defaults("retention_days")
    for state, days in retention.items():
        field = f"retention_days_{state}"
        assert float(code[field]) == float(days), f"retention_days.{state}"
    assert set(code) - set(tf) == {
        "project",
        "records_bucket",
        "shard_buckets",  # local.shard_buckets, from var.record_shards
        "legacy_names",  # var.legacy_record_names (a bool, not queue tuning)
        "uploads_bucket",  # local.buckets.uploads
        "uploads_file",  # the archive path of the routes file terraform read (uploads.tf)
        "jobs_topic",
        "max_concurrent",
        "push_deadline_seconds",
        "shutdown_grace_seconds",  # Cloud Run's fixed 10 s (asserted below)
        "pipeline_modules",
        "dead_letter_subscription",  # local.subscriptions.dead_letter_hold
        "metrics_source",  # monitoring:<name_prefix> (test_tf_monitoring.py)
        "schedules_file",  # <pipelines package>/schedules.json (test_tf_schedules.py)
        "iap_audience",  # var.iap_audience (a string, not queue tuning)
        "pools_file",  # the archive path of the pools file terraform read (pools.tf)
        "pool",  # "" (the default pool); a pool's claim: local.pool_env
        *(f"retention_days_{state}" for state in retention),
    }
    grace = unquote(_locals()["reclaim_env"]["RECLAIM_SHUTDOWN_GRACE_SECONDS"])
    assert grace == next(v.default for v in ENV_VARS if v.name == "RECLAIM_SHUTDOWN_GRACE_SECONDS")
    assert optional_defaults("claim_function")["concurrency"] == float(
        next(v.default for v in ENV_VARS if v.name == "RECLAIM_MAX_CONCURRENT")
    )
    assert optional_defaults("claim_push")["ack_deadline_seconds"] == float(
        next(v.default for v in ENV_VARS if v.name == "RECLAIM_PUSH_DEADLINE_SECONDS")
    )
    assert (
        unquote(_locals()["reclaim_env"]["RECLAIM_PUSH_DEADLINE_SECONDS"])
        == "tostring(var.claim_push.ack_deadline_seconds)"
    )


def test_timeouts_and_ack_deadlines_are_consistent() -> None:
    for fn_name, topic in PUSHED.items():
        push = optional_defaults(f"{fn_name}_push")
        fn = optional_defaults(f"{fn_name}_function")
        assert 10 <= push["ack_deadline_seconds"] <= 600
        assert fn["timeout_seconds"] >= push["ack_deadline_seconds"], fn_name
        assert unquote(_locals()["pushes"][fn_name]["topic"]) == topic
    assert optional_defaults("claim_function")["timeout_seconds"] <= 3600  # gen2 HTTP max
    conditions = [unquote(p["condition"]) for p in block(_fn(), "lifecycle")["precondition"]]
    assert any("ack_deadline_seconds" in c and "timeout_seconds >=" in c for c in conditions)
    # the sweep's own budget fits in its timeout, which is the scheduler's deadline
    sweep = optional_defaults("sweep_function")
    assert optional_defaults("queue")["sweep_max_seconds"] < sweep["timeout_seconds"]
    job = resources("google_cloud_scheduler_job")["sweep"]
    assert unquote(job["attempt_deadline"]) == "${local.functions.sweep.timeout_seconds}s"


# --- Pub/Sub ------------------------------------------------------------------------


def test_default_names_are_the_contract_names() -> None:
    prefix = unquote(variable_default("name_prefix"))
    names = {
        k: unquote(v).replace("${var.name_prefix}", prefix)
        for part in ("topics", "subscriptions")
        for k, v in _locals()[part].items()
    }
    assert names == {
        "jobs": "reclaim-jobs",
        "uploads": "reclaim-uploads",
        "dead_letter": "reclaim-dead-letter",
        "claim": "reclaim-claim",
        "submit_upload": "reclaim-submit-upload",
        "dead_letter_hold": "reclaim-dead-letter-hold",
    }


def test_every_push_subscription_has_oidc_retry_dead_letter_and_never_expires() -> None:
    subs = resources("google_pubsub_subscription")
    push = subs["push"]
    assert unquote(push["for_each"]) == "local.all_pushes"  # and each pool's (pools.tf)
    assert set(_locals()["pushes"]) == set(PUSHED)
    cfg = block(push, "push_config")
    oidc = block(cfg, "oidc_token")
    assert unquote(oidc["service_account_email"]) == "google_service_account.invoker.email"
    assert "service_config[0].uri" in unquote(oidc["audience"])
    assert unquote(cfg["push_endpoint"]).endswith(
        "/projects/${var.project_id}/topics/${google_pubsub_topic.topics[each.value.topic].name}"
    )
    assert set(block(push, "retry_policy")) == {"minimum_backoff", "maximum_backoff"}
    dlp = block(push, "dead_letter_policy")
    assert unquote(dlp["dead_letter_topic"]) == 'google_pubsub_topic.topics["dead_letter"].id'
    assert unquote(block(push, "expiration_policy")["ttl"]) == ""
    assert unquote(push["ack_deadline_seconds"]) == "each.value.settings.ack_deadline_seconds"
    # every subscription other than the pushes is the pull hold of the dead-letter topic
    hold = subs["dead_letter_hold"]
    assert set(subs) == {"push", "dead_letter_hold"} and "push_config" not in hold
    assert unquote(hold["topic"]) == 'google_pubsub_topic.topics["dead_letter"].id'
    assert unquote(block(hold, "expiration_policy")["ttl"]) == ""


# --- storage --------------------------------------------------------------------------


def test_buckets_are_hardened() -> None:
    buckets = resources("google_storage_bucket")
    assert set(buckets) == {"records", "record_shards", "uploads", "sources"}
    for name, b in buckets.items():
        assert b["uniform_bucket_level_access"] is True, name
        assert unquote(b["public_access_prevention"]) == "enforced", name
    assert buckets["records"]["name"] != buckets["uploads"]["name"]


def test_old_bytes_are_kept_once_not_twice() -> None:
    """records: soft delete, no versioning (every CAS write and heartbeat would leave a
    noncurrent copy on top of the soft-deleted one); uploads: versioning, because
    upload-digest reads the exact uploaded generation; sources: neither matters."""
    buckets = resources("google_storage_bucket")
    keep = {
        name: (
            block(b, "versioning")["enabled"],
            unquote(block(b, "soft_delete_policy")["retention_duration_seconds"]),
        )
        for name, b in buckets.items()
    }
    assert keep == {
        "records": (False, "var.soft_delete_days.records * 86400"),
        "record_shards": (False, "var.soft_delete_days.records * 86400"),
        "uploads": (True, "var.soft_delete_days.uploads * 86400"),
        "sources": (True, 0),
    }
    days = optional_defaults("soft_delete_days")
    assert days == {"records": 7.0, "uploads": 0.0}  # Cloud Storage's default 7 d, kept
    # versioned buckets expire their noncurrent versions
    for name in ("uploads", "sources"):
        states = [
            unquote(block(r, "condition").get("with_state", ""))
            for r in buckets[name].get("lifecycle_rule", [])
        ]
        assert "ARCHIVED" in states, name


def test_destroy_keeps_the_queue_unless_told() -> None:
    buckets = resources("google_storage_bucket")
    assert unquote(buckets["records"]["force_destroy"]) == "var.force_destroy_buckets"
    assert unquote(buckets["uploads"]["force_destroy"]) == "var.force_destroy_buckets"
    assert variable_default("force_destroy_buckets") is False
    assert buckets["sources"]["force_destroy"] is True  # rebuildable archives only


def test_retention_never_deletes_a_pending_record() -> None:
    rules = [
        block(r, "condition")
        for r in resources("google_storage_bucket")["records"]["lifecycle_rule"]
    ]
    for cond in rules:
        prefixes = cond.get("matches_prefix", [])
        # pending/ markers are never a lifecycle target; jobs/ only by custom time,
        # which the store sets on terminal records alone.
        assert not any("pending/" in p for p in prefixes)
        if any("jobs/" in p for p in prefixes):
            assert "age" not in cond and "days_since_custom_time" in cond


def test_used_bulk_tokens_expire_and_the_confirm_key_stays() -> None:
    """A used confirm token's marker (shared.bulk.USED_PREFIX) matters only until the token
    expires; the deployment's confirm key (CONFIRM_KEY_OBJECT) is never a target."""
    from shared import bulk

    rules = [
        block(r, "condition")
        for r in resources("google_storage_bucket")["records"]["lifecycle_rule"]
    ]
    prefixes = [[unquote(p) for p in c.get("matches_prefix", [])] for c in rules]
    used = [c for c, p in zip(rules, prefixes, strict=True) if bulk.USED_PREFIX in p]
    assert len(used) == 1 and used[0]["age"] * 86400 > bulk.CONFIRM_TTL.total_seconds()
    assert not any(bulk.CONFIRM_KEY_OBJECT.startswith(p) for ps in prefixes for p in ps)


def test_archives_hold_the_function_folder_shared_and_your_pipelines() -> None:
    archives = unquote(_locals()["archives"])
    assert '"shared/${f}"' in archives and "functions/${src}" in archives
    assert '"requirements.txt"' in archives
    assert '"${local.pipelines_package}/${f}"' in archives
    # the function folder is merged last, so no pipeline file can shadow main.py
    assert archives.index("local.pipeline_files") < archives.index("functions/${src}")
    assert unquote(_locals()["pipelines_package"]) == "basename(local.pipelines_dir)"
    assert '"${local.repo_root}/pipelines"' in unquote(_locals()["pipelines_dir"])
    conditions = [unquote(p["condition"]) for p in block(_fn(), "lifecycle")["precondition"]]
    assert any("var.pipeline_modules" in c and "archive_python_files" in c for c in conditions)
    obj = resources("google_storage_bucket_object")["source"]
    assert "output_sha256" in unquote(obj["name"]), "archives must be named by content hash"


# --- IAM --------------------------------------------------------------------------------


def _iam_members() -> dict[str, dict]:
    out = {}
    for rtype, named in config()["resource"].items():
        if rtype.endswith(("_iam_binding", "_iam_policy")):
            pytest.fail(f"{rtype}: authoritative IAM would drop grants made outside terraform")
        if rtype.endswith("_iam_member"):
            out.update({f"{rtype}.{n}": b for n, b in named.items()})
    return out


def test_no_public_members_anywhere() -> None:
    for addr, b in _iam_members().items():
        assert not any(p in unquote(b["member"]) for p in PUBLIC), addr
    validation = config()["variable"]["submit_invokers"]["validation"][0]
    regex = re.search(r'regex\("(.*?)", m\)', unquote(validation["condition"]))
    assert regex, "submit_invokers must be validated"
    pattern = regex.group(1).replace("\\\\", "\\")
    assert re.search(pattern, "user:me@example.com")
    assert not any(re.search(pattern, p) for p in PUBLIC)


def test_grants_sit_on_resources_not_the_project() -> None:
    members = _iam_members()
    project_level = {a: b for a, b in members.items() if a.startswith("google_project_iam_member.")}
    # the build SA's two: logs (no narrower grant point) and the read of gcf-v2-sources-*,
    # which is conditioned on that bucket (test_tf_first_apply.py); and the dashboard's
    # read of the metrics (time series have no narrower grant point either)
    assert {a: unquote(b["role"]) for a, b in project_level.items()} == {
        "google_project_iam_member.builder_writes_logs": "roles/logging.logWriter",
        "google_project_iam_member.builder_reads_gcf_sources": "roles/storage.objectViewer",
        "google_project_iam_member.dashboard_reads_metrics": "roles/monitoring.viewer",
        # the runtime accounts that export a job's spans (spans have no narrower point)
        "google_project_iam_member.runtime_writes_traces": "roles/cloudtrace.agent",
    }
    assert "condition" in project_level["google_project_iam_member.builder_reads_gcf_sources"]
    traces = project_level.pop("google_project_iam_member.runtime_writes_traces")
    assert unquote(traces["member"]) == (
        "serviceAccount:${google_service_account.fn[each.key].email}"
    )
    assert unquote(traces["for_each"]) == 'toset(["claim", "sweep", "submit"])'
    for address, b in project_level.items():
        who = "dashboard" if "dashboard" in address else "builder"
        sa = 'fn["dashboard"]' if who == "dashboard" else "builder"
        assert unquote(b["member"]) == f"serviceAccount:${{google_service_account.{sa}.email}}"
    for addr, b in members.items():
        role = unquote(b["role"])
        assert not role.endswith((".admin", "/owner", "/editor")), f"{addr}: {role}"


def test_service_agents_get_exactly_what_the_issue_lists() -> None:
    m = _iam_members()
    token = m["google_service_account_iam_member.pubsub_agent_mints_invoker_tokens"]
    assert unquote(token["service_account_id"]) == "google_service_account.invoker.name"
    assert unquote(token["member"]) == "local.pubsub_agent"
    dl = m["google_pubsub_topic_iam_member.pubsub_agent_dead_letters"]
    assert (unquote(dl["topic"]), unquote(dl["role"])) == (
        'google_pubsub_topic.topics["dead_letter"].name',
        "roles/pubsub.publisher",
    )
    ack = m["google_pubsub_subscription_iam_member.pubsub_agent_acks_dead_letters"]
    assert unquote(ack["role"]) == "roles/pubsub.subscriber"
    assert unquote(ack["subscription"]) == "google_pubsub_subscription.push[each.key].name"
    gcs = m["google_pubsub_topic_iam_member.gcs_agent_publishes_uploads"]
    assert (unquote(gcs["topic"]), unquote(gcs["member"])) == (
        'google_pubsub_topic.topics["uploads"].name',
        "local.gcs_agent",
    )
    # the Pub/Sub agent appears in no other grant
    agent_grants = [a for a, b in m.items() if unquote(b["member"]) == "local.pubsub_agent"]
    assert len(agent_grants) == 3


def test_invoker_calls_only_the_internal_functions_and_scheduler_uses_oidc() -> None:
    inv = resources("google_cloud_run_v2_service_iam_member")["invoker"]
    assert (
        unquote(inv["for_each"])
        == 'toset(concat(["claim", "submit_upload", "sweep"], keys(local.pool_functions)))'
    )
    assert unquote(inv["role"]) == "roles/run.invoker"
    job = resources("google_cloud_scheduler_job")["sweep"]
    target = block(job, "http_target")
    assert unquote(target["http_method"]) == "POST"
    assert (
        unquote(target["uri"])
        == 'google_cloudfunctions2_function.fn["sweep"].service_config[0].uri'
    )
    oidc = block(target, "oidc_token")
    assert unquote(oidc["service_account_email"]) == "google_service_account.invoker.email"


def test_checkov_skips_all_carry_a_reason() -> None:
    skips = re.findall(r"checkov:skip=([A-Z_0-9]+)(?::(.*))?", all_text())
    assert skips, "expected the documented skips"
    for check, reason in skips:
        assert reason and len(reason.strip()) >= 40, f"{check} is skipped without a real reason"


# --- submit's sizing (terraform/README.md, "Sizing submit") -------------------------------

# A bad-day average latency per Cloud Storage call (small objects take tens of ms; this
# is 4-10x that, so the bound holds on slow days too). Arithmetic, not a measurement.
BAD_DAY_CALL_S = 0.2


def _calls_per_job_of_a_maximum_batch() -> float:
    """Storage calls submit makes per job of a full batch with client ids, counted on
    the in-memory store (reads for the id check, markers, the create-only record)."""
    from datetime import UTC, datetime

    from shared.config import Settings
    from shared.queue import parse_submission
    from shared.stores.memory import MemoryStore
    from shared.submission.create import submit

    class Bell:
        def ring(
            self, job_id: str, traceparent: str | None = None, *, pipeline: str | None = None
        ) -> None: ...
        def ring_many(
            self,
            job_ids: object,
            traceparents: object = None,
            *,
            pipelines: object = None,
        ) -> list[str]:
            return []

    n = int(optional_defaults("queue")["max_batch_jobs"])
    body = {"jobs": [{"pipeline": "demo", "id": f"job-{i:04d}"} for i in range(n)]}
    store = MemoryStore()
    result = submit(
        context(store, Bell(), Settings.from_env({})),
        parse_submission(body, Settings.from_env({})),
        datetime.now(UTC),
    )
    assert result.to_json()["created"] == n
    return sum(store.calls.values()) / n


def test_submit_fits_a_maximum_batch_in_its_timeout() -> None:
    from shared import doorbell
    from shared.stores import gcs as storage
    from shared.submission import create as submission

    n = optional_defaults("queue")["max_batch_jobs"]
    calls = n * _calls_per_job_of_a_maximum_batch()
    # per job: read (id check), pending marker, batch marker, record; per batch: one read
    # (a batch whose callback was created takes no new member) and its day's marker
    # (shared.submission.batch_days); each read that misses looks at the record's old
    # name too (RECLAIM_LEGACY_NAMES, on by default), and the create does not look again
    assert calls == pytest.approx(5 * n + 3)
    workers = getattr(submission, "_WORKERS", None)
    assert isinstance(workers, int), "submission's thread pool size moved: update this bound"
    # the calls overlap `workers` at a time; one call may retry for its whole deadline;
    # the doorbells of the batch are published together and waited for once
    needed = calls * BAD_DAY_CALL_S / workers + storage.RETRY_DEADLINE_S + doorbell.RING_TIMEOUT_S
    submit_fn = optional_defaults("submit_function")
    assert submit_fn["timeout_seconds"] >= needed, (submit_fn["timeout_seconds"], needed)
    assert submit_fn["timeout_seconds"] <= 3600


def test_the_storage_pool_holds_every_call_submit_has_in_flight() -> None:
    """Each submit request overlaps up to its thread pool's size of storage calls (a
    batch's writes, or a batch view's reads); the process's one storage client must keep
    a connection for each of them, or it opens and discards the rest."""
    from shared import status
    from shared.stores import gcs as storage
    from shared.submission import create as submission

    per_request = max(submission._WORKERS, status._WORKERS)
    assert per_request == 16  # the right-hand column of terraform/README.md's table
    concurrency = optional_defaults("submit_function")["concurrency"]
    assert concurrency * per_request <= storage.HTTP_POOL_SIZE, (concurrency, per_request)
    # submit_upload creates one job per request, its calls one after another
    assert optional_defaults("submit_upload_function")["concurrency"] <= storage.HTTP_POOL_SIZE


def test_submit_and_the_dashboard_may_sign_as_themselves_only() -> None:
    """An output's download is a V4 signed URL; a Cloud Run service account has no key, so
    it signs through signBlob (https://cloud.google.com/storage/docs/authentication/creating-signatures):
    token creator on its own account, granted to itself, for the two functions that sign."""
    grant = _iam_members()["google_service_account_iam_member.signs_output_urls"]
    assert unquote(grant["role"]) == "roles/iam.serviceAccountTokenCreator"
    assert unquote(grant["service_account_id"]) == "google_service_account.fn[each.key].name"
    assert unquote(grant["member"]) == "serviceAccount:${google_service_account.fn[each.key].email}"
    assert 'toset(["submit", "dashboard"])' in unquote(grant["for_each"])
    main = (Path(__file__).resolve().parents[2] / "terraform" / "main.tf").read_text()
    assert '"iamcredentials.googleapis.com"' in main
