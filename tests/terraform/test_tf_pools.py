"""terraform/pools.tf, offline: its locals are evaluated on pools files (hcl_eval) and
make, per pool, the claim function, topic and push subscription the local cloud makes
(reclaim/local/wiring.py, reclaim/local/cloud.py), with the defaults and the refusals of the code
(shared/pools.py); the default pool keeps today's resources, at today's addresses."""

from __future__ import annotations

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
from tests.terraform.tfhcl import block, config, optional_defaults, resources, unquote

ORDER = ("pools", "job_pools", "pool_pipelines", "pool_topics", "pool_functions", "pool_problems")
PREFIX = "reclaim"


def plan(doc: Any) -> dict[str, Any]:
    """pools.tf's locals for a decoded pools file, with the variables' defaults."""
    variables = {
        "name_prefix": PREFIX,
        "claim_function": optional_defaults("claim_function"),
        "claim_push": optional_defaults("claim_push"),
        "queue": optional_defaults("queue"),
    }
    found: dict[str, Any] = {
        "pools_found": True,
        "pools_inside": True,
        "pools_declared": doc.get("pools", {}),
        "pool_field_names": [unquote(f) for f in config()["locals"]["pool_field_names"]],
    }
    for name in ORDER:
        found[name] = evaluate(unquote(config()["locals"][name]), variables, found)
    return found


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


BAD: list[dict[str, Any]] = [
    {"pools": {"a": {"pipelines": ["x"]}, "b": {"pipelines": ["x"]}}},
    {"pools": {"default": {"pipelines": ["x"]}}},
    {"pools": {"Light": {"pipelines": ["x"]}}},
    {"pools": {"a" * 21: {"pipelines": ["x"]}}},
    {"pools": {"a": {"pipelines": []}}},
    {"pools": {"a": {"pipelines": ["x"], "memroy": "1Gi"}}},
    {"pools": {"a": {"pipelines": ["x"], "concurrency": 0}}},
    {"pools": {"a": {"pipelines": ["x"], "cpu": "0.5"}}},
    {"pools": {"a": {"pipelines": ["x"], "timeout_seconds": 60}}},
    {"pools": {"a": {"pipelines": ["x"], "timeout_seconds": 4000}}},
    {"pools": {"a": {"pipelines": ["x"], "min_instances": 3, "max_instances": 2}}},
    {"pools": {"a": {"pipelines": ["x"], "stale_seconds": 1}}},
    {"pools": {"a": {"pipelines": ["x"], "ack_deadline_seconds": 900}}},
    {"pools": {"a": {"pipelines": ["x"], "max_delivery_attempts": 3}}},
    {"pools": {"a": {"pipelines": ["x"], "runner": "batch"}}},
    {"pools": {"a": {"pipelines": ["x"], "job": {}}}},
]


@pytest.mark.parametrize("doc", BAD, ids=[str(sorted(d["pools"].items()))[:60] for d in BAD])
def test_the_plan_refuses_what_the_code_refuses(doc: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        pools.parse(doc)
    problems = plan(doc)["pool_problems"]
    assert problems, f"the code says {err.value}, the plan says nothing"


GOOD = [
    {},
    {"pools": {}},
    {"pools": {"light": LIGHT, "heavy": HEAVY}},
    {
        "pools": {
            "gpu": {"pipelines": ["r"], "runner": "job", "job": {"gpu": {"type": "nvidia-l4"}}}
        }
    },
]


@pytest.mark.parametrize("doc", GOOD, ids=range(len(GOOD)))
def test_the_plan_takes_what_the_code_takes(doc: dict[str, Any]) -> None:
    pools.parse(doc if doc else {"pools": {}})
    assert plan(doc)["pool_problems"] == []
