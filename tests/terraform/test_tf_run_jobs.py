"""terraform/run_jobs.tf: a Cloud Run job per job pool, with no retries of its own, claim's
settings and identity, an optional GPU, the image built by the same apply from claim's
archive, and the grant to start executions with overrides given to claim's account only."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shared.run_jobs import RUN_ENV_VARS, TASK_ENV_VARS, RunSettings
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import ROOT, block, config, dependencies, resources, unquote


def _job() -> dict[str, Any]:
    return resources("google_cloud_run_v2_job")["pool"]


def _task() -> dict[str, Any]:
    return block(block(_job(), "template"), "template")


def _container() -> dict[str, Any]:
    return block(_task(), "containers")


def _dynamic(parent: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in parent["dynamic"]:
        for key, value in entry.items():
            if unquote(key) == name:
                return dict(value)
    raise KeyError(name)


def test_one_job_per_job_pool_with_no_retries_of_its_own() -> None:
    job = _job()
    assert unquote(job["for_each"]) == "local.job_specs"
    task = _task()
    assert task["max_retries"] == 0  # reclaim counts attempts; the sweep rescues
    assert unquote(task["timeout"]) == "${each.value.task_timeout_seconds}s"
    assert block(job, "template")["task_count"] == 1
    assert unquote(task["service_account"]) == 'google_service_account.fn["claim"].email'


def test_the_job_names_are_what_the_claim_functions_are_told() -> None:
    """RECLAIM_RUN_JOB is the job's full name: the form shared.run_jobs accepts."""
    name = unquote(config()["locals"]["run_jobs"])
    assert "projects/${var.project_id}/locations/${var.region}/jobs/" in name
    assert unquote(_job()["name"]) == "basename(local.run_jobs[each.key])"
    sample = "projects/acme-1/locations/europe-west1/jobs/reclaim-heavy-task"
    env = {"RECLAIM_RUNNER": "job", "RECLAIM_RUN_JOB": sample}
    assert RunSettings.from_env(env).job == sample


def test_the_task_runs_claims_image_as_a_direct_python3_process() -> None:
    """F3: the launcher with `--` execs the command without bash (buildpacks' "user-provided
    direct process"), so Python is the container's process and gets Cloud Run's signals;
    `python3` is the name Google's Python runtime has (its buildpacks call python3)."""
    container = _container()
    assert unquote(container["image"]) == (
        "data.google_cloud_run_v2_service.task_image[0].template[0].containers[0].image"
    )
    assert [unquote(c) for c in container["command"]] == ["/cnb/lifecycle/launcher"]
    assert [unquote(a) for a in container["args"]] == ["--", "python3", "task.py"]
    assert (ROOT / "functions" / "claim" / "task.py").exists()  # in claim's archive


def _env_blocks() -> list[dict[str, Any]]:
    return [
        dict(value)
        for entry in _container()["dynamic"]
        for key, value in entry.items()
        if unquote(key) == "env"
    ]


def test_the_task_gets_its_pool_claims_environment_and_secrets() -> None:
    """F7: the job's environment is its pool claim's (RECLAIM_POOL, the pool's stale time,
    the runner variables) and the waitpoints' URL as claim's (a stage on a task parks too),
    plus the task's revision and task timeout, and the webhook
    signing secrets claim gets (value_source.secret_key_ref)."""
    plain, secrets = _env_blocks()
    env = unquote(plain["for_each"])
    assert env.startswith(
        'merge(local.reclaim_env, local.pool_env["claim_${each.key}"], local.waits_env, {'
    )
    own = set(re.findall(r"(RECLAIM_\w+)\s*=", env))
    assert own == {v.name for v in TASK_ENV_VARS}
    pool_env = unquote(config()["locals"]["pool_env"])
    for name in ("RECLAIM_POOL", "RECLAIM_STALE_SECONDS", *(v.name for v in RUN_ENV_VARS)):
        assert f"{name} " in pool_env or f"{name}=" in pool_env, name
    assert unquote(secrets["for_each"]) == "var.webhook_secrets"
    content = block(secrets, "content")
    assert unquote(content["name"]) == "RECLAIM_WEBHOOK_SECRET_${env.key}"
    ref = block(block(content, "value_source"), "secret_key_ref")
    assert unquote(ref["secret"]) == "env.value" and unquote(ref["version"]) == "latest"
    fn_secrets = unquote(str(resources("google_cloudfunctions2_function")["fn"]))
    assert "RECLAIM_WEBHOOK_SECRET_${secret_environment_variables.key}" in fn_secrets


def test_the_image_is_built_by_the_same_apply_from_claims_archive_whole() -> None:
    fn = resources("google_cloudfunctions2_function")["task_image"]
    build = block(fn, "build_config")
    source = block(block(build, "source"), "storage_source")
    assert unquote(source["object"]) == 'google_storage_bucket_object.source["claim"].name'
    assert "on_deploy_update_policy" in build  # a whole image: no automatic base updates
    assert "automatic_update_policy" not in build
    service = block(fn, "service_config")
    assert unquote(service["ingress_settings"]) == "ALLOW_INTERNAL_ONLY"
    assert unquote(service["min_instance_count"]) == 0
    data = config()["data"]["google_cloud_run_v2_service"]["task_image"]
    assert "google_cloudfunctions2_function.task_image[0].service_config[0].service" in (
        unquote(data["name"])
    )
    # nobody may invoke it: no grant names it
    text = (ROOT / "terraform" / "iam.tf").read_text() + (
        ROOT / "terraform" / "run_jobs.tf"
    ).read_text()
    assert "google_cloudfunctions2_function.task_image[0].name" not in text


def test_only_claims_account_may_run_the_job_with_overrides() -> None:
    grants = resources("google_cloud_run_v2_job_iam_member")
    overrides = {
        name: g
        for name, g in grants.items()
        if unquote(g["role"]) not in ("roles/run.viewer", "roles/run.jobsExecutor")
    }
    runners = overrides
    assert list(runners) == ["claim_runs"]
    grant = runners["claim_runs"]
    assert unquote(grant["role"]) == "roles/run.jobsExecutorWithOverrides"
    assert unquote(grant["member"]) == (
        'serviceAccount:${google_service_account.fn["claim"].email}'
    )
    assert unquote(grant["name"]) == "google_cloud_run_v2_job.pool[each.key].name"
    viewer = grants["sweep_reads"]
    assert unquote(viewer["member"]) == 'serviceAccount:${google_service_account.fn["sweep"].email}'
    # no project-wide Cloud Run role anywhere
    project_roles = [unquote(g["role"]) for g in resources("google_project_iam_member").values()]
    assert not [r for r in project_roles if r.startswith("roles/run.")]


def test_a_gpu_pool_gets_an_accelerator_and_its_count_in_the_limits() -> None:
    selector = _dynamic(_task(), "node_selector")
    assert unquote(selector["for_each"]) == "each.value.gpu == null ? [] : [each.value.gpu]"
    assert unquote(block(selector, "content")["accelerator"]) == "node_selector.value.type"
    limits = unquote(block(_container(), "resources")["limits"])
    assert '"nvidia.com/gpu" = tostring(each.value.gpu.count)' in limits


def _preconditions() -> list[str]:
    conditions = [unquote(p["condition"]) for p in block(_job(), "lifecycle")["precondition"]]
    return [c.replace("each.value", "var.pool").replace("each.key", '"p"') for c in conditions]


def _pool(**fields: Any) -> dict[str, Any]:
    defaults = {"task_timeout_seconds": 86400, "memory": "2Gi", "cpu": "1", "gpu": None}
    return {**defaults, **fields}


GPU = {"type": "nvidia-l4", "count": 1}
RULES = json.loads((ROOT / "shared" / "job_sizing.json").read_text())


def _mib(memory: str) -> float:
    return float(memory[:-2]) * (1024 if memory.endswith("Gi") else 1)


@pytest.mark.parametrize(
    ("pool", "region", "ok"),
    [
        (_pool(), "us-central1", True),
        (_pool(task_timeout_seconds=604800), "us-central1", True),  # 168 h
        (_pool(task_timeout_seconds=604801), "us-central1", False),
        (_pool(task_timeout_seconds=0), "us-central1", False),
        (_pool(gpu=GPU, cpu="4", memory="16Gi", task_timeout_seconds=3600), "us-central1", True),
        (_pool(gpu=GPU, cpu="4", memory="16Gi", task_timeout_seconds=3601), "us-central1", False),
        (_pool(gpu=GPU, cpu="2", memory="16Gi", task_timeout_seconds=600), "us-central1", False),
        (_pool(gpu=GPU, cpu="4", memory="4Gi", task_timeout_seconds=600), "us-central1", False),
        (_pool(gpu=GPU, cpu="4", memory="16Gi", task_timeout_seconds=600), "us-east1", False),
        (_pool(gpu={"type": "nvidia-h100", "count": 1}, cpu="8"), "us-central1", False),
    ],
)
def test_the_job_preconditions_bound_timeout_gpu_sizing_and_region(
    pool: dict[str, Any], region: str, ok: bool
) -> None:
    """F1: with a GPU at least 4 CPU and 16 GiB, an hour at most, in a GPU region."""
    local = {"job_rules": RULES, "job_mib": {"p": _mib(pool["memory"])}}
    results = [evaluate(c, {"pool": pool, "region": region}, local) for c in _preconditions()]
    assert all(isinstance(r, bool) for r in results)
    assert all(results) is ok


def test_the_jobs_come_from_the_pools_files_job_pools_with_their_job_sizing() -> None:
    assert "run_job_pools" not in config().get("variable", {})
    specs = unquote(config()["locals"]["job_specs"])
    assert "for name, j in local.job_raw" in specs
    for field in ("task_timeout_seconds", "memory", "cpu", "max_executions", "start_grace_seconds"):
        assert f"j.{field}" in specs, field
    assert 'p.runner == "job"' in unquote(config()["locals"]["job_pools"])
    pool_env = unquote(config()["locals"]["pool_env"])
    assert "RECLAIM_RUN_JOB = local.run_jobs[name]" in pool_env  # a job pool's claim


def test_the_functions_deploy_after_the_jobs_and_their_grants_have_propagated() -> None:
    """F4/F6: a pool's claim never dispatches to a job that does not exist yet, that it may
    not run yet (the grant propagates: a wait), or that still runs the previous image (the
    job, whose image the same apply rebuilds, is updated before the functions)."""
    sleep = resources("time_sleep")["run_jobs_grants_propagate"]
    waited = {unquote(d) for d in sleep["depends_on"]}
    assert {
        "google_cloud_run_v2_job_iam_member.claim_runs",
        "google_cloud_run_v2_job_iam_member.sweep_reads",
        "google_cloud_run_v2_job_iam_member.cancellers",
    } <= waited
    assert unquote(sleep["create_duration"]) == "${var.iam_propagation_seconds}s"
    fn = resources("google_cloudfunctions2_function")["fn"]
    assert "time_sleep.run_jobs_grants_propagate" in {unquote(d) for d in fn["depends_on"]}
    assert "google_cloud_run_v2_job.pool" in dependencies("google_cloudfunctions2_function.fn")


def test_the_admin_and_dashboard_may_cancel_executions() -> None:
    """F11: a cancel stops the execution; who cancels (the operator routes, the dashboard)
    holds Cloud Run Jobs Executor on each job, nothing project-wide."""
    grant = resources("google_cloud_run_v2_job_iam_member")["cancellers"]
    assert unquote(grant["role"]) == "roles/run.jobsExecutor"
    assert 'setproduct(keys(local.job_specs), ["admin", "dashboard"])' in unquote(grant["for_each"])
    member = unquote(grant["member"])
    assert "google_service_account.admin.email" in member
    assert 'google_service_account.fn["dashboard"].email' in member


def test_a_new_image_epoch_rebuilds_the_task_image() -> None:
    """F12: the job's image is patched only when deployed; the epoch redeploys it."""
    build = block(resources("google_cloudfunctions2_function")["task_image"], "build_config")
    assert "var.task_image_epoch" in unquote(str(build["environment_variables"]))
    assert "task_image_epoch" in config()["variable"]
