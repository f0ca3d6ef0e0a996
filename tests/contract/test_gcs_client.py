"""The storage client the functions build (shared.stores.gcs.make_client, default_retry),
on fake-gcs-server over the wire: anonymous on STORAGE_EMULATOR_HOST, an HTTP pool
that keeps a connection for every call in flight, and a 429 retried by the client."""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from shared.stores.gcs import HTTP_POOL_SIZE, GcsStore, make_client
from tests.contract.contract_support import PROJECT, make_gcs_client, new_job
from tests.contract.flaky_proxy import Fault, FlakyProxy

PARALLEL = 32  # more than requests' default pool of 10, fewer than HTTP_POOL_SIZE


@pytest.fixture
def bucket_name(gcs_server: str) -> str:
    return str(make_gcs_client(gcs_server).create_bucket(f"client-{uuid.uuid4().hex[:12]}").name)


def test_on_the_emulator_the_client_is_anonymous_with_the_sized_pool(
    gcs_server: str, bucket_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    client = make_client(PROJECT)
    session = client._http
    assert isinstance(session.credentials, AnonymousCredentials)
    for url in (gcs_server, "https://storage.googleapis.com"):
        assert session.get_adapter(url)._pool_maxsize == HTTP_POOL_SIZE
    store = GcsStore(bucket_name, client)
    created = store.create(new_job())
    assert store.read(created.record["id"]) == created


def _read_in_parallel(client: Any, bucket_name: str, name: str) -> None:
    start = threading.Barrier(PARALLEL)

    def read(_: int) -> bytes:
        start.wait(timeout=30)
        return bytes(client.bucket(bucket_name).blob(name).download_as_bytes())

    with ThreadPoolExecutor(PARALLEL) as pool:
        assert set(pool.map(read, range(PARALLEL))) == {b"x"}


def _discarded(caplog: pytest.LogCaptureFixture) -> int:
    """urllib3 warns for each connection it drops because its pool was full."""
    return sum("Connection pool is full" in r.getMessage() for r in caplog.records)


def test_parallel_calls_keep_their_connections(
    gcs_server: str,
    bucket_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_gcs_client(gcs_server).bucket(bucket_name).blob("obj").upload_from_string(b"x")
    caplog.set_level(logging.WARNING, logger="urllib3.connectionpool")
    # every answer is held half a second, so the PARALLEL reads are in flight together
    with FlakyProxy(gcs_server, delay_s=0.5) as proxy:
        _read_in_parallel(make_gcs_client(proxy.url), bucket_name, "obj")
        with_default_pool = _discarded(caplog)
        caplog.clear()
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        _read_in_parallel(make_client(PROJECT), bucket_name, "obj")
        with_ours = _discarded(caplog)
    assert with_default_pool >= 1  # the library's own session keeps 10: this test can fail
    assert with_ours == 0


def test_a_write_answered_429_is_retried_by_the_client_and_lands_once(
    gcs_server: str, bucket_name: str
) -> None:
    direct = GcsStore(bucket_name, make_gcs_client(gcs_server))
    with FlakyProxy(gcs_server) as proxy:
        flaky = GcsStore(bucket_name, make_gcs_client(proxy.url))  # default_retry()
        proxy.add_fault(Fault(forward=False, status=429))  # too many writes: nothing happened
        created = flaky.create(new_job())
        assert proxy.uploads == [429, 200]
    assert direct.read(created.record["id"]) == created
    assert flaky.calls == {"write": 1, "stat": 1}  # the stat: no record has the old name
