"""ShardedStore on two buckets of fake-gcs-server: where each object lands, and listings
that merge the shards as one bucket's would (the shared contract is test_store_contract)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shared.config import Settings
from shared.shards import shard_of
from shared.storage import job_object, pending_object
from shared.stores.factory import get_store
from shared.stores.gcs import GcsStore
from shared.stores.sharded import ShardedStore
from tests.contract.contract_support import make_gcs_client, new_job

IDS = [f"order-{i:04d}" for i in range(40)]  # sequential user ids, as users choose them


@pytest.fixture
def two(gcs_server: str) -> tuple[ShardedStore, list[Any]]:
    client = make_gcs_client(gcs_server)
    buckets = [client.create_bucket(f"shard-{uuid.uuid4().hex[:12]}") for _ in range(2)]
    gcs = make_gcs_client(gcs_server)
    return ShardedStore([GcsStore(b.name, gcs) for b in buckets]), buckets


def _names(bucket: Any, prefix: str) -> set[str]:
    return {b.name for b in bucket.list_blobs(prefix=prefix)}


def test_each_job_lives_whole_in_the_shard_its_id_hashes_to(two):
    store, buckets = two
    for job_id in IDS:
        store.create(new_job(job_id))
        store.add_pending(job_id)
        store.add_to_batch("b1", job_id)
        store.write_output(job_id, 1, "out.txt", job_id.encode(), "text/plain")
    for i, bucket in enumerate(buckets):
        mine = {j for j in IDS if shard_of(j, 2) == i}
        assert mine and len(mine) < len(IDS)  # both shards hold some of them
        assert _names(bucket, "jobs/") == {job_object(j) for j in mine}
        assert _names(bucket, "pending/") == {pending_object(j) for j in mine}
        assert _names(bucket, "batches/") == {f"batches/b1/{j}" for j in mine}
        assert _names(bucket, "outputs/") == {f"outputs/{j}/1/out.txt" for j in mine}
    # an output named as one bucket names it is read from its job's shard
    far = next(j for j in IDS if shard_of(j, 2) == 1)
    assert store.read_object(buckets[0].name, f"outputs/{far}/1/out.txt")[0] == far.encode()


def test_paged_listings_walk_every_shard_in_name_order(two):
    store, _ = two
    for job_id in IDS:
        store.add_pending(job_id)
        store.add_to_batch("b1", job_id)
    seen: list[str] = []
    start: str | None = None
    while True:  # the sweep's walk: pages of 7 from the key after the last one seen
        page = store.list_pending(limit=7, start_at=start)
        seen += [e.key for e in page]
        if len(page) < 7:
            break
        start = page[-1].key + "\x00"
    assert seen == sorted(pending_object(j).removeprefix("pending/") for j in IDS)
    assert store.list_batch("b1", limit=5, start_at="order-0010") == IDS[10:15]


def test_index_objects_stay_in_the_home_bucket(two):
    store, buckets = two
    store.allow_index_prefixes(["things/"])
    for i in range(6):
        store.put_blob(f"things/{i}", b"x", generation=0)
    assert _names(buckets[0], "things/") == {f"things/{i}" for i in range(6)}
    assert _names(buckets[1], "") == set()
    store.calls.clear()
    assert len(store.list_blobs("things/", limit=3)) == 3
    assert store.calls == {"list": 1}  # an index listing stays one listing


def test_get_store_shards_when_settings_name_shard_buckets(
    gcs_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    client = make_gcs_client(gcs_server)
    home, extra = (client.create_bucket(f"gs-{uuid.uuid4().hex[:12]}") for _ in range(2))
    settings = Settings.from_env(
        {"RECLAIM_SHARD_BUCKETS": extra.name}, project="reclaim-contract", records_bucket=home.name
    )
    store = get_store(settings)
    assert isinstance(store, ShardedStore) and store.bucket_names == (home.name, extra.name)
    for job_id in IDS[:6]:
        store.create(new_job(job_id))
    assert store.list_jobs() == IDS[:6]
    assert _names(home, "jobs/") and _names(extra, "jobs/")
