"""The storage seam: the only module that talks to Cloud Storage.

INTERFACE CONTRACT (implementation owned by the storage work; keep these names):
every record mutation is create-only or generation-matched, and each write
stamps a fresh ``write_id`` into the record so that a 412 after the client's
own transparent retry can be recognised as "my write landed" by re-reading.

Layout of the records bucket:
  jobs/<id>.json             the record (validated JSON, ``schema`` field)
  pending/<id>               empty marker: the job still owes work
  batches/<batch>/<id>       empty marker: batch membership
  outputs/<id>/<attempt>/<name>  stage outputs, create-only, keyed by attempt
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class StorageError(Exception):
    """Base of the seam's named errors."""


class NotFound(StorageError):
    """No such record or object."""


class AlreadyExists(StorageError):
    """A create-only write found the object already there."""


class LostRace(StorageError):
    """A generation-matched write lost: someone else wrote the record first."""


class CorruptRecord(StorageError):
    """The record is not valid JSON or not a valid record; left for a person."""

    def __init__(self, job_id: str, reason: str):
        super().__init__(f"record {job_id} is unreadable: {reason}")
        self.job_id = job_id
        self.reason = reason


@dataclass(frozen=True)
class Stored:
    """A record as read or written, with the generation that fences the next write."""

    record: dict[str, Any]
    generation: int


@dataclass(frozen=True)
class PendingEntry:
    """One marker of the pending index."""

    job_id: str
    created: datetime | None


class Store(Protocol):
    """What the queue needs from storage (GcsStore and MemoryStore implement it)."""

    def read(self, job_id: str) -> Stored: ...
    def create(self, record: dict[str, Any]) -> Stored: ...
    def update(self, record: dict[str, Any], generation: int) -> Stored: ...
    def add_pending(self, job_id: str) -> None: ...
    def remove_pending(self, job_id: str) -> None: ...
    def list_pending(self, limit: int | None = None) -> list[PendingEntry]: ...
    def add_to_batch(self, batch_id: str, job_id: str) -> None: ...
    def list_batch(self, batch_id: str, limit: int | None = None) -> list[str]: ...
    def list_jobs(self, limit: int | None = None) -> list[str]: ...
    def write_output(
        self, job_id: str, attempt: int, name: str, data: bytes, content_type: str
    ) -> str: ...
    def read_object(self, bucket: str, name: str) -> tuple[bytes, str | None]: ...
