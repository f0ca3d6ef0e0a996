"""Job tags: short labels a client gives a job at submit, shown in its views and used to
list jobs by label without reading every record.

Layout of the tag objects in the records bucket:

  tags/<tag>/<id>    empty marker: job <id> was submitted with <tag>

A job's markers are written at submit, before its record (Feature.create_hooks), like the
pending marker: an index never misses a record. A marker whose record never came (a submit
that lost a race for its id) or is gone is only a hint: a listing reads the record, and the
record decides. Markers are never rewritten or deleted by the queue: the bucket's
lifecycle deletes them with the batch markers, a day after the longest record retention
(terraform/storage.tf), so they are kept as long as the records they point at.

Rules (docs/api.md): at most MAX_TAGS tags, each 1 to MAX_TAG_LENGTH characters of
lowercase letters, digits, '.', '_' and '-', starting with a letter or a digit; no tag
twice. A bad list is a 400 naming every problem, and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from shared.errors import InvalidInput
from shared.jobs import JobRecord
from shared.seams import Context
from shared.storage import names_to_ids

KEY = "tags"
PREFIX = "tags/"
MAX_TAGS = 10
MAX_TAG_LENGTH = 32
_TAG = re.compile(r"[a-z0-9][a-z0-9._-]*")
RULE = (
    f"1 to {MAX_TAG_LENGTH} lowercase letters, digits, '.', '_' or '-', "
    "starting with a letter or a digit"
)


def tag_problem(tag: object) -> str | None:
    """Why `tag` is not a valid tag, or None (pure)."""
    if not isinstance(tag, str):
        return f"a tag must be a string, got {type(tag).__name__}"
    if not tag or len(tag) > MAX_TAG_LENGTH or not _TAG.fullmatch(tag):
        return f"tag {tag[: MAX_TAG_LENGTH + 8]!r} is not {RULE}"
    return None


def parse_fields(job: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    """Submit's check of one job's `tags` (appends a reason per problem); the record field
    it becomes: the tags in the order given, absent when none."""
    tags = job.get(KEY)
    if tags is None:
        return {}
    if not isinstance(tags, list):
        problems.append(f"{where}tags must be a list of strings")
        return {}
    if len(tags) > MAX_TAGS:
        problems.append(f"{where}tags has {len(tags)} tags; at most {MAX_TAGS}")
    before = len(problems)
    problems.extend(f"{where}tags: {p}" for t in tags if (p := tag_problem(t)) is not None)
    if len(problems) == before:
        twice = sorted({t for t in tags if tags.count(t) > 1})
        if twice:
            problems.append(f"{where}tags names {', '.join(twice)} more than once")
    return {KEY: list(tags)} if tags else {}


def marker_name(tag: str, job_id: str) -> str:
    """The index object of one tag of one job."""
    return f"{PREFIX}{tag}/{job_id}"


def of(record: Mapping[str, Any]) -> list[str]:
    """The record's tags (none when the field is missing or hand-edited into another type)."""
    tags = record.get(KEY)
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def view(_ctx: object, record: Mapping[str, Any]) -> dict[str, Any]:
    """A job's view: its tags, only when it has some."""
    tags = of(record)
    return {KEY: tags} if tags else {}


def index(ctx: Context, record: JobRecord) -> None:
    """Before a new job's record: one create-only marker per tag (idempotent: an empty
    marker already there is the same write landing twice)."""
    job_id = str(record["id"])
    for tag in of(record):
        ctx.store.put_blob(marker_name(tag, job_id), b"", generation=0)


def tagged(ctx: Context, tag: str) -> list[str]:
    """Ids of the jobs with a marker for `tag`, in name order (O(jobs with the tag));
    InvalidInput for a value that is no valid tag."""
    problem = tag_problem(tag)
    if problem is not None:
        raise InvalidInput(problem, "tag")
    prefix = f"{PREFIX}{tag}/"
    return names_to_ids([b.name for b in ctx.store.list_blobs(prefix)], prefix)


def has(record: JobRecord, tag: str) -> bool:
    """The record decides: the job carries `tag`."""
    return tag in of(record)
