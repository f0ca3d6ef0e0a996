"""Which outputs a job offers, and where each is: only the committed ones.

A stage's outputs are written under outputs/<id>/<attempt>/<name> as the stage runs
(shared.claim.runner), but they become the job's only when the stage's checkpoint (or the
final write) commits them: the record lists their object names (`checkpoint.outputs`
while the job is pending, `outputs` once it is done). A stage of a lost attempt (a zombie,
a stage that raised after writing, a SIGKILLed instance) may leave objects behind that no
record names: those are never offered, listed or downloaded.

The listing costs one record read and one list call (outputs/<id>/): the sizes and types
come from the listing, filtered by the record's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from shared import job_queue
from shared.errors import NotFound
from shared.jobs import JobRecord
from shared.storage import OutputInfo, Store, output_prefix


@dataclass(frozen=True)
class Output:
    """One committed output of a job."""

    job_id: str
    name: str
    """As the stage named it (ctx.outputs.write / open)."""
    attempt: int
    object: str
    """Its object name: outputs/<id>/<attempt>/<name>."""
    size: int
    content_type: str | None
    created: datetime | None

    @property
    def path(self) -> str:
        """Its download path on the API (and on the dashboard)."""
        return f"/jobs/{self.job_id}/outputs/{quote(self.name)}?attempt={self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "attempt": self.attempt,
            "object": self.object,
            "size": self.size,
            "content_type": self.content_type,
            "created": job_queue.format_time(self.created) if self.created else None,
            "url": self.path,
        }


def committed_names(record: JobRecord) -> list[str]:
    """The object names the record commits to (its final outputs, its checkpoint's), in
    order, each once; anything that is not one of this job's output objects is left out."""
    job_id = str(record.get("id"))
    prefix = output_prefix(job_id)
    listed: list[str] = []
    final = record.get("outputs")
    for name in (
        *(final if isinstance(final, list) else []),
        *job_queue.checkpoint_outputs(record),
    ):
        if isinstance(name, str) and name.startswith(prefix) and name not in listed:
            listed.append(name)
    return listed


def split_name(job_id: str, obj: str) -> tuple[int, str] | None:
    """(attempt, name) of one of the job's output objects, or None."""
    rest = obj.removeprefix(output_prefix(job_id))
    attempt, _, name = rest.partition("/")
    if rest == obj or not attempt.isdigit() or not name:
        return None
    return int(attempt), name


def committed(store: Store, record: JobRecord) -> list[Output]:
    """The job's committed outputs that exist, in the record's order."""
    names = committed_names(record)
    if not names:
        return []
    job_id = str(record.get("id"))
    found = {info.name: info for info in store.list_outputs(job_id)}
    return [_output(job_id, found[n]) for n in names if n in found]


def locate(record: JobRecord, name: str, attempt: int | None = None) -> str:
    """The object name of the committed output called `name` (of `attempt`, else of the
    latest attempt that committed one of that name); NotFound when the job commits none.
    From the record alone: the object may still be missing (a lifecycle rule removed it),
    which its read says."""
    job_id = str(record.get("id"))
    matches: list[tuple[int, str]] = []
    for obj in committed_names(record):
        split = split_name(job_id, obj)
        if split is not None and split[1] == name and attempt in (None, split[0]):
            matches.append((split[0], obj))
    if not matches:
        shown = f"{name[:200]!r}" + (f" of attempt {attempt}" if attempt is not None else "")
        raise NotFound(f"job {job_id} has no committed output {shown}")
    return max(matches)[1]


def output_of(job_id: str, info: OutputInfo) -> Output:
    """An Output from its stored object's listing."""
    return _output(job_id, info)


def _output(job_id: str, info: OutputInfo) -> Output:
    split = split_name(job_id, info.name)
    attempt, name = split if split is not None else (0, info.name)
    return Output(job_id, name, attempt, info.name, info.size, info.content_type, info.created)
