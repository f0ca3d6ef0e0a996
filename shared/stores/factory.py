"""The store a deployment's settings name: one GcsStore, or a ShardedStore over several
record buckets on one client, created once per process."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from shared.jobs import JobStatus
from shared.storage import Store
from shared.stores.gcs import GcsStore, make_client
from shared.stores.sharded import ShardedStore

if TYPE_CHECKING:
    from google.cloud.storage import Client

    from shared.config import Settings

_STORES: dict[tuple[str, tuple[str, ...], bool], Store] = {}
_STORES_LOCK = threading.Lock()


def open_store(
    buckets: tuple[str, ...],
    client: Client,
    *,
    retention_days: Mapping[JobStatus, float] | None = None,
    legacy_names: bool = True,
) -> Store:
    """A GcsStore on one bucket, or a ShardedStore over several (home first) on one client."""
    shards = [
        GcsStore(b, client, retention_days=retention_days, legacy_names=legacy_names)
        for b in buckets
    ]
    if len(shards) == 1:
        return shards[0]
    return ShardedStore(shards)


def get_store(settings: Settings) -> Store:
    """The process's one store for the settings' record buckets, created on first use."""
    key = (settings.project, settings.records_buckets, settings.legacy_names)
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = open_store(
                settings.records_buckets,
                make_client(settings.project),
                retention_days=settings.retention_days,
                legacy_names=settings.legacy_names,
            )
            _STORES[key] = store
        return store
