"""The storage seam on Cloud Storage: GcsStore, its client and its retry. The only module
that talks to Cloud Storage (GcsStore shares one client per process: the client is
documented thread-safe)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from shared import records
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    LostRace,
    NotFound,
    StorageError,
    Unavailable,
)
from shared.jobs import JobRecord, JobStatus
from shared.storage import (
    JOBS_PREFIX,
    LIST_PAGE_SIZE,
    OUTPUT_CHUNK_BYTES,
    PENDING_PREFIX,
    PIPELINE_METADATA,
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
    due_metadata,
    due_of,
    index_name,
    index_prefix,
    job_object,
    marker_metadata,
    names_to_ids,
    output_object,
    output_prefix,
    pending_key,
    pending_listing,
    pending_object,
    record_id,
    record_ids,
    rerings_of,
    stamped,
    status_metadata,
)
from shared.stores.base import StoreBase

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client

_T = TypeVar("_T")

HTTP_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds per HTTP request
# Connections the storage client keeps open per host: every call one process may have in
# flight. submit is the widest: its request concurrency (terraform submit_function, 8) x
# one request's thread pool (shared.submission.create._WORKERS, 16). requests keeps 10 by
# default and opens-and-discards the rest. tests/terraform keeps concurrency x workers
# within it (terraform/README.md, "Sizing submit for a 1000-job batch").
HTTP_POOL_SIZE = 128
RETRY_MAX_DELAY_S = 4.0
RETRY_DEADLINE_S = 30.0
_TOKEN_REFRESH_TIMEOUT_S = 300  # what google-cloud-core gives the session it builds itself


def default_retry() -> Any:
    """Bounded retry of transient errors (429/5xx/connection), used on every call.

    The library's own predicate and its own delays, so no retry starts sooner than the
    library's would: Cloud Storage takes about one write per second to one object name
    (https://cloud.google.com/storage/quotas), and a 429 retried sooner only meets that
    limit again. ``DEFAULT_RETRY`` (google-cloud-storage ``retry.py``) keeps
    google-api-core's defaults: a first delay of 1.0 s that doubles
    (``google/api_core/retry/retry_base.py``, ``_DEFAULT_INITIAL_DELAY``,
    ``_DEFAULT_DELAY_MULTIPLIER``), each sleep drawn at random below it (full jitter;
    https://cloud.google.com/storage/docs/retry-strategy). Ours are only the longest
    delay and the deadline (RETRY_DEADLINE_S rather than 120 s), so a call gives up in
    time for the caller's own budget.

    Passed explicitly so generation-matched writes are retried too; that is safe
    because a 412 after a retry is resolved by the write_id re-read, never retried.
    """
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_delay(maximum=RETRY_MAX_DELAY_S).with_timeout(RETRY_DEADLINE_S)


def make_client(project: str | None) -> Client:
    """A storage client whose HTTP session keeps HTTP_POOL_SIZE connections per host.

    Credentials as the client picks them: anonymous when STORAGE_EMULATOR_HOST is set
    (fake-gcs-server), else Application Default Credentials with the client's scopes.
    The session is the one the client would build itself (google-auth's
    AuthorizedSession, mutual TLS configured when enabled), with a bigger pool: the
    client has no public pool setting, and takes a session as ``_http``
    (googleapis/python-storage#253 sizes the pool the same way).
    """
    import google.auth
    from google.auth.credentials import AnonymousCredentials, Credentials
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    credentials: Credentials
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        credentials = AnonymousCredentials()
    else:
        credentials, _ = google.auth.default(scopes=storage.Client.SCOPE)
    session = AuthorizedSession(credentials, refresh_timeout=_TOKEN_REFRESH_TIMEOUT_S)
    adapter = HTTPAdapter(pool_maxsize=HTTP_POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)  # the emulator
    session.configure_mtls_channel()  # a no-op unless enabled; it keeps the pool size
    _no_span_bucket_lookups()
    return storage.Client(project=project, credentials=credentials, _http=session)


_OTEL_TRACES_ENV = "ENABLE_GCS_PYTHON_CLIENT_OTEL_TRACES"
_SPAN_BUCKET_METADATA_OFF_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def _no_span_bucket_lookups() -> None:
    """Turn off the client's bucket lookups for trace-span attributes unless its traces
    are on. Since 3.x, google-cloud-storage fetches a bucket's metadata to annotate the
    OpenTelemetry spans it makes of each call ("App-centric Observability",
    googleapis/google-cloud-python a0da993d) whether or not traces are exported, and
    after every 404 it checks in the background that the bucket still exists: one
    more Cloud Storage call per absent object read. reclaim reads absent objects on
    purpose (a job's workflow parent mark, a pipeline's pause flag), so that was a
    bucket GET for about every job (bench/big_backlog.py's "other" calls). A user who
    sets either variable keeps their choice."""
    if os.environ.get(_OTEL_TRACES_ENV, "").strip().lower() not in ("1", "true", "yes", "on"):
        os.environ.setdefault(_SPAN_BUCKET_METADATA_OFF_ENV, "true")


class GcsStore(StoreBase):
    """The seam on Cloud Storage. One per process; the client and retry are shared by threads."""

    def __init__(
        self,
        bucket_name: str,
        client: Client | None = None,
        *,
        retry: Any = None,
        timeout: Any = HTTP_TIMEOUT,
        retention_days: Mapping[JobStatus, float] | None = None,
        legacy_names: bool = True,
    ) -> None:
        super().__init__(legacy_names=legacy_names)
        self._retention_days = dict(retention_days or {})
        from google.api_core import exceptions as gexc

        self._gexc = gexc
        self._failures = _failure_types()
        self.bucket_name = bucket_name
        self._client = client if client is not None else make_client(None)
        self._bucket: Bucket = self._client.bucket(bucket_name)
        self._retry = retry if retry is not None else default_retry()
        self._timeout = timeout

    def _call(self, kind: str, what: str, fn: Callable[[], _T], *, count: bool = True) -> _T:
        """Count one logical call and translate the client's errors into the seam's."""
        if count:
            self._count(kind)
        try:
            return fn()
        except self._gexc.NotFound:
            raise NotFound(f"no {what}") from None
        except self._gexc.PreconditionFailed:
            raise _Precondition(what) from None
        except self._failures as exc:
            raise Unavailable(f"{kind} of {what} failed: {type(exc).__name__}: {exc}") from exc

    def _upload(
        self,
        name: str,
        data: bytes,
        content_type: str,
        generation: int,
        custom_time: datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Any:
        blob = self._bucket.blob(name)
        if custom_time is not None:
            blob.custom_time = custom_time
        if metadata:
            blob.metadata = dict(metadata)  # sent in the same multipart upload
        blob.upload_from_string(
            data,
            content_type=content_type,
            if_generation_match=generation,
            retry=self._retry,
            timeout=self._timeout,
        )
        return blob

    def _download(self, bucket: str, name: str, generation: int | None = None) -> tuple[bytes, Any]:
        blob = self._client.bucket(bucket).blob(name, generation=generation)
        return blob.download_as_bytes(retry=self._retry, timeout=self._timeout), blob

    # records

    def _read_name(self, job_id: str, name: str) -> Stored:
        data, blob = self._call(
            "read", f"record {job_id}", lambda: self._download(self.bucket_name, name)
        )
        return Stored(decode_record(job_id, data), int(blob.generation or 0))

    def _stat_name(self, job_id: str, name: str) -> RecordStat:
        """objects.get without the body
        (https://cloud.google.com/storage/docs/json_api/v1/objects/get)."""

        def stat() -> RecordStat:
            blob = self._bucket.get_blob(name, retry=self._retry, timeout=self._timeout)
            if blob is None:
                raise self._gexc.NotFound(name)
            return RecordStat(int(blob.generation or 0), (blob.metadata or {}).get(STATUS_METADATA))

        return self._call("stat", f"record {job_id}", stat)

    def create(self, record: JobRecord, *, fresh_id: bool = False) -> Stored:
        job_id = record_id(record)
        new = stamped(record)
        if not fresh_id:
            self._refuse_old_record(job_id)
        try:
            return self._put_record(job_id, job_object(job_id), new, 0)
        except _Precondition:
            pass
        mine = self._landed(job_id, job_object(job_id), new["write_id"])
        if mine is None:
            raise AlreadyExists(f"record {job_id} already exists")
        return mine

    def update(self, record: JobRecord, generation: int) -> Stored:
        job_id = record_id(record)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise ValueError(f"generation must be a positive integer, got {generation!r}")
        new = stamped(record)
        tried: set[str] = set()
        name: str | None = self._name_to_write(job_id)
        while name is not None and name not in tried:
            tried.add(name)
            try:
                return self._put_record(job_id, name, new, generation)
            except _Precondition:
                pass
            mine = self._landed(job_id, name, new["write_id"])
            if mine is not None:
                return mine
            name = self._elsewhere(job_id, name)
        raise LostRace(f"record {job_id} changed since generation {generation}")

    def expires_at(self, record: JobRecord) -> datetime | None:
        """When a terminal record may go: the custom time the lifecycle rule deletes after.

        Pending records get none, so no rule can ever delete a job that still owes work.
        """
        status = record.get("status")
        days = None if status is None else self._retention_days.get(status)
        if days is None:
            return None
        return datetime.now(UTC) + timedelta(days=days)

    def _put_record(self, job_id: str, name: str, record: JobRecord, generation: int) -> Stored:
        data = records.encode(record)
        expires = self.expires_at(record)
        blob = self._call(
            "write",
            f"record {job_id}",
            lambda: self._upload(
                name, data, RECORD_CONTENT_TYPE, generation, expires, status_metadata(record)
            ),
        )
        return Stored(records.decode(data, job_id), int(blob.generation or 0))

    def _landed(self, job_id: str, name: str, write_id: str) -> Stored | None:
        """After a 412 at name: the record there if it is our own write (the retry's first
        try landed)."""
        try:
            current = self._read_name(job_id, name)
        except (NotFound, CorruptRecord):
            return None
        return current if current.record.get("write_id") == write_id else None

    # markers

    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None:
        """The job's marker, with its pipeline as custom metadata (the same upload)."""
        self._create_marker(pending_object(job_id, pool), marker_metadata(pipeline))

    def remove_pending(self, job_id: str, *, pool: str | None = None) -> None:
        """Delete the job's marker at the first of its names that holds one; none there
        is fine (already gone)."""
        for name in self._marker_names(job_id, pool):
            with contextlib.suppress(NotFound):
                self._delete_marker(name)
                return

    def _delete_marker(self, name: str) -> None:
        blob = self._bucket.blob(name)
        self._call("delete", name, lambda: blob.delete(retry=self._retry, timeout=self._timeout))

    def mark_due(
        self, job_id: str, due: datetime, *, pool: str | None = None, rerings: int = 0
    ) -> None:
        """Say on the job's marker (custom metadata, one patch) when it is due again, and
        how many times in a row it was re-rung; a marker already gone (the job finished)
        is left so. A patch sets the keys it names, removes those it sets to null and
        keeps the others (the pipeline:
        https://cloud.google.com/storage/docs/json_api/v1/how-tos/performance#patch)."""
        for name in self._marker_names(job_id, pool):
            with contextlib.suppress(NotFound):
                self._patch_marker(name, due_metadata(due, rerings))
                return

    def _patch_marker(self, name: str, metadata: dict[str, str | None]) -> None:
        blob = self._bucket.blob(name)
        blob.metadata = metadata
        self._call("write", name, lambda: blob.patch(retry=self._retry, timeout=self._timeout))

    def list_pending(
        self, limit: int | None = None, start_at: str | None = None, *, pool: str | None = None
    ) -> list[PendingEntry]:
        """Markers in name order, from the first key >= start_at (PendingEntry.key) when
        given: one pool's (the default pool's: the top-level ones, by a delimited
        listing), or every pool's (None)."""
        prefix, top_only = pending_listing(pool)
        start = PENDING_PREFIX + start_at if start_at else None
        blobs = self._list_range(prefix, limit, start, None, delimiter="/" if top_only else None)
        out = []
        for blob in blobs:
            key = pending_key(blob.name)
            if key is not None:
                meta = blob.metadata or {}
                out.append(
                    PendingEntry(
                        key[1],
                        blob.time_created,
                        due_of(meta),
                        key[0],
                        meta.get(PIPELINE_METADATA),
                        rerings_of(meta),
                        key[2],
                    )
                )
        return out

    def add_to_batch(self, batch_id: str, job_id: str) -> None:
        self._create_marker(batch_object(batch_id, job_id))

    def list_batch(
        self, batch_id: str, limit: int | None = None, start_at: str | None = None
    ) -> list[str]:
        """Member ids in name order, from the first id >= start_at when given."""
        prefix = batch_prefix(batch_id)
        return names_to_ids([b.name for b in self._list(prefix, limit, start_at)], prefix)

    def list_jobs(self, limit: int | None = None) -> list[str]:
        """Every record id in id order, both name layouts (operator tool only: this costs
        O(history), and a limit still lists every name: jobs/ is in hash order)."""
        return record_ids([b.name for b in self._list(JOBS_PREFIX, None)], check_limit(limit))

    def _create_marker(self, name: str, metadata: Mapping[str, str] | None = None) -> None:
        with contextlib.suppress(_Precondition):  # already there: adding is idempotent
            self._call(
                "write",
                name,
                lambda: self._upload(name, b"", "application/octet-stream", 0, metadata=metadata),
            )

    def _list(self, prefix: str, limit: int | None, start_at: str | None = None) -> list[Any]:
        """Blobs under prefix, from prefix + start_at when given."""
        return self._list_range(prefix, limit, prefix + start_at if start_at else None, None)

    def _list_range(
        self,
        prefix: str,
        limit: int | None,
        start_offset: str | None,
        end_offset: str | None,
        *,
        delimiter: str | None = None,
        fields: str = "items(name,timeCreated,generation,metadata),nextPageToken",
    ) -> list[Any]:
        """Blobs under prefix within [start_offset, end_offset) (full names; with a
        delimiter, only those with none after the prefix); one counted list call per page
        (pages are fetched lazily)."""
        it = self._client.list_blobs(
            self._bucket,
            prefix=prefix,
            delimiter=delimiter,
            start_offset=start_offset,
            end_offset=end_offset,
            max_results=check_limit(limit),
            page_size=LIST_PAGE_SIZE,
            fields=fields,
            retry=self._retry,
            timeout=self._timeout,
        )
        pages = iter(it.pages)
        out: list[Any] = []
        while True:
            page = self._call("list", f"{prefix}*", lambda: next(pages, None), count=False)
            if page is None:
                return out
            self._count("list")  # the page was fetched by this next()
            out.extend(page)

    # objects

    def write_output(
        self, job_id: str, attempt: int, name: str, data: bytes, content_type: str
    ) -> str:
        obj = output_object(job_id, attempt, name)
        payload = bytes(data)
        try:
            self._call("write", obj, lambda: self._upload(obj, payload, content_type, 0))
            return obj
        except _Precondition:
            pass
        try:
            existing: bytes | None = self.read_object(self.bucket_name, obj)[0]
        except NotFound:
            existing = None
        if existing != payload:
            raise AlreadyExists(f"output {obj} already exists with other content")
        return obj  # the same attempt wrote the same bytes before: a re-run, not a clash

    def read_object(
        self, bucket: str, name: str, generation: int | None = None
    ) -> tuple[bytes, str | None]:
        """An object's bytes and type; with generation, exactly that version (uploads)."""
        data, blob = self._call(
            "read",
            f"object gs://{bucket}/{name}",
            lambda: self._download(bucket, name, generation),
        )
        return data, blob.content_type

    # outputs (a stage's stream, the outputs route's listing and download)

    def open_output(self, job_id: str, attempt: int, name: str, content_type: str) -> _GcsSink:
        """A resumable upload, create-only (ifGenerationMatch=0 on the session,
        https://cloud.google.com/storage/docs/performing-resumable-uploads): each
        OUTPUT_CHUNK_BYTES written goes out as one chunk, and the object exists only once
        the last one is sent (commit)."""
        from google.cloud.storage.fileio import BlobWriter

        obj = output_object(job_id, attempt, name)
        blob = self._bucket.blob(obj)
        writer = BlobWriter(
            blob,
            chunk_size=OUTPUT_CHUNK_BYTES,
            retry=self._retry,
            content_type=content_type,
            if_generation_match=0,
            timeout=self._timeout,
        )
        return _GcsSink(self, obj, writer)

    def list_outputs(self, job_id: str) -> list[OutputInfo]:
        blobs = self._list_range(
            output_prefix(job_id),
            None,
            None,
            None,
            fields="items(name,size,contentType,timeCreated),nextPageToken",
        )
        return [OutputInfo(b.name, int(b.size or 0), b.content_type, b.time_created) for b in blobs]

    def stat_object(self, name: str) -> Any | None:
        """objects.get of a name in this bucket, without the body; None if absent."""
        return self._call(
            "stat",
            f"object {name}",
            lambda: self._bucket.get_blob(name, retry=self._retry, timeout=self._timeout),
        )

    def read_output(self, job_id: str, name: str) -> tuple[BinaryIO, OutputInfo]:
        """objects.get for the size and type, then a reader that downloads in chunks."""
        if not name.startswith(output_prefix(job_id)):
            raise NotFound(f"no output {name} of job {job_id}")

        def get() -> Any:
            blob = self._bucket.get_blob(name, retry=self._retry, timeout=self._timeout)
            if blob is None:
                raise self._gexc.NotFound(name)
            return blob

        blob = self._call("read", f"output {name}", get)
        info = OutputInfo(name, int(blob.size or 0), blob.content_type, blob.time_created)
        reader: BinaryIO = blob.open("rb", chunk_size=OUTPUT_CHUNK_BYTES, retry=self._retry)
        return reader, info

    def output_url(self, job_id: str, name: str, expires_s: float) -> str | None:
        """A V4 signed URL for GET (https://cloud.google.com/storage/docs/access-control/signed-urls).
        Credentials with a key sign it themselves; Cloud Run's service account has none
        (its credentials come from the metadata server), so the client library has the
        IAM Service Account Credentials API sign it (signBlob,
        https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/signBlob;
        https://cloud.google.com/storage/docs/authentication/creating-signatures): the
        service account needs iam.serviceAccounts.signBlob on itself (terraform grants
        roles/iam.serviceAccountTokenCreator). None on an emulator (anonymous credentials):
        fake-gcs-server checks no signature, the caller streams the bytes."""
        from google.auth.credentials import AnonymousCredentials

        if (
            os.environ.get("STORAGE_EMULATOR_HOST")
            or isinstance(self._client._credentials, AnonymousCredentials)
            or not name.startswith(output_prefix(job_id))
        ):
            return None
        return self._call("sign", f"output {name}", lambda: self._signed_url(name, expires_s))

    def _signed_url(self, name: str, expires_s: float) -> str:
        from google.auth import credentials as gcreds
        from google.auth.transport.requests import Request

        creds = self._client._credentials
        blob = self._bucket.blob(name)
        expiration = timedelta(seconds=expires_s)
        if isinstance(creds, gcreds.Signing):  # a key (a service account key file)
            url: str = blob.generate_signed_url(version="v4", expiration=expiration, method="GET")
            return url
        if not creds.valid:
            creds.refresh(Request())
        url = blob.generate_signed_url(
            version="v4",
            expiration=expiration,
            method="GET",
            service_account_email=creds.service_account_email,
            access_token=creds.token,
        )
        return url

    # index objects (small objects under the prefixes this store serves)

    def put_blob(self, name: str, data: bytes, *, generation: int) -> int:
        """Create-only (0) or compare-and-swap (>0); never a blind overwrite.

        A 412 whose stored bytes equal ours is our own write landing twice (the client's
        retry after a lost answer), so it counts as success.
        """
        obj = index_name(name, self.index_prefixes)
        gen = check_generation(generation, allow_zero=True)
        payload = bytes(data)
        try:
            blob = self._call(
                "write", obj, lambda: self._upload(obj, payload, "application/octet-stream", gen)
            )
            return int(blob.generation or 0)
        except _Precondition:
            pass
        try:
            current = self.read_blob(obj)
        except NotFound:
            current = None
        if (
            current is not None
            and current.data == payload
            and (gen == 0 or current.generation != gen)
        ):
            return current.generation
        if gen == 0:
            raise AlreadyExists(f"{obj} already exists")
        raise LostRace(f"{obj} changed since generation {gen}")

    def read_blob(self, name: str) -> Blob:
        obj = index_name(name, self.index_prefixes)
        data, blob = self._call("read", obj, lambda: self._download(self.bucket_name, obj))
        return Blob(data, int(blob.generation or 0))

    def delete_blob(self, name: str, *, generation: int | None = None) -> None:
        """Absent is fine. The generation precondition is honoured by GCS, not by
        fake-gcs-server: callers must not rely on it for correctness."""
        obj = index_name(name, self.index_prefixes)
        gen = None if generation is None else check_generation(generation, allow_zero=False)
        blob = self._bucket.blob(obj)
        with contextlib.suppress(NotFound, _Precondition):
            self._call(
                "delete",
                obj,
                lambda: blob.delete(
                    if_generation_match=gen, retry=self._retry, timeout=self._timeout
                ),
            )

    def list_blobs(
        self,
        prefix: str,
        *,
        start_at: str | None = None,
        end_before: str | None = None,
        limit: int | None = None,
    ) -> list[BlobInfo]:
        """Names under prefix in lexicographic order, within [start_at, end_before) when given
        (full names); one counted list call per page."""
        pre = index_prefix(prefix, self.index_prefixes)
        blobs = self._list_range(pre, limit, start_at, end_before)
        return [BlobInfo(b.name, b.time_created, int(b.generation or 0)) for b in blobs]


class _Precondition(StorageError):
    """Internal: the write got 412 (create-only or generation-matched)."""


def _failure_types() -> tuple[type[BaseException], ...]:
    """Client errors that mean "the call failed" (after the retry gave up, or permanently)."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud.storage import exceptions as storage_exc

    return (
        gexc.GoogleAPIError,  # HTTP errors and RetryError
        requests.RequestException,
        auth_exc.TransportError,
        storage_exc.InvalidResponse,
        storage_exc.DataCorruption,
        ConnectionError,
        TimeoutError,
    )


class _GcsSink:
    """A stage's output stream on a resumable upload (GcsStore.open_output)."""

    def __init__(self, store: GcsStore, obj: str, writer: Any) -> None:
        self._store = store
        self._obj = obj
        self._writer = writer

    def write(self, data: bytes) -> int:
        return int(
            self._store._call(
                "write", f"output {self._obj}", lambda: self._writer.write(data), count=False
            )
        )

    def commit(self) -> str:
        """Send the last chunk, which creates the object. Cloud Storage refuses it if the
        name exists (the session's ifGenerationMatch=0); fake-gcs-server does not check a
        resumable upload's precondition, so an object found first is refused here too
        (one objects.get), and the session cancelled."""
        if self._store.stat_object(self._obj) is not None:
            self.abort()
            raise AlreadyExists(f"output {self._obj} already exists")
        try:
            self._store._call("write", f"output {self._obj}", self._writer.close)
        except _Precondition:
            raise AlreadyExists(f"output {self._obj} already exists") from None
        return self._obj

    def abort(self) -> None:
        """Cancel the upload session (nothing was created)."""
        with contextlib.suppress(Exception):  # an abandoned session expires by itself
            self._writer.terminate()
