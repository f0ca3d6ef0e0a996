"""terraform/run_jobs.tf: a Cloud Run job per job pool, with no retries of its own, claim's
settings and identity, an optional GPU, the image built by the same apply from claim's
archive, and the grant to start executions with overrides given to claim's account only."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.run_jobs import RUN_ENV_VARS, RunSettings
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import ROOT, block, config, resources, unquote


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


def test_the_task_runs_claims_image_with_its_settings_and_the_contracts() -> None:
    container = _container()
    assert unquote(container["image"]) == (
        "data.google_cloud_run_v2_service.task_image[0].template[0].containers[0].image"
    )
    assert [unquote(c) for c in container["command"]] == ["/cnb/lifecycle/launcher"]
    assert [unquote(a) for a in container["args"]] == ["python", "task.py"]
    assert (ROOT / "functions" / "claim" / "task.py").exists()  # in claim's archive
    env = unquote(_dynamic(container, "env")["for_each"])
    assert env.startswith("merge(local.reclaim_env, {")
    assert set(re.findall(r"(RECLAIM_\w+) =", env)) == {v.name for v in RUN_ENV_VARS}
    assert 'RECLAIM_RUNNER = "job"' in env and "RECLAIM_RUN_JOB = local.run_jobs[each.key]" in env


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
    runners = {name: g for name, g in grants.items() if unquote(g["role"]) != "roles/run.viewer"}
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
    return [c.replace("each.value", "var.pool") for c in conditions]


def _pool(**fields: Any) -> dict[str, Any]:
    defaults = {"task_timeout_seconds": 86400, "memory": "4Gi", "cpu": "2", "gpu": None}
    return {**defaults, **fields}


GPU = {"type": "nvidia-l4", "count": 1}


@pytest.mark.parametrize(
    ("pool", "ok"),
    [
        (_pool(), True),
        (_pool(task_timeout_seconds=604800), True),  # 168 h
        (_pool(task_timeout_seconds=604801), False),
        (_pool(task_timeout_seconds=0), False),
        (_pool(gpu=GPU, cpu="4", task_timeout_seconds=3600), True),  # GPU: 1 h
        (_pool(gpu=GPU, cpu="4", task_timeout_seconds=3601), False),
        (_pool(gpu=GPU, cpu="2", task_timeout_seconds=600), False),  # a GPU needs 4 CPU
        (_pool(gpu={"type": "nvidia-h100", "count": 1}, cpu="8", task_timeout_seconds=600), False),
    ],
)
def test_the_job_preconditions_bound_timeout_and_gpu(pool: dict[str, Any], ok: bool) -> None:
    results = [evaluate(c, {"pool": pool}) for c in _preconditions()]
    assert all(isinstance(r, bool) for r in results)
    assert all(results) is ok


def test_the_jobs_come_from_the_pools_files_job_pools_with_their_job_sizing() -> None:
    assert "run_job_pools" not in config().get("variable", {})
    specs = unquote(config()["locals"]["job_specs"])
    assert "for name, p in local.job_pools" in specs
    for field in ("task_timeout_seconds", "memory", "cpu", "gpu"):
        assert f"p.job.{field}" in specs, field
    assert 'p.runner == "job"' in unquote(config()["locals"]["job_pools"])
    pool_env = unquote(config()["locals"]["pool_env"])
    assert "RECLAIM_RUN_JOB = local.run_jobs[name]" in pool_env  # a job pool's claim
