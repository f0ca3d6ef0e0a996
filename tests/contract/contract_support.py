"""Helpers of the storage contract suite (imported by its conftest and tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared import records
from shared.storage import Store

PROJECT = "reclaim-contract"
NOW = datetime(2026, 7, 26, 12, 0, tzinfo=UTC)


def make_gcs_client(endpoint: str) -> Any:
    """A storage client on endpoint, anonymous, without touching the environment."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )


@dataclass
class Harness:
    """A store under test plus uncounted back doors into what it stores."""

    store: Store
    bucket_name: str
    other_bucket: str
    put_raw: Callable[[str, bytes], object]
    raw: Callable[[str], bytes | None]
    put_object: Callable[[str, str, bytes, str | None], object]
    put_legacy: Callable[[str, bytes], int]
    """Plant a record's bytes under its old name (jobs/<id>.json, as an earlier reclaim
    wrote it); returns the generation."""
    put_job_object: Callable[[str, str], object]
    """Plant an empty object of a job's under a name (its shard's bucket): e.g. a pending
    marker under its old name, as an earlier reclaim wrote it."""


def shards(store: Store) -> int:
    """How many buckets a store lists in one listing of job objects: one list each."""
    return len(getattr(store, "shards", (store,)))


def new_job(job_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """A fresh valid record (optionally with fields changed)."""
    record = records.new_record(job_id or records.new_job_id(), "demo", {"n": 1}, NOW)
    return {**record, **fields}
