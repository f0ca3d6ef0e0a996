"""The storage seam: the Store protocol, its value types and the objects' names.

shared.stores.gcs is the only module that talks to Cloud Storage.

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
The stores that serve it are in shared/stores/ (Cloud Storage, memory, sharded).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO, Protocol, TypeVar

from shared import records
from shared.errors import (
    CorruptRecord,
    InvalidInput,
    InvalidRecord,
)
from shared.jobs import JobRecord
from shared.pools import DEFAULT as DEFAULT_POOL
from shared.pools import check_name as check_pool
from shared.shards import name_hash

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
    "bulk/",  # bulk confirm tokens: their key and their single-use markers (shared.bulk)
    "hints/",  # what may be waiting: shared.hints.due_hint, shared.hints.index_board
    "submitted/",  # batches by the day they were submitted (shared.submission.batch_days)
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


@dataclass(frozen=True)
class OutputInfo:
    """One stored output object (outputs/<id>/<attempt>/<name>), without its body."""

    name: str
    """The object's name."""
    size: int
    content_type: str | None
    created: datetime | None


class OutputSink(Protocol):
    """A stage output written as a stream (Store.open_output): nothing is visible until
    commit(), which creates the object (create-only); abort() leaves nothing."""

    def write(self, data: bytes) -> int: ...
    def commit(self) -> str:
        """Create the object from what was written; its name. AlreadyExists if an object
        of that name exists."""
        ...

    def abort(self) -> None: ...


OUTPUT_CHUNK_BYTES = 8 * 1024 * 1024
"""What an output stream holds before it sends a piece: one chunk of a resumable upload
(a multiple of 256 KiB, https://cloud.google.com/storage/docs/performing-resumable-uploads),
so a stage writes an output of any size in this much memory."""


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
    def open_output(
        self, job_id: str, attempt: int, name: str, content_type: str
    ) -> OutputSink: ...
    def list_outputs(self, job_id: str) -> list[OutputInfo]:
        """Every output object of a job, committed by a stage or not, in name order."""
        ...

    def read_output(self, job_id: str, name: str) -> tuple[BinaryIO, OutputInfo]:
        """A readable stream of one of the job's output objects (`name`: the object's
        name), and its size and type; NotFound if absent."""
        ...

    def output_url(self, job_id: str, name: str, expires_s: float) -> str | None:
        """A URL that downloads the output without credentials for `expires_s` (a V4
        signed URL on Cloud Storage), or None where no such URL can be made (an
        emulator, memory): the caller then streams the bytes itself."""
        ...

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


def output_prefix(job_id: str) -> str:
    """The folder of a job's outputs, every attempt's."""
    return f"{OUTPUTS_PREFIX}{records.validate_job_id(job_id)}/"


def output_owner(name: str) -> str | None:
    """The job id an output object's name belongs to (outputs/<id>/...), else None."""
    if not name.startswith(OUTPUTS_PREFIX):
        return None
    job_id = name[len(OUTPUTS_PREFIX) :].split("/", 1)[0]
    return job_id or None


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
