"""shared.shards: the shard of a job id and the merge of shard listings (pure)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pytest

from shared.shards import MAX_SHARDS, check_buckets, merge_sorted, shard_of

SEQUENTIAL = [f"order-{i}" for i in range(4000)]


def test_one_shard_is_always_shard_zero() -> None:
    assert {shard_of(j, 1) for j in SEQUENTIAL[:50]} == {0}


@pytest.mark.parametrize("count", [2, 3, 4, 16])
def test_sequential_ids_spread_evenly_over_the_shards(count: int) -> None:
    spread = Counter(shard_of(j, count) for j in SEQUENTIAL)
    assert set(spread) == set(range(count))
    expected = len(SEQUENTIAL) / count
    assert all(abs(n - expected) < 0.15 * expected for n in spread.values()), spread


def test_the_shard_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = (
        f"from shared.shards import shard_of\nprint([shard_of(j, 7) for j in {SEQUENTIAL[:64]!r}])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == str([shard_of(j, 7) for j in SEQUENTIAL[:64]])


def test_a_shard_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        shard_of("a", 0)


def test_merge_takes_the_first_limit_of_the_union_in_key_order() -> None:
    rng = random.Random(7)
    names = sorted({f"k{rng.randrange(10_000):05d}" for _ in range(300)})
    shards: list[list[str]] = [[], [], []]
    for name in names:
        shards[rng.randrange(3)].append(name)
    for limit in (1, 5, 37, None):
        # each shard answers a page of at most `limit` from the same start, as a bucket does
        pages = [s if limit is None else s[:limit] for s in shards]
        want = names if limit is None else names[:limit]
        assert merge_sorted(pages, str, limit) == want


def test_bucket_lists_are_checked() -> None:
    assert check_buckets(["a", "b"]) == ("a", "b")
    for bad in ([], ["a", "a"], [f"b{i}" for i in range(MAX_SHARDS + 1)]):
        with pytest.raises(ValueError):
            check_buckets(bad)
