"""MemoryStore: the storage seam in memory, with GcsStore's semantics, for unit tests.

Records are kept as encoded bytes (as GCS keeps them), so a caller mutating a
returned dict never changes what is stored, and corrupt bytes can be planted
with ``put_raw``. Generations only increase, per store, like GCS's.
"""

from __future__ import annotations

import io
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO

from shared import records
from shared.errors import AlreadyExists, LostRace, NotFound
from shared.jobs import JobRecord
from shared.storage import (
    JOBS_PREFIX,
    OUTPUT_CHUNK_BYTES,
    PENDING_PREFIX,
    RECORD_CONTENT_TYPE,
    STATUS_METADATA,
    Blob,
    BlobInfo,
    OutputInfo,
    PendingEntry,
    RecordStat,
    Stored,
    batch_object,
    batch_prefix,
    check_generation,
    check_limit,
    decode_record,
    index_name,
    index_prefix,
    job_object,
    legacy_job_object,
    names_to_ids,
    output_object,
    output_prefix,
    pending_key,
    pending_listing,
    pending_object,
    record_id,
    record_ids,
    stamped,
    status_metadata,
)
from shared.stores.base import StoreBase

__all__ = ["MemoryObject", "MemoryStore"]


_PAGE_SIZE = 1000  # GCS returns at most this many names per list call


@dataclass(frozen=True)
class _Fault:
    kind: str
    error: BaseException
    after: bool


@dataclass(frozen=True)
class MemoryObject:
    """One stored object."""

    data: bytes
    generation: int
    content_type: str | None
    created: datetime


class MemoryStore(StoreBase):
    """In-memory seam; thread-safe; counts calls like GcsStore."""

    def __init__(self, bucket_name: str = "memory-records", *, legacy_names: bool = True) -> None:
        super().__init__(legacy_names=legacy_names)
        self.bucket_name = bucket_name
        self._objects: dict[tuple[str, str], MemoryObject] = {}
        self._due: dict[str, datetime] = {}  # pending marker name -> its "due" metadata
        self._pipeline: dict[str, str] = {}  # pending marker name -> its "pipeline" metadata
        self._rerings: dict[str, int] = {}  # pending marker name -> its re-ring count
        self._status: dict[str, str] = {}  # record name -> its STATUS_METADATA
        self._generation = 0
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []

    # test helpers (not part of the Store protocol)

    def inject_failure(
        self, kind: str, error: BaseException, *, times: int = 1, after: bool = False
    ) -> None:
        """Make the next `times` calls of kind ("read", "write", ...) raise error.

        With after=True the write or delete takes effect first and only its
        answer is lost, like a GCS call whose retries ran out after it landed.
        """
        if kind not in ("read", "write", "delete", "list"):
            raise ValueError(f"unknown call kind {kind!r}")
        with self._lock:
            self._faults.extend(_Fault(kind, error, after) for _ in range(times))

    def _count(self, kind: str) -> None:
        super()._count(kind)
        self._fire(kind, after=False)

    def _fire(self, kind: str, *, after: bool) -> None:
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault.kind == kind and fault.after == after:
                    del self._faults[i]
                    raise fault.error

    def put_raw(self, job_id: str, data: bytes, *, legacy: bool = False) -> int:
        """Plant raw bytes as a job's record (e.g. corrupt ones, or under its old name with
        legacy=True); returns the generation."""
        name = legacy_job_object(job_id) if legacy else job_object(job_id)
        with self._lock:
            self._keep_status(name, None)
            return self._put(self.bucket_name, name, data, RECORD_CONTENT_TYPE)

    def put_object(
        self, bucket: str, name: str, data: bytes, content_type: str | None = None
    ) -> int:
        """Plant any object (e.g. an upload in another bucket); returns the generation."""
        with self._lock:
            return self._put(bucket, name, bytes(data), content_type)

    def raw(self, bucket: str, name: str) -> MemoryObject | None:
        """What is stored under a name, uncounted (for assertions)."""
        with self._lock:
            return self._objects.get((bucket, name))

    def names(self, prefix: str = "") -> list[str]:
        """Object names in the records bucket under prefix, sorted, uncounted."""
        with self._lock:
            return sorted(
                n for (b, n) in self._objects if b == self.bucket_name and n.startswith(prefix)
            )

    # records

    def _read_name(self, job_id: str, name: str) -> Stored:
        self._count("read")
        with self._lock:
            obj = self._objects.get((self.bucket_name, name))
        if obj is None:
            raise NotFound(f"no record {job_id}")
        return Stored(decode_record(job_id, obj.data), obj.generation)

    def _stat_name(self, job_id: str, name: str) -> RecordStat:
        self._count("stat")
        with self._lock:
            obj = self._objects.get((self.bucket_name, name))
            status = self._status.get(name)
        if obj is None:
            raise NotFound(f"no record {job_id}")
        return RecordStat(obj.generation, status)

    def create(self, record: JobRecord, *, fresh_id: bool = False) -> Stored:
        job_id = record_id(record)
        new = stamped(record)
        data = records.encode(new)
        if not fresh_id:
            self._refuse_old_record(job_id)
        self._count("write")
        with self._lock:
            key = (self.bucket_name, job_object(job_id))
            if key in self._objects:
                raise AlreadyExists(f"record {job_id} already exists")
            gen = self._put(*key, data, RECORD_CONTENT_TYPE)
            self._keep_status(key[1], new)
        self._fire("write", after=True)
        return Stored(records.decode(data, job_id), gen)

    def update(self, record: JobRecord, generation: int) -> Stored:
        job_id = record_id(record)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise ValueError(f"generation must be a positive integer, got {generation!r}")
        new = stamped(record)
        data = records.encode(new)
        name = self._name_to_write(job_id)
        written = self._cas(name, data, new, generation)
        if written is None:
            other = self._elsewhere(job_id, name)
            written = None if other is None else self._cas(other, data, new, generation)
        if written is None:
            raise LostRace(f"record {job_id} changed since generation {generation}")
        return Stored(records.decode(data, job_id), written)

    def _cas(self, name: str, data: bytes, record: JobRecord, generation: int) -> int | None:
        """One generation-matched write of a record's name: its new generation, or None
        when the stored generation is another (or there is none)."""
        self._count("write")
        with self._lock:
            key = (self.bucket_name, name)
            current = self._objects.get(key)
            if current is None or current.generation != generation:
                return None
            gen = self._put(*key, data, RECORD_CONTENT_TYPE)
            self._keep_status(name, record)
        self._fire("write", after=True)
        return gen

    def _keep_status(self, name: str, record: JobRecord | None) -> None:
        """What GcsStore writes as the record's custom metadata (none for planted bytes)."""
        status = None if record is None else status_metadata(record).get(STATUS_METADATA)
        if status is None:
            self._status.pop(name, None)
        else:
            self._status[name] = status

    # markers

    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None:
        name = pending_object(job_id, pool)
        if self._create_marker(name) and pipeline:
            with self._lock:
                self._pipeline[name] = pipeline

    def remove_pending(self, job_id: str, *, pool: str | None = None) -> None:
        for name in self._marker_names(job_id, pool):
            self._count("delete")
            with self._lock:
                found = self._objects.pop((self.bucket_name, name), None) is not None
                self._due.pop(name, None)
                self._pipeline.pop(name, None)
                self._rerings.pop(name, None)
            self._fire("delete", after=True)
            if found:
                return

    def mark_due(
        self, job_id: str, due: datetime, *, pool: str | None = None, rerings: int = 0
    ) -> None:
        for name in self._marker_names(job_id, pool):
            self._count("write")
            with self._lock:
                found = (self.bucket_name, name) in self._objects
                if found:
                    self._due[name] = due
                    self._rerings[name] = rerings
            self._fire("write", after=True)
            if found:
                return

    def list_pending(
        self, limit: int | None = None, start_at: str | None = None, *, pool: str | None = None
    ) -> list[PendingEntry]:
        prefix, top_only = pending_listing(pool)
        start = PENDING_PREFIX + start_at if start_at else ""
        listed = self._list(prefix, limit, top_only=top_only, start_name=start)
        with self._lock:
            due, pipelines, rerings = dict(self._due), dict(self._pipeline), dict(self._rerings)
        out = []
        for name, created in listed:
            key = pending_key(name)
            if key is not None:
                entry = PendingEntry(
                    key[1],
                    created,
                    due.get(name),
                    key[0],
                    pipelines.get(name),
                    rerings.get(name, 0),
                    key[2],
                )
                out.append(entry)
        return out

    def add_to_batch(self, batch_id: str, job_id: str) -> None:
        self._create_marker(batch_object(batch_id, job_id))

    def list_batch(
        self, batch_id: str, limit: int | None = None, start_at: str | None = None
    ) -> list[str]:
        prefix = batch_prefix(batch_id)
        return names_to_ids([n for n, _ in self._list(prefix, limit, start_at)], prefix)

    def list_jobs(self, limit: int | None = None) -> list[str]:
        names = [n for n, _ in self._list(JOBS_PREFIX, None)]
        return record_ids(names, check_limit(limit))

    def _create_marker(self, name: str) -> bool:
        """Whether the marker is new (adding is idempotent, as GcsStore's)."""
        self._count("write")
        with self._lock:
            new = (self.bucket_name, name) not in self._objects
            if new:
                self._put(self.bucket_name, name, b"", "application/octet-stream")
        self._fire("write", after=True)
        return new

    def _list(
        self,
        prefix: str,
        limit: int | None,
        start_at: str | None = None,
        *,
        top_only: bool = False,
        start_name: str = "",
    ) -> list[tuple[str, datetime]]:
        """Sorted like GCS; counted per page of _PAGE_SIZE like GcsStore. `top_only`: as
        GCS's delimiter "/", only names with no "/" after the prefix; `start_name`: a
        whole name to start at (instead of prefix + start_at)."""
        limit = check_limit(limit)
        start = prefix + start_at if start_at else start_name
        with self._lock:
            found = sorted(
                (n, o.created)
                for (b, n), o in self._objects.items()
                if b == self.bucket_name
                and n.startswith(prefix)
                and n >= start
                and not (top_only and "/" in n[len(prefix) :])
            )
        found = found if limit is None else found[:limit]
        for _ in range(max(1, -(-len(found) // _PAGE_SIZE))):
            self._count("list")
        return found

    # objects

    def write_output(
        self, job_id: str, attempt: int, name: str, data: bytes, content_type: str
    ) -> str:
        obj = output_object(job_id, attempt, name)
        self._count("write")
        with self._lock:
            existing = self._objects.get((self.bucket_name, obj))
            if existing is None:
                self._put(self.bucket_name, obj, bytes(data), content_type)
            elif existing.data != bytes(data):
                raise AlreadyExists(f"output {obj} already exists with other content")
        self._fire("write", after=True)
        return obj

    def read_object(
        self, bucket: str, name: str, generation: int | None = None
    ) -> tuple[bytes, str | None]:
        self._count("read")
        with self._lock:
            obj = self._objects.get((bucket, name))
        if obj is None or (generation is not None and obj.generation != generation):
            raise NotFound(f"no object gs://{bucket}/{name}")
        return obj.data, obj.content_type

    def open_output(self, job_id: str, attempt: int, name: str, content_type: str) -> _MemorySink:
        return _MemorySink(self, output_object(job_id, attempt, name), content_type)

    def _commit_output(self, obj: str, data: bytes, content_type: str) -> str:
        self._count("write")
        with self._lock:
            if (self.bucket_name, obj) in self._objects:
                raise AlreadyExists(f"output {obj} already exists")
            self._put(self.bucket_name, obj, data, content_type)
        self._fire("write", after=True)
        return obj

    def list_outputs(self, job_id: str) -> list[OutputInfo]:
        prefix = output_prefix(job_id)
        self._count("list")
        with self._lock:
            found = sorted(
                (n, o)
                for (b, n), o in self._objects.items()
                if b == self.bucket_name and n.startswith(prefix)
            )
        return [OutputInfo(n, len(o.data), o.content_type, o.created) for n, o in found]

    def read_output(self, job_id: str, name: str) -> tuple[BinaryIO, OutputInfo]:
        if not name.startswith(output_prefix(job_id)):
            raise NotFound(f"no output {name} of job {job_id}")
        self._count("read")
        with self._lock:
            obj = self._objects.get((self.bucket_name, name))
        if obj is None:
            raise NotFound(f"no output {name}")
        info = OutputInfo(name, len(obj.data), obj.content_type, obj.created)
        return io.BytesIO(obj.data), info

    def output_url(self, job_id: str, name: str, expires_s: float) -> str | None:
        return None  # nothing serves memory: the caller streams the bytes

    # index objects

    def put_blob(self, name: str, data: bytes, *, generation: int) -> int:
        obj = index_name(name, self.index_prefixes)
        gen = check_generation(generation, allow_zero=True)
        payload = bytes(data)
        self._count("write")
        with self._lock:
            key = (self.bucket_name, obj)
            current = self._objects.get(key)
            if gen == 0 and current is not None:
                if current.data != payload:
                    raise AlreadyExists(f"{obj} already exists")
                return current.generation
            if gen > 0 and (current is None or current.generation != gen):
                raise LostRace(f"{obj} changed since generation {gen}")
            new = self._put(*key, payload, "application/octet-stream")
        self._fire("write", after=True)
        return new

    def read_blob(self, name: str) -> Blob:
        obj = index_name(name, self.index_prefixes)
        self._count("read")
        with self._lock:
            found = self._objects.get((self.bucket_name, obj))
        if found is None:
            raise NotFound(f"no {obj}")
        return Blob(found.data, found.generation)

    def delete_blob(self, name: str, *, generation: int | None = None) -> None:
        obj = index_name(name, self.index_prefixes)
        gen = None if generation is None else check_generation(generation, allow_zero=False)
        self._count("delete")
        with self._lock:
            current = self._objects.get((self.bucket_name, obj))
            if current is not None and (gen is None or current.generation == gen):
                del self._objects[(self.bucket_name, obj)]
        self._fire("delete", after=True)

    def list_blobs(
        self,
        prefix: str,
        *,
        start_at: str | None = None,
        end_before: str | None = None,
        limit: int | None = None,
    ) -> list[BlobInfo]:
        pre = index_prefix(prefix, self.index_prefixes)
        limit = check_limit(limit)
        with self._lock:
            found = sorted(
                (
                    BlobInfo(n, o.created, o.generation)
                    for (b, n), o in self._objects.items()
                    if b == self.bucket_name
                    and n.startswith(pre)
                    and (start_at is None or n >= start_at)
                    and (end_before is None or n < end_before)
                ),
                key=lambda info: info.name,
            )
        found = found if limit is None else found[:limit]
        for _ in range(max(1, -(-len(found) // _PAGE_SIZE))):
            self._count("list")
        return found

    def _put(self, bucket: str, name: str, data: bytes, content_type: str | None) -> int:
        """Store under the lock (held by the caller); returns the new generation."""
        self._generation += 1
        self._objects[(bucket, name)] = MemoryObject(
            data, self._generation, content_type, datetime.now(UTC)
        )
        return self._generation


class _MemorySink:
    """An output stream kept in a spooled temporary file (memory up to one chunk, then
    disk), created in the store at commit, create-only."""

    def __init__(self, store: MemoryStore, obj: str, content_type: str) -> None:
        self._store = store
        self._obj = obj
        self._type = content_type
        self._file = tempfile.SpooledTemporaryFile(max_size=OUTPUT_CHUNK_BYTES)  # noqa: SIM115 (closed by commit or abort)

    def write(self, data: bytes) -> int:
        return self._file.write(bytes(data))

    def commit(self) -> str:
        self._file.seek(0)
        data = self._file.read()
        self._file.close()
        return self._store._commit_output(self._obj, data, self._type)

    def abort(self) -> None:
        self._file.close()
