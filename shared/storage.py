"""The storage seam: the only module that talks to Cloud Storage.

The contract: every record mutation is create-only or generation-matched, and each write
stamps a fresh ``write_id`` into the record so that a 412 after the client's
own transparent retry can be recognised as "my write landed" by re-reading.

Layout of the records bucket:
  jobs/<id>.json             the record (validated JSON, ``schema`` field)
  pending/<id>               empty marker: the job still owes work (metadata "due":
                             when it was last sent back due; see mark_due); a job of
  pending/<pool>/<id>        a pool other than the default keeps it in its pool's folder
                             (shared.pools), so each pool's drain lists only its own
  batches/<batch>/<id>       empty marker: batch membership
  outputs/<id>/<attempt>/<name>  stage outputs, create-only, keyed by attempt
  <index prefix>/...         small index objects of the features (their prefixes handed in
                             with the feature table; the core's in INDEX_PREFIXES), through
                             put_blob / read_blob / delete_blob / list_blobs

Ids, batch ids and output names are validated here too (``records.InvalidInput``),
so no caller can address an object outside its prefix.

Errors (shared.errors' StorageError family): NotFound, AlreadyExists, LostRace,
CorruptRecord (never deleted or overwritten here), and Unavailable when a call
failed after the bounded retry (a write's outcome is then unknown: re-read).
412 is never retried blindly.
GcsStore shares one client per process (the client is documented thread-safe).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from shared import records
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidInput,
    InvalidRecord,
    LostRace,
    NotFound,
    StorageError,
    Unavailable,
)
from shared.jobs import JobRecord, JobStatus
from shared.pools import DEFAULT as DEFAULT_POOL
from shared.pools import check_name as check_pool
from shared.shards import name_hash

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client

    from shared.config import Settings

_T = TypeVar("_T")

JOBS_PREFIX = "jobs/"
PENDING_PREFIX = "pending/"
DUE_METADATA = "due"
"""A pending marker's custom metadata key: when its job was last sent back due."""
RERINGS_METADATA = "reclaim-rerings"
"""A pending marker's custom metadata key, written with its due mark: how many times in a
row the sweep has re-rung its queued job (absent: none; shared.sweep_plan reads the
others first)."""
PIPELINE_METADATA = "pipeline"
"""A pending marker's custom metadata key, written with it: its job's pipeline (so the
sweep's gauges count a marker it does not read)."""
STATUS_METADATA = "reclaim-status"
"""A record's custom metadata key: its status, written with the record in the same
upload, so a waiting read learns the job ended from object metadata alone."""
BATCHES_PREFIX = "batches/"
OUTPUTS_PREFIX = "outputs/"
RECORD_CONTENT_TYPE = "application/json"
LIST_PAGE_SIZE = 1000
"""Names per list call: Cloud Storage's most (objects.list maxResults,
https://cloud.google.com/storage/docs/json_api/v1/objects/list), asked for explicitly so
that fake-gcs-server pages (and counts) as Cloud Storage does."""

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
_OUTPUT_NAME_MAX = 512
_BLOB_NAME_MAX = 1024  # GCS's own limit on an object name, in bytes
_BLOB_NAME = re.compile(r"[A-Za-z0-9._:=@+-]+")

# Top-level prefixes of the small index objects kept beside the records. The store knows
# no feature: a feature's prefixes come with its row of the feature table, handed to the
# store by the context built on it (shared.seams.Context, `allow_index_prefixes`). Listed
# here only the core machinery's own. Never jobs/, pending/, batches/, outputs/ or sweep/:
# records, markers and outputs have their own typed calls.
INDEX_PREFIXES: tuple[str, ...] = (
    "schedules/",  # cron: each schedule's last tick, shared.cron.ticks
    "dashboard/",  # the dashboard's CSRF key, shared by its instances (shared.dashboard.app)
)
_RESERVED = (JOBS_PREFIX, PENDING_PREFIX, BATCHES_PREFIX, OUTPUTS_PREFIX, "sweep/")


@dataclass(frozen=True)
class Stored:
    """A record as read or written, with the generation that fences the next write."""

    record: JobRecord
    generation: int


@dataclass(frozen=True)
class RecordStat:
    """A record's metadata without its body: its generation, and its status when the
    writer recorded it (None for a record written before STATUS_METADATA existed)."""

    generation: int
    status: str | None


@dataclass(frozen=True)
class Blob:
    """A small index object as read, with the generation that fences the next write

    (its creation time comes with a listing: a download does not carry it).
    """

    data: bytes
    generation: int


@dataclass(frozen=True)
class BlobInfo:
    """One listed index object (no body: listing never downloads)."""

    name: str
    created: datetime | None
    generation: int


@dataclass(frozen=True)
class PendingEntry:
    """One marker of the pending index. `due`: when the job was last sent back to the
    queue due (a hand-back, a rescue, a re-ring: mark_due), so that a freed claim slot
    finds it in the listing without reading every record."""

    job_id: str
    created: datetime | None
    due: datetime | None = None
    pool: str | None = None
    """The pool folder the marker is in (None: pending/<id>, the default pool's)."""
    pipeline: str | None = None
    """Its job's pipeline, written with the marker (None: a marker from before)."""
    rerings: int = 0
    """Re-rings in a row of its queued job, written with the due mark (0: none)."""
    legacy: bool = False
    """The marker has its name from before the hash segment (pending/[<pool>/]<id>)."""

    @property
    def key(self) -> str:
        """The marker's name under pending/ (where a listing resumes: start_at)."""
        return pending_object(self.job_id, self.pool, legacy=self.legacy)[len(PENDING_PREFIX) :]


class Store(Protocol):
    """What the queue needs from storage (GcsStore and MemoryStore implement it)."""

    calls: Counter[str]

    def read(self, job_id: str) -> Stored: ...
    def generation(self, job_id: str) -> int: ...
    def stat(self, job_id: str) -> RecordStat: ...
    def create(self, record: JobRecord, *, fresh_id: bool = False) -> Stored:
        """Create-only; AlreadyExists when the id has a record. fresh_id: the id was just
        drawn at random (records.new_job_id), so no earlier reclaim wrote it under its old
        name and the store need not look there."""
        ...

    def update(self, record: JobRecord, generation: int) -> Stored: ...
    def allow_index_prefixes(self, prefixes: Iterable[str]) -> None: ...
    def add_pending(
        self, job_id: str, *, pool: str | None = None, pipeline: str | None = None
    ) -> None: ...
    def remove_pending(self, job_id: str, *, pool: str | None = None) -> None: ...
    def mark_due(
        self, job_id: str, due: datetime, *, pool: str | None = None, rerings: int = 0
    ) -> None: ...
    def list_pending(
        self, limit: int | None = None, start_at: str | None = None, *, pool: str | None = None
    ) -> list[PendingEntry]: ...
    def add_to_batch(self, batch_id: str, job_id: str) -> None: ...
    def list_batch(
        self, batch_id: str, limit: int | None = None, start_at: str | None = None
    ) -> list[str]: ...
    def list_jobs(self, limit: int | None = None) -> list[str]: ...
    def write_output(
        self, job_id: str, attempt: int, name: str, data: bytes, content_type: str
    ) -> str: ...
    def read_object(
        self, bucket: str, name: str, generation: int | None = None
    ) -> tuple[bytes, str | None]: ...
    def put_blob(self, name: str, data: bytes, *, generation: int) -> int: ...
    def read_blob(self, name: str) -> Blob: ...
    def delete_blob(self, name: str, *, generation: int | None = None) -> None: ...
    def list_blobs(
        self,
        prefix: str,
        *,
        start_at: str | None = None,
        end_before: str | None = None,
        limit: int | None = None,
    ) -> list[BlobInfo]: ...


# --- object names and record coding, shared by both stores ---------------------------


def status_metadata(record: JobRecord) -> dict[str, str]:
    """The custom metadata a record is written with (STATUS_METADATA)."""
    status = record.get("status")
    return {STATUS_METADATA: status} if isinstance(status, str) else {}


def rerings_of(metadata: Mapping[str, str] | None) -> int:
    """A marker's re-ring count from its custom metadata (0 if absent or unreadable)."""
    raw = (metadata or {}).get(RERINGS_METADATA)
    try:
        return max(int(raw), 0) if raw else 0
    except ValueError:
        return 0


def due_metadata(due: datetime, rerings: int) -> dict[str, str | None]:
    """The patch of a due mark: the time, and the re-ring count (None removes the key: a
    hand-back or a rescue starts the count again)."""
    return {DUE_METADATA: due.isoformat(), RERINGS_METADATA: str(rerings) if rerings else None}


def due_of(metadata: Mapping[str, str] | None) -> datetime | None:
    """A marker's due time from its custom metadata (None if absent or unreadable)."""
    raw = (metadata or {}).get(DUE_METADATA)
    try:
        due = datetime.fromisoformat(raw) if raw else None
    except ValueError:
        return None
    return due if due is None or due.tzinfo else due.replace(tzinfo=UTC)


def marker_metadata(pipeline: str | None) -> dict[str, str]:
    """The custom metadata a pending marker is created with (PIPELINE_METADATA)."""
    return {PIPELINE_METADATA: pipeline} if isinstance(pipeline, str) and pipeline else {}


def job_object(job_id: str) -> str:
    """Object name of a job's record: jobs/<h>/<id>.json, h a hash of the id
    (shared.shards.name_hash), so sequential ids spread over the key index."""
    job_id = records.validate_job_id(job_id)
    return f"{JOBS_PREFIX}{name_hash(job_id)}/{job_id}.json"


def legacy_job_object(job_id: str) -> str:
    """A record's name before the hash segment (jobs/<id>.json): such records are still
    read and updated where they are while the store looks at old names (legacy_names)."""
    return f"{JOBS_PREFIX}{records.validate_job_id(job_id)}.json"


def record_name_id(name: str) -> str | None:
    """The job id of a record's object name in either layout; None for any other name."""
    if not name.startswith(JOBS_PREFIX) or not name.endswith(".json"):
        return None
    head, sep, job_id = name[len(JOBS_PREFIX) : -len(".json")].rpartition("/")
    if not job_id or "/" in head or (sep and head != name_hash(job_id)):
        return None
    return job_id


def record_ids(names: Iterable[str], limit: int | None = None) -> list[str]:
    """The job ids of record names (both layouts), in id order, at most limit: a listing
    of jobs/ comes in hash order, not id order."""
    ids = sorted({i for i in map(record_name_id, names) if i is not None})
    return ids if limit is None else ids[:limit]


MARKER_HASH_SEP = "~"
"""Between a marker's hash segment and its job id (pending/<h>~<id>): never in an id, so a
marker of either layout names its job unambiguously, and never "/", so the default pool's
markers stay the top level of pending/ (a pool's folder is the only sub-prefix)."""


def pending_object(job_id: str, pool: str | None = None, *, legacy: bool = False) -> str:
    """Object name of a job's pending marker, pending/[<pool>/]<h>~<id>: the hash segment
    (shared.shards.name_hash, as the record's) spreads sequential ids over the key index
    like the record's name (https://cloud.google.com/storage/docs/request-rate). `legacy`:
    the name before it, pending/[<pool>/]<id>, still listed, marked and removed."""
    job_id = records.validate_job_id(job_id)
    leaf = job_id if legacy else f"{name_hash(job_id)}{MARKER_HASH_SEP}{job_id}"
    if pool is None or pool == DEFAULT_POOL:
        return f"{PENDING_PREFIX}{leaf}"
    return f"{PENDING_PREFIX}{check_pool(pool)}/{leaf}"


def pending_listing(pool: str | None) -> tuple[str, bool]:
    """What a listing of one pool's markers asks for: (prefix, top level only). None:
    every pool's (the sweep); the default pool's are the top-level pending/<id>."""
    if pool is None:
        return PENDING_PREFIX, False
    if pool == DEFAULT_POOL:
        return PENDING_PREFIX, True
    return f"{PENDING_PREFIX}{check_pool(pool)}/", False


def pending_key(name: str) -> tuple[str | None, str, bool] | None:
    """(pool folder or None, job id, old layout) of a marker's object name; None for a
    foreign name (a hash segment that is not its id's)."""
    rest = name[len(PENDING_PREFIX) :] if name.startswith(PENDING_PREFIX) else ""
    pool, _, leaf = rest.rpartition("/")
    if not leaf or "/" in pool:
        return None
    head, sep, job_id = leaf.rpartition(MARKER_HASH_SEP)
    if not sep:
        return (pool or None), leaf, True
    if not job_id or head != name_hash(job_id):
        return None
    return (pool or None), job_id, False


def batch_prefix(batch_id: str) -> str:
    """Prefix under which a batch's membership markers live."""
    return f"{BATCHES_PREFIX}{records.validate_batch_id(batch_id)}/"


def batch_object(batch_id: str, job_id: str) -> str:
    """Object name of one batch membership marker."""
    return f"{batch_prefix(batch_id)}{records.validate_job_id(job_id)}"


def output_object(job_id: str, attempt: int, name: str) -> str:
    """Where an attempt's output lives; keyed by attempt so a zombie never clobbers the winner."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise InvalidInput(f"attempt must be a non-negative integer, got {attempt!r}", "attempt")
    parts = name.split("/") if isinstance(name, str) else []
    if (
        not parts
        or len(name) > _OUTPUT_NAME_MAX
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 32 or c == "\x7f" for c in name)
    ):
        raise InvalidInput(
            f"output name {name!r} is not a safe relative object name", "output name"
        )
    return f"{OUTPUTS_PREFIX}{records.validate_job_id(job_id)}/{attempt}/{name}"


def index_name(name: object, allowed: Collection[str] = ()) -> str:
    """A validated index-object name: under a registered prefix (the core's, or `allowed`,
    those the store was handed), segments of safe characters.

    Raises InvalidInput, so no caller can reach a record, an output or another bucket path.
    """
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > _BLOB_NAME_MAX:
        raise InvalidInput(f"index object name {name!r} is not a valid name", "index name")
    parts = name.split("/")
    prefixes = (*INDEX_PREFIXES, *sorted(allowed))
    if not any(name.startswith(p) for p in prefixes) or any(
        p in (".", "..") or (p and not _BLOB_NAME.fullmatch(p)) for p in parts
    ):
        raise InvalidInput(
            f"index object name {name!r} is not under a registered index prefix "
            f"({', '.join(prefixes) or 'none registered'}) or has unsafe characters",
            "index name",
        )
    return name


def index_prefix(prefix: object, allowed: Collection[str] = ()) -> str:
    """A validated listing prefix: itself under a registered index prefix."""
    if isinstance(prefix, str) and (prefix in INDEX_PREFIXES or prefix in allowed):
        return prefix
    return index_name(prefix, allowed)


def check_generation(generation: object, *, allow_zero: bool) -> int:
    """A precondition generation: 0 (create-only, when allowed) or a positive int."""
    low = 0 if allow_zero else 1
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < low:
        raise ValueError(f"generation must be an integer >= {low}, got {generation!r}")
    return generation


def record_id(record: JobRecord) -> str:
    """The validated id a record will be stored under."""
    if not isinstance(record, dict):
        raise InvalidRecord("a record must be a JSON object")
    return records.validate_job_id(record.get("id"))


def stamped(record: JobRecord) -> JobRecord:
    """A copy with a fresh write_id, so a 412 can be told apart from our own retried write."""
    return {**record, "write_id": uuid.uuid4().hex}


def decode_record(job_id: str, data: bytes) -> JobRecord:
    """Decode stored bytes or raise CorruptRecord (the caller must leave the object alone)."""
    try:
        return records.decode(data, job_id)
    except InvalidRecord as exc:
        raise CorruptRecord(job_id, exc.reason) from exc


def names_to_ids(names: list[str], prefix: str, suffix: str = "") -> list[str]:
    """Ids from object names under prefix; foreign or nested names are skipped."""
    out = []
    for name in names:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix) :]
        if suffix:
            if not rest.endswith(suffix):
                continue
            rest = rest[: -len(suffix)]
        if rest and "/" not in rest:
            out.append(rest)
    return out


def check_limit(limit: int | None) -> int | None:
    """None (everything) or a positive int; anything else is a programming error."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    return limit


class CallCounter:
    """A thread-safe ``calls`` Counter: logical API calls by kind, for the benchmarks."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._calls_lock:
            self.calls[kind] += 1

    def share_counter(self, owner: CallCounter) -> None:
        """Count into owner's counter from now on (the shards of one sharded store)."""
        self.calls, self._calls_lock = owner.calls, owner._calls_lock


_ABSENT_MEMO_MAX = 100_000
"""Ids a store remembers as absent at their old record name (a few MB at most)."""
_ABSENT_MEMO_S = 60.0
"""How long that holds: a submit's existence read and its create are a moment apart; an
earlier reclaim still running beside this one (a rollout) may write an old name later."""


class StoreBase(CallCounter):
    """What both stores share beyond counting: the index prefixes they were handed, and
    where a job's record is looked for (its name now, and its old name while
    legacy_names: RECLAIM_LEGACY_NAMES, docs/capacity.md "Names that spread load")."""

    def __init__(self, *, legacy_names: bool = True) -> None:
        super().__init__()
        self.index_prefixes: frozenset[str] = frozenset()
        self.legacy_names = legacy_names
        self._at_old_name: set[str] = set()  # ids whose record this store found at its old name
        # id -> when this store saw it absent at its old name: only an earlier reclaim
        # writes old names, so a submit's read that missed spares its create a second look
        self._not_at_old_name: dict[str, float] = {}

    # records, by name: the stores' own primitives (NotFound when there is no object)

    def _read_name(self, job_id: str, name: str) -> Stored:
        raise NotImplementedError

    def _stat_name(self, job_id: str, name: str) -> RecordStat:
        raise NotImplementedError

    def _record_names(self, job_id: str) -> tuple[str, ...]:
        """The names a job's record may have, the likelier first: an old record is found at
        its old name at the cost of one more read, a new one at no extra cost."""
        new = job_object(job_id)
        if not self.legacy_names or self._absent_at_old_name(job_id):
            return (new,)
        old = legacy_job_object(job_id)
        return (old, new) if job_id in self._at_old_name else (new, old)

    def _found_at(self, job_id: str, name: str) -> None:
        """Remember which name holds a record, so its updates go there (CAS in place). One
        found at its new name has none at its old (a create refuses an id the old name
        holds), so a CAS on it that loses does not look there: it lost to a writer of the
        same name (bench/big_backlog.py: a 404 read after about every lost CAS)."""
        if name == legacy_job_object(job_id):
            self._at_old_name.add(job_id)
        else:
            self._missed_old_name(job_id)

    def _missed_old_name(self, job_id: str) -> None:
        self._at_old_name.discard(job_id)
        if len(self._not_at_old_name) >= _ABSENT_MEMO_MAX:
            self._not_at_old_name.clear()  # a bound on memory; a cleared id costs one more look
        self._not_at_old_name[job_id] = time.monotonic()

    def _absent_at_old_name(self, job_id: str) -> bool:
        seen = self._not_at_old_name.get(job_id)
        return seen is not None and time.monotonic() - seen < _ABSENT_MEMO_S

    def _marker_names(self, job_id: str, pool: str | None) -> tuple[str, ...]:
        """The names a job's pending marker may have: its name, then (while legacy_names)
        the one from before the hash segment. A marker is removed or marked at the first
        that holds one, so a job of a new layout costs one call as before."""
        new = pending_object(job_id, pool)
        return (new, pending_object(job_id, pool, legacy=True)) if self.legacy_names else (new,)

    def _first(
        self, job_id: str, fetch: Callable[[str, str], _T], names: tuple[str, ...] | None = None
    ) -> tuple[str, _T]:
        """(name, fetch(job_id, name)) of the first of names (default: every name the record
        may have) that holds the record; NotFound if none."""
        for name in self._record_names(job_id) if names is None else names:
            try:
                found = fetch(job_id, name)
            except NotFound:
                if name == legacy_job_object(job_id):
                    self._missed_old_name(job_id)
                continue
            self._found_at(job_id, name)
            return name, found
        raise NotFound(f"no record {job_id}")

    def read(self, job_id: str) -> Stored:
        return self._first(job_id, self._read_name)[1]

    def generation(self, job_id: str) -> int:
        return self.stat(job_id).generation

    def stat(self, job_id: str) -> RecordStat:
        """The record's generation and status from its metadata alone: what a waiting
        status read polls. NotFound when there is no record."""
        return self._first(job_id, self._stat_name)[1]

    def _name_to_write(self, job_id: str) -> str:
        """Where an update writes: where the record was last found (an old record stays at
        its old name, so a running job is never split between two names)."""
        return self._record_names(job_id)[0]

    def _elsewhere(self, job_id: str, tried: str) -> str | None:
        """After a CAS at `tried` lost: the record's other name when a record is there (this
        process had not read it), else None. One read, only on a lost CAS."""
        others = tuple(n for n in self._record_names(job_id) if n != tried)
        try:
            return self._first(job_id, self._stat_name, others)[0] if others else None
        except NotFound:
            return None

    def _refuse_old_record(self, job_id: str) -> None:
        """Before a create: AlreadyExists when the id's record has its old name, so a
        replayed submit finds its job instead of making a second record. One read per
        create, while legacy_names."""
        if not self.legacy_names or self._absent_at_old_name(job_id):
            return
        try:
            self._stat_name(job_id, legacy_job_object(job_id))
        except NotFound:
            self._missed_old_name(job_id)
            return
        self._at_old_name.add(job_id)
        raise AlreadyExists(f"record {job_id} already exists")

    def allow_index_prefixes(self, prefixes: Iterable[str]) -> None:
        """Serve index objects under these prefixes too (the features' own, handed in with
        the table); a prefix that could reach a record, a marker or an output is a bug."""
        new = frozenset(prefixes)
        for p in new:
            if (
                not p.endswith("/")
                or p.startswith(_RESERVED)
                or not all(
                    _BLOB_NAME.fullmatch(s) and s not in (".", "..") for s in p[:-1].split("/")
                )
            ):
                raise ValueError(f"index prefix {p!r} is not a safe top-level prefix")
        with self._calls_lock:
            self.index_prefixes = self.index_prefixes | new


# --- Cloud Storage --------------------------------------------------------------------


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
            fields="items(name,timeCreated,generation,metadata),nextPageToken",
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
    from shared.stores.sharded import ShardedStore

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
