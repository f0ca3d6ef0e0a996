"""Record shards (var.record_shards; docs/capacity.md "Sharding"): none by default, so a
deployment that does not ask sees no new resource; each shard a bucket like records,
with the same grants."""

from __future__ import annotations

import pytest

from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import block, config, resources, unquote, variable_default


def _shard_buckets(shards: int) -> list[str]:
    local = config()["locals"]
    buckets = {
        k: evaluate(v, {"project_id": "p", "name_prefix": "reclaim"})
        for k, v in local["buckets"].items()
    }
    return list(evaluate(local["shard_buckets"], {"record_shards": shards}, {"buckets": buckets}))


def test_one_shard_by_default_means_no_shard_bucket() -> None:
    assert variable_default("record_shards") == 1
    assert _shard_buckets(1) == []
    shard = resources("google_storage_bucket")["record_shards"]
    assert unquote(shard["count"]) == "length(local.shard_buckets)"


@pytest.mark.parametrize("shards", [2, 4])
def test_each_extra_shard_is_a_bucket_named_after_records(shards: int) -> None:
    assert _shard_buckets(shards) == [f"p-reclaim-records-{i}" for i in range(1, shards)]


def test_a_shard_is_hardened_and_kept_like_the_records_bucket() -> None:
    buckets = resources("google_storage_bucket")
    records, shard = buckets["records"], buckets["record_shards"]
    for field in (
        "location",
        "storage_class",
        "uniform_bucket_level_access",
        "public_access_prevention",
        "force_destroy",
        "labels",
    ):
        assert unquote(shard[field]) == unquote(records[field]), field
    rules = [block(r, "condition") for r in shard["lifecycle_rule"]]
    for cond in rules:  # never a pending marker; a record only by its terminal custom time
        prefixes = cond.get("matches_prefix", [])
        assert not any("pending/" in p for p in prefixes)
        if any("jobs/" in p for p in prefixes):
            assert "age" not in cond and "days_since_custom_time" in cond


def test_every_function_and_the_admin_get_records_grants_on_each_shard() -> None:
    grants = resources("google_storage_bucket_iam_member")
    fn = grants["fn_record_shards"]
    assert "setproduct(keys(local.functions), range(length(local.shard_buckets)))" in str(
        unquote(fn["for_each"])
    )
    assert unquote(fn["role"]) == unquote(grants["fn_records"]["role"])
    assert unquote(grants["admin_record_shards"]["role"]) == unquote(
        grants["admin_records"]["role"]
    )
