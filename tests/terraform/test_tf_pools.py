"""terraform/pools.tf, offline: its locals are evaluated on pools files (hcl_eval) and
make, per pool, the claim function, topic and push subscription the local cloud makes
(reclaim/local/wiring.py, reclaim/local/cloud.py), with the defaults and the refusals of the code
(shared/pools.py); the default pool keeps today's resources, at today's addresses."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.cloud import pool_service
from shared import pools
from shared.config import ENV_VARS
from shared.errors import ConfigError
from shared.run_jobs import RUN_ENV_VARS
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import ROOT, block, config, optional_defaults, resources, unquote

ORDER = (
    "pools_declared",
    "pool_names",
    "pools",
    "job_pools",
    "pool_pipelines",
    "pool_ints",
    "pool_topics",
    "pool_functions",
    "job_raw",
    "job_gpu_type",
    "job_specs",
    "job_field_names",
    "job_mib",
    "job_formats_ok",
    "pool_job_problems",
    "pool_problems",
)
PREFIX = "reclaim"
REGION = "us-central1"  # variables.tf's default: Cloud Run jobs offer GPUs there


def plan(doc: Any, region: str = REGION) -> dict[str, Any]:
    """pools.tf's and run_jobs.tf's locals for a decoded pools file, with the variables'
    defaults (and the shared job rules, which run_jobs.tf reads from the same file)."""
    variables = {
        "name_prefix": PREFIX,
        "region": region,
        "claim_function": optional_defaults("claim_function"),
        "claim_push": optional_defaults("claim_push"),
        "queue": optional_defaults("queue"),
    }
    found: dict[str, Any] = {
        "pools_found": True,
        "pools_inside": True,
        "pools_doc": doc,
        "pool_field_names": [unquote(f) for f in config()["locals"]["pool_field_names"]],
        "job_rules": json.loads(pools.JOB_RULES_FILE.read_text()),
    }
    for name in ORDER:
        raw = config()["locals"][name]
        found[name] = (
            evaluate(unquote(raw), variables, found) if isinstance(raw, str) else _literal(raw)
        )
    return found


def _literal(value: Any) -> Any:
    """A literal object or list as python-hcl2 gives it (quoted strings unquoted)."""
    if isinstance(value, dict):
        return {unquote(k): _literal(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return (
        float(value) if isinstance(value, int) and not isinstance(value, bool) else unquote(value)
    )


LIGHT = {"pipelines": ["webhook"], "concurrency": 8, "stale_seconds": 60, "memory": "512Mi"}
HEAVY = {"pipelines": ["render"], "memory": "4Gi", "cpu": "2", "concurrency": 1, "runner": "job"}


def test_a_pool_that_names_only_pipelines_is_todays_claim_apart() -> None:
    planned = plan({"pools": {"light": {"pipelines": ["webhook"]}}})
    assert planned["pool_problems"] == []
    code = pools.parse({"pools": {"light": {"pipelines": ["webhook"]}}}).get("light")
    light = planned["pools"]["light"]
    for field in (
        "memory",
        "cpu",
        "concurrency",
        "timeout_seconds",
        "min_instances",
        "max_instances",
        "ack_deadline_seconds",
        "max_delivery_attempts",
        "runner",
    ):
        tf = light[field]
        assert (tf if isinstance(tf, str) else int(tf)) == getattr(code, field), field
    assert set(planned["pool_field_names"]) == set(pools.Pool.__dataclass_fields__) - {"name"}
    # no stale time of its own: the deployment's (the code's None means the same)
    assert code.stale_seconds is None
    assert light["stale_seconds"] == optional_defaults("queue")["stale_seconds"]


def test_each_pool_gets_the_names_the_local_cloud_uses() -> None:
    planned = plan({"pools": {"light": LIGHT, "heavy": HEAVY}})
    assert planned["pool_problems"] == []
    assert planned["pool_topics"] == {
        f"jobs_{p}": pools.topic_of(f"{PREFIX}-jobs", p) for p in ("light", "heavy")
    }
    functions = planned["pool_functions"]
    assert set(functions) == {"claim_light", "claim_heavy"}
    for key, fn in functions.items():
        pool = key.removeprefix("claim_")
        # functions.tf names each "<prefix>-<key with - for _>": claim-<pool>, as locally
        assert f"{PREFIX}-{key.replace('_', '-')}" == f"{PREFIX}-{pool_service(pool)}"
        assert (fn["source"], fn["entry_point"]) == ("claim", "claim")
        assert fn["concurrency"] == planned["pools"][pool]["concurrency"]
    assert set(planned["job_pools"]) == {"heavy"}
    pushes = config()["locals"]["pool_pushes"]
    assert unquote(pushes).count(f"{'${var.name_prefix}'}-claim-${{name}}") == 1
    assert wiring.pool_subscription("light") == "reclaim-claim-light"


def test_a_pools_claim_is_told_its_pool_and_sizing_with_the_codes_names() -> None:
    env = unquote(config()["locals"]["pool_env"])
    told = set(re.findall(r"(RECLAIM_\w+)\s*=", env))
    runner = {v.name for v in RUN_ENV_VARS}  # a job pool's claim: its Cloud Run job
    assert told - runner == {
        "RECLAIM_POOL",
        "RECLAIM_MAX_CONCURRENT",
        "RECLAIM_STALE_SECONDS",
        "RECLAIM_PUSH_DEADLINE_SECONDS",
    }
    assert told - runner <= {v.name for v in ENV_VARS} and runner <= told
    fn = resources("google_cloudfunctions2_function")["fn"]
    conditions = [unquote(p["condition"]) for p in block(fn, "lifecycle")["precondition"]]
    assert "length(local.pool_problems) == 0" in conditions


def test_the_default_pool_keeps_todays_addresses() -> None:
    """The pools are merged into the maps the resources iterate, so claim, the jobs
    topic and reclaim-claim stay at fn["claim"], topics["jobs"] and push["claim"]."""
    assert unquote(config()["locals"]["all_topics"]) == "merge(local.topics, local.pool_topics)"
    assert unquote(config()["locals"]["all_pushes"]) == "merge(local.pushes, local.pool_pushes)"
    topics = resources("google_pubsub_topic")["topics"]
    assert unquote(topics["for_each"]) == "local.all_topics"
    assert "moved" not in config()  # nothing moved: an existing deployment is not recreated
    sas = resources("google_service_account")["fn"]
    assert unquote(sas["for_each"]) == "local.functions"  # pool claims run as claim
    rings = resources("google_pubsub_topic_iam_member")["fn_rings_pools"]
    assert "setproduct(keys(local.functions), keys(local.pool_topics))" in unquote(
        rings["for_each"]
    )


def _pool(**fields: Any) -> dict[str, Any]:
    return {"pools": {"a": {"pipelines": ["x"], **fields}}}


def _job(**fields: Any) -> dict[str, Any]:
    return _pool(runner="job", job=fields)


L4 = {"type": "nvidia-l4"}

# One table for both: every file the functions refuse at start (shared/pools.py), the plan
# refuses (pool_problems), and every file they take, the plan takes.
BAD: list[Any] = [
    {"pools": {"a": {"pipelines": ["x"]}, "b": {"pipelines": ["x"]}}},
    {"pools": {"default": {"pipelines": ["x"]}}},
    {"pools": {"Light": {"pipelines": ["x"]}}},
    {"pools": {"a" * 21: {"pipelines": ["x"]}}},
    {"pools": {}, "extra": 1},
    {"pool": {}},
    {"pools": []},
    {"pools": {"a": "x"}},
    _pool(pipelines=[]),
    _pool(pipelines="x"),
    _pool(pipelines=[1]),
    _pool(pipelines=[""]),
    _pool(pipelines=["x", "x"]),
    _pool(memroy="1Gi"),
    _pool(concurrency=0),
    _pool(concurrency="4"),
    _pool(concurrency=2.5),
    _pool(concurrency=True),
    _pool(max_instances=1001),
    _pool(min_instances=-1),
    _pool(memory="4GB"),
    _pool(memory=4),
    _pool(cpu=1),
    _pool(cpu="1.5"),
    _pool(cpu="0.5"),  # concurrency 4 needs a whole CPU
    _pool(timeout_seconds=60),
    _pool(timeout_seconds=4000),
    _pool(min_instances=3, max_instances=2),
    _pool(stale_seconds=1),
    _pool(stale_seconds="60"),
    _pool(ack_deadline_seconds=900),
    _pool(max_delivery_attempts=3),
    _pool(runner="batch"),
    _pool(runner=5),
    _pool(job={}),
    _pool(runner="push", job=None),
    _pool(runner="job", job=None),
    _job(timeout_seconds=60),  # the task's is task_timeout_seconds
    _job(task_timeout_seconds=0),
    _job(task_timeout_seconds=604801),
    _job(task_timeout_seconds="60"),
    _job(memory="16GB"),
    _job(cpu="3"),
    _job(cpu="1", memory="16Gi"),
    _job(cpu="4", memory="1Gi"),
    _job(cpu="0.05", memory="512Mi"),
    _job(cpu="0.25", memory="1Gi"),
    _job(cpu="0.1234", memory="512Mi"),
    _job(gpu={"type": "t4"}),
    _job(gpu={"type": "nvidia-l4", "count": 2}),
    _job(gpu={"type": "nvidia-l4", "zone": "a"}),
    _job(gpu=L4, cpu="2"),
    _job(gpu=L4, memory="8Gi"),
    _job(gpu=L4, task_timeout_seconds=7200),
    _job(max_executions=0),
    _job(max_executions=1001),
    _job(start_grace_seconds=-1),
    _job(start_grace_seconds=86401),
    {
        "pools": {
            "a": {"pipelines": ["x"], "runner": "job", "job": {"max_executions": 600}},
            "b": {"pipelines": ["y"], "runner": "job", "job": {"max_executions": 600}},
        }
    },
]

GOOD: list[Any] = [
    {},
    {"pools": {}},
    {"pools": {"light": LIGHT, "heavy": HEAVY}},
    {"pools": {"gpu": {"pipelines": ["r"], "runner": "job", "job": {"gpu": L4}}}},
    _job(gpu={"type": "nvidia-l4", "count": 1}, cpu="8", memory="32Gi", task_timeout_seconds=1800),
    _job(gpu=None),
    _job(cpu="0.5", memory="1Gi"),
    _job(cpu="0.25", memory="512Mi"),
    _job(cpu="6", memory="24Gi", task_timeout_seconds=604800),
    _job(max_executions=5, start_grace_seconds=0),
    _pool(concurrency=4.0, stale_seconds=3.5),
    {
        "pools": {
            "a": {"pipelines": ["x"], "runner": "job", "job": {"max_executions": 500}},
            "b": {"pipelines": ["y"], "runner": "job", "job": {"max_executions": 500}},
        }
    },
]


def _id(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)[:70]


@pytest.mark.parametrize("doc", BAD, ids=[_id(d) for d in BAD])
def test_the_plan_refuses_what_the_code_refuses(doc: Any) -> None:
    with pytest.raises(ConfigError) as err:
        pools.parse(doc)
    problems = plan(doc)["pool_problems"]
    assert problems, f"the code says {err.value}, the plan says nothing"


@pytest.mark.parametrize("doc", GOOD, ids=[_id(d) for d in GOOD])
def test_the_plan_takes_what_the_code_takes_with_the_same_job_sizing(doc: Any) -> None:
    parsed = pools.parse(doc if doc else {"pools": {}})
    planned = plan(doc)
    assert planned["pool_problems"] == []
    # one set of defaults: the job terraform deploys is the sizing the code reads
    for name, spec in planned["job_specs"].items():
        code = parsed.get(name).job
        assert code is not None
        gpu = (
            None
            if spec["gpu"] is None
            else pools.Gpu(spec["gpu"]["type"], int(spec["gpu"]["count"]))
        )
        assert (
            int(spec["task_timeout_seconds"]),
            spec["memory"],
            spec["cpu"],
            gpu,
            int(spec["max_executions"]),
            int(spec["start_grace_seconds"]),
        ) == (
            code.task_timeout_seconds,
            code.memory,
            code.cpu,
            code.gpu,
            code.max_executions,
            code.start_grace_seconds,
        )
        # and run_jobs.tf's preconditions on the job take it too
        for condition in _job_preconditions():
            assert (
                evaluate(
                    condition, {"region": REGION}, {**planned, "each_value": spec, "each_key": name}
                )
                is True
            )
    assert set(planned["job_specs"]) == {n for n, p in parsed.declared.items() if p.runner == "job"}


def _job_preconditions() -> list[str]:
    job = resources("google_cloud_run_v2_job")["pool"]
    return [
        unquote(p["condition"])
        .replace("each.value", "local.each_value")
        .replace("each.key", "local.each_key")
        for p in block(job, "lifecycle")["precondition"]
    ]


def test_a_gpu_pool_outside_the_gpu_regions_is_refused_by_the_plan_and_at_start() -> None:
    doc = {"pools": {"gpu": {"pipelines": ["r"], "runner": "job", "job": {"gpu": L4}}}}
    pool = pools.parse(doc).get("gpu")
    assert pools.gpu_region_problem(pool, REGION) is None and plan(doc)["pool_problems"] == []
    problem = pools.gpu_region_problem(pool, "us-east1")
    assert problem is not None and "us-east1" in problem
    assert any("us-east1" in p for p in plan(doc, region="us-east1")["pool_problems"])
    assert plan(_job(), region="us-east1")["pool_problems"] == []  # no GPU: any region
    planned = plan(doc, region="us-east1")
    region_check = [c for c in _job_preconditions() if "gpu_regions" in c]
    spec = planned["job_specs"]["gpu"]
    assert region_check and not evaluate(
        region_check[0], {"region": "us-east1"}, {**planned, "each_value": spec, "each_key": "gpu"}
    )


def test_the_plan_reads_the_job_rules_the_code_reads() -> None:
    text = unquote(config()["locals"]["job_rules"])
    assert text == 'jsondecode(file("${local.repo_root}/shared/job_sizing.json"))'
    assert pools.JOB_RULES_FILE == ROOT / "shared" / "job_sizing.json"
    assert set(_literal(config()["locals"]["job_field_names"])) == set(
        pools.JobSizing.__dataclass_fields__
    )
