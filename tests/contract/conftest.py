"""The storage contract runs against every store: MemoryStore, GcsStore on
fake-gcs-server (over the wire, through the official client), and ShardedStore over two
GcsStores on two buckets of fake-gcs-server.

The GCS client here is pointed at the server with client_options, not with
STORAGE_EMULATOR_HOST, so these tests need no Pub/Sub emulator.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared.shards import shard_of
from shared.storage import Store, job_object, legacy_job_object
from shared.stores.gcs import GcsStore
from shared.stores.memory import MemoryStore
from shared.stores.sharded import ShardedStore
from tests.contract.contract_support import Harness, make_gcs_client


@pytest.fixture(scope="session")
def direct_gcs(gcs_server: str) -> Any:
    """A plain client on fake-gcs-server, for planting and inspecting objects."""
    return make_gcs_client(gcs_server)


def _memory_harness() -> Harness:
    store = MemoryStore()

    def raw(name: str) -> bytes | None:
        obj = store.raw(store.bucket_name, name)
        return None if obj is None else obj.data

    return Harness(
        store=store,
        bucket_name=store.bucket_name,
        other_bucket="memory-uploads",
        put_raw=store.put_raw,
        raw=raw,
        put_object=store.put_object,
        put_legacy=lambda job_id, data: store.put_raw(job_id, data, legacy=True),
        put_job_object=lambda _job_id, name: store.put_object(store.bucket_name, name, b""),
    )


def _gcs_harness(client: Any, endpoint: str) -> Harness:
    records_bucket = client.create_bucket(f"records-{uuid.uuid4().hex[:12]}")
    uploads_bucket = client.create_bucket(f"uploads-{uuid.uuid4().hex[:12]}")
    store = GcsStore(records_bucket.name, make_gcs_client(endpoint))

    def put_raw(job_id: str, data: bytes) -> None:
        records_bucket.blob(job_object(job_id)).upload_from_string(data)

    def put_legacy(job_id: str, data: bytes) -> int:
        blob = records_bucket.blob(legacy_job_object(job_id))
        blob.upload_from_string(data, content_type="application/json")
        return int(blob.generation)

    def raw(name: str) -> bytes | None:
        blob = records_bucket.get_blob(name)
        return None if blob is None else blob.download_as_bytes()

    def put_object(bucket: str, name: str, data: bytes, ct: str | None) -> int:
        blob = client.bucket(bucket).blob(name)
        blob.upload_from_string(data, content_type=ct)
        return int(blob.generation)

    return Harness(
        store=store,
        bucket_name=records_bucket.name,
        other_bucket=uploads_bucket.name,
        put_raw=put_raw,
        raw=raw,
        put_object=put_object,
        put_legacy=put_legacy,
        put_job_object=lambda _job_id, name: records_bucket.blob(name).upload_from_string(b""),
    )


def _sharded_harness(client: Any, endpoint: str) -> Harness:
    """Two record buckets; the back doors look in the shard a job id hashes to (its
    objects), or in every shard (any other name: the first that holds it)."""
    buckets = [client.create_bucket(f"records-{uuid.uuid4().hex[:12]}") for _ in range(2)]
    uploads_bucket = client.create_bucket(f"uploads-{uuid.uuid4().hex[:12]}")
    gcs = make_gcs_client(endpoint)
    store = ShardedStore([GcsStore(b.name, gcs) for b in buckets])

    def put_raw(job_id: str, data: bytes) -> None:
        buckets[shard_of(job_id, 2)].blob(job_object(job_id)).upload_from_string(data)

    def put_legacy(job_id: str, data: bytes) -> int:
        blob = buckets[shard_of(job_id, 2)].blob(legacy_job_object(job_id))
        blob.upload_from_string(data, content_type="application/json")
        return int(blob.generation)

    def raw(name: str) -> bytes | None:
        for bucket in buckets:
            blob = bucket.get_blob(name)
            if blob is not None:
                return bytes(blob.download_as_bytes())
        return None

    def put_object(bucket: str, name: str, data: bytes, ct: str | None) -> int:
        blob = client.bucket(bucket).blob(name)
        blob.upload_from_string(data, content_type=ct)
        return int(blob.generation)

    return Harness(
        store=store,
        bucket_name=buckets[0].name,
        other_bucket=uploads_bucket.name,
        put_raw=put_raw,
        raw=raw,
        put_object=put_object,
        put_legacy=put_legacy,
        put_job_object=lambda job_id, name: (
            buckets[shard_of(job_id, 2)].blob(name).upload_from_string(b"")
        ),
    )


@pytest.fixture(params=["memory", "gcs", "sharded"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    if request.param == "memory":
        yield _memory_harness()
        return
    endpoint = request.getfixturevalue("gcs_server")
    make = _gcs_harness if request.param == "gcs" else _sharded_harness
    yield make(request.getfixturevalue("direct_gcs"), endpoint)


@pytest.fixture
def store(harness: Harness) -> Store:
    return harness.store
