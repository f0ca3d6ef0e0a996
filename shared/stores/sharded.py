"""ShardedStore: the storage seam over several record buckets, one Store to its callers.

Past one bucket's start (about 1,000 object writes/s, ramping up gradually:
https://cloud.google.com/storage/docs/request-rate) only more buckets add capacity. Each
job's own objects (record, pending marker, batch membership, outputs) live in the shard
`shared.shards.shard_of(id)` picks, so every write of a job lands in one bucket and the
jobs spread evenly over them. What is not a job's own stays in the HOME shard (the first
bucket, RECLAIM_RECORDS_BUCKET): the features' index objects (cron
ticks, flow control, the delayed and ended indexes, workflows...), so each index listing
stays one listing.

Listings of job objects (pending markers, batch members, record ids) list every shard
from the same start and merge them in name order (`shard.merge_sorted`): paging by
start_at means what it means on one bucket, at one list call per shard per page.

The shard list is fixed for a deployment's life: a job is looked for only in the shard
its id hashes to (docs/capacity.md, "Sharding").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import BinaryIO

from shared import records
from shared.jobs import JobRecord
from shared.shards import check_buckets, merge_sorted, shard_of
from shared.storage import (
    OUTPUTS_PREFIX,
    Blob,
    BlobInfo,
    OutputInfo,
    OutputSink,
    PendingEntry,
    RecordStat,
    Store,
    Stored,
    check_limit,
    record_id,
)
from shared.stores.base import CallCounter

__all__ = ["ShardedStore"]


class ShardedStore(CallCounter):
    """Routes each job's objects to its shard; merges job listings across shards.

    The shards' call counts are this store's (one shared counter), so `calls` counts
    every shard's calls as one store's would.
    """

    def __init__(self, shards: Sequence[Store]) -> None:
        super().__init__()
        if len(shards) < 2:
            raise ValueError("a sharded store needs at least two shards")
        names = [str(getattr(s, "bucket_name", i)) for i, s in enumerate(shards)]
        check_buckets(names)
        self.shards: tuple[Store, ...] = tuple(shards)
        self.bucket_names: tuple[str, ...] = tuple(names)
        self.bucket_name = names[0]  # the home bucket: the index objects
        for shard in self.shards:
            if isinstance(shard, CallCounter):
                shard.share_counter(self)

    @property
    def home(self) -> Store:
        return self.shards[0]

    def shard(self, job_id: str) -> Store:
        """The store holding a job's objects (InvalidInput for a bad id, before any call)."""
        return self.shards[shard_of(records.validate_job_id(job_id), len(self.shards))]

    # records

    def read(self, job_id: str) -> Stored:
        return self.shard(job_id).read(job_id)

    def generation(self, job_id: str) -> int:
        return self.shard(job_id).generation(job_id)

    def stat(self, job_id: str) -> RecordStat:
        return self.shard(job_id).stat(job_id)

    def create(self, record: JobRecord, *, fresh_id: bool = False) -> Stored:
        return self.shard(record_id(record)).create(record, fresh_id=fresh_id)

    def update(self, record: JobRecord, generation: int) -> Stored:
        return self.shard(record_id(record)).update(record, generation)

    def allow_index_prefixes(self, prefixes: Iterable[str]) -> None:
        wanted = tuple(prefixes)
        for shard in self.shards:
            shard.allow_index_prefixes(wanted)

    # markers

    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None:
        self.shard(job_id).add_pending(job_id, pool=pool, pipeline=pipeline)

    def remove_pending(self, job_id: str, *, pool: str | None = None) -> None:
        self.shard(job_id).remove_pending(job_id, pool=pool)

    def mark_due(
        self, job_id: str, due: datetime, *, pool: str | None = None, rerings: int = 0
    ) -> None:
        self.shard(job_id).mark_due(job_id, due, pool=pool, rerings=rerings)

    def list_pending(
        self, limit: int | None = None, start_at: str | None = None, *, pool: str | None = None
    ) -> list[PendingEntry]:
        """Every shard's markers from start_at, merged by key: one list per shard."""
        limit = check_limit(limit)
        listings = [s.list_pending(limit, start_at, pool=pool) for s in self.shards]
        return merge_sorted(listings, _entry_key, limit)

    def add_to_batch(self, batch_id: str, job_id: str) -> None:
        self.shard(job_id).add_to_batch(batch_id, job_id)

    def list_batch(
        self, batch_id: str, limit: int | None = None, start_at: str | None = None
    ) -> list[str]:
        limit = check_limit(limit)
        listings = [s.list_batch(batch_id, limit, start_at) for s in self.shards]
        return merge_sorted(listings, str, limit)

    def list_jobs(self, limit: int | None = None) -> list[str]:
        limit = check_limit(limit)
        return merge_sorted([s.list_jobs(limit) for s in self.shards], str, limit)

    # objects

    def write_output(
        self, job_id: str, attempt: int, name: str, data: bytes, content_type: str
    ) -> str:
        return self.shard(job_id).write_output(job_id, attempt, name, data, content_type)

    def open_output(self, job_id: str, attempt: int, name: str, content_type: str) -> OutputSink:
        return self.shard(job_id).open_output(job_id, attempt, name, content_type)

    def list_outputs(self, job_id: str) -> list[OutputInfo]:
        return self.shard(job_id).list_outputs(job_id)

    def read_output(self, job_id: str, name: str) -> tuple[BinaryIO, OutputInfo]:
        return self.shard(job_id).read_output(job_id, name)

    def output_url(self, job_id: str, name: str, expires_s: float) -> str | None:
        return self.shard(job_id).output_url(job_id, name, expires_s)

    def read_object(
        self, bucket: str, name: str, generation: int | None = None
    ) -> tuple[bytes, str | None]:
        """An object's bytes and type. An output asked of the home bucket (where one
        bucket keeps it: outputs/<id>/...) is read from its job's shard, so a caller
        that knows only the object name finds it."""
        if bucket == self.bucket_name and name.startswith(OUTPUTS_PREFIX):
            job_id = name[len(OUTPUTS_PREFIX) :].split("/", 1)[0]
            shard = self.shard(job_id) if job_id else self.home
            owner = self.bucket_names[self.shards.index(shard)]
            return shard.read_object(owner, name, generation)
        return self.home.read_object(bucket, name, generation)

    # index objects: the home shard's

    def put_blob(self, name: str, data: bytes, *, generation: int) -> int:
        return self.home.put_blob(name, data, generation=generation)

    def read_blob(self, name: str) -> Blob:
        return self.home.read_blob(name)

    def delete_blob(self, name: str, *, generation: int | None = None) -> None:
        self.home.delete_blob(name, generation=generation)

    def list_blobs(
        self,
        prefix: str,
        *,
        start_at: str | None = None,
        end_before: str | None = None,
        limit: int | None = None,
    ) -> list[BlobInfo]:
        return self.home.list_blobs(prefix, start_at=start_at, end_before=end_before, limit=limit)


def _entry_key(entry: PendingEntry) -> str:
    return entry.key
