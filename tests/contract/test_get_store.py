"""get_store: one GcsStore per process, built from Settings, on the emulator endpoint."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from shared.config import Settings
from shared.stores.factory import get_store
from shared.stores.gcs import GcsStore
from tests.contract.contract_support import make_gcs_client, new_job


def test_get_store_is_one_store_per_process(
    gcs_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    bucket = make_gcs_client(gcs_server).create_bucket(f"gs-{uuid.uuid4().hex[:12]}")
    settings = Settings.from_env({}, project="reclaim-contract", records_bucket=bucket.name)

    seen: list[Any] = []
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        seen.append(get_store(settings))

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = seen[0]
    assert isinstance(store, GcsStore) and all(s is store for s in seen)
    assert get_store(settings) is store

    created = store.create(new_job("through-get-store"))
    assert store.read("through-get-store") == created
