"""Upload routes (pure): which pipeline an uploaded object starts, with what payload, in
which batch. Declared once in `uploads.json` beside `schedules.json` in the pipelines
folder; terraform reads the same file (terraform/uploads.tf: one storage notification per
bucket and prefix it needs) and hands the functions its path in RECLAIM_UPLOADS_FILE;
`make dev` finds it the way it finds the schedules. docs/pipelines.md, "Uploads".

File shape::

    {"unrouted": "upload-digest",              # or "ignore": an upload no route takes
     "buckets": ["acme-inbox"],                # other buckets routes may name
     "routes": [{"name": "csv-reports", "prefix": "reports/", "suffixes": [".csv"],
                 "pipeline": "csv-summary", "metadata": {"delimiter": "delimiter"},
                 "payload": {"max_rows": 5000},
                 "batch": {"from": "folder", "close_with": "_done",
                           "on_complete": {"pipeline": "demo", "payload": {}}}}]}

First match wins, in the file's order. Routes that could take the same object (same
bucket, one prefix starting with the other, filters that do not tell them apart) are
refused, naming both: the order of the file would otherwise decide silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared import records
from shared.errors import InvalidInput

UPLOADS_ENV = "RECLAIM_UPLOADS_FILE"
FILE_NAME = "uploads.json"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding shared/: the repo or an archive
UNROUTED = ("upload-digest", "ignore")
DEFAULT_PIPELINE = "upload-digest"
OBJECT_KEYS = ("bucket", "name", "generation", "content_type", "size")
"""The object reference every routed payload carries (and no route may set)."""
BATCH_SOURCES = ("folder", "metadata")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")  # storage/docs/buckets#naming
_KEYS = frozenset(
    {"name", "bucket", "prefix", "suffixes", "content_types", "pipeline", "payload"}
    | {"metadata", "batch"}
)
_BATCH_KEYS = frozenset({"from", "key", "close_with", "on_complete"})
_FILE_KEYS = frozenset({"unrouted", "buckets", "routes"})
_MAX_BATCH_SLUG = 80


@dataclass(frozen=True)
class Uploaded:
    """What a route looks at: one finalized object version and its custom metadata."""

    bucket: str
    name: str
    generation: int
    content_type: str | None = None
    size: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchRule:
    """A route's batch: keyed by the object's folder or a metadata field; with
    on_complete, the callback runs once the `close_with` object arrived and every
    member ended."""

    source: str
    key: str | None = None
    close_with: str | None = None
    on_complete: dict[str, Any] | None = None


@dataclass(frozen=True)
class Route:
    """One route: which objects it takes and the job it makes of each."""

    name: str
    prefix: str
    pipeline: str
    bucket: str | None = None  # None: the deployment's uploads bucket
    suffixes: tuple[str, ...] = ()
    content_types: tuple[str, ...] = ()
    payload: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # payload key -> metadata key
    batch: BatchRule | None = None

    def in_scope(self, obj: Uploaded, default_bucket: str) -> bool:
        return (self.bucket or default_bucket) == obj.bucket and obj.name.startswith(self.prefix)

    def matches(self, obj: Uploaded, default_bucket: str) -> bool:
        if not self.in_scope(obj, default_bucket):
            return False
        if self.suffixes and not obj.name.endswith(self.suffixes):
            return False
        kind = (obj.content_type or "").split(";")[0].strip().lower()
        return not self.content_types or kind in self.content_types

    def closes(self, obj: Uploaded, default_bucket: str) -> bool:
        """The object is this route's batch-closing object (`close_with`)."""
        rule = self.batch
        if rule is None or rule.close_with is None or not self.in_scope(obj, default_bucket):
            return False
        return obj.name.rsplit("/", 1)[-1] == rule.close_with

    def build_payload(self, obj: Uploaded) -> dict[str, Any]:
        """The route's fixed fields, the metadata fields it names (strings, when the
        object has them), then the object reference, which always wins."""
        out: dict[str, Any] = dict(self.payload)
        for key, meta in self.metadata.items():
            if meta in obj.metadata:
                out[key] = obj.metadata[meta]
        out.update(object_reference(obj))
        return out

    def batch_id(self, obj: Uploaded) -> str | None:
        """The batch the object's job joins: named from the route, the folder or metadata
        value (made safe as an id) and a hash of the exact key, so two keys never meet."""
        rule = self.batch
        if rule is None:
            return None
        if rule.source == "folder":
            key = obj.name.rsplit("/", 1)[0] if "/" in obj.name else ""
        else:
            assert rule.key is not None
            found = obj.metadata.get(rule.key)
            if not found:
                return None
            key = found
        slug = re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-")[:_MAX_BATCH_SLUG] or "root"
        digest = hashlib.sha256(f"{obj.bucket}\n{key}".encode()).hexdigest()[:10]
        return records.validate_batch_id(f"{self.name}-{slug}-{digest}")


@dataclass(frozen=True)
class Routes:
    """A whole routes file: the routes in order, what an unrouted upload does, and the
    other buckets the routes may name."""

    routes: tuple[Route, ...] = ()
    unrouted: str = DEFAULT_PIPELINE
    buckets: tuple[str, ...] = ()

    def route_for(self, obj: Uploaded, default_bucket: str) -> Route | None:
        """The first route that takes the object (or closes its batch), else None."""
        for route in self.routes:
            if route.closes(obj, default_bucket) or route.matches(obj, default_bucket):
                return route
        return None

    def notifications(self, default_bucket: str, default_prefix: str = "") -> list[tuple[str, str]]:
        """(bucket, prefix) of each storage notification the routes need, and no wider: a
        prefix another needed prefix of its bucket covers is left out. The unrouted
        default needs the uploads bucket under `default_prefix` (terraform's
        uploads_prefix), unless it is "ignore"."""
        needs = {(r.bucket or default_bucket, r.prefix) for r in self.routes}
        if self.unrouted != "ignore":
            needs.add((default_bucket, default_prefix))
        return sorted(
            (b, p)
            for b, p in needs
            if not any(ob == b and op != p and p.startswith(op) for ob, op in needs)
        )

    def notified(self, bucket: str, name: str, default_bucket: str) -> bool:
        """A storage notification the routes need covers this object."""
        return any(
            b == bucket and name.startswith(p) for b, p in self.notifications(default_bucket)
        )


def object_reference(obj: Uploaded) -> dict[str, Any]:
    return {
        "bucket": obj.bucket,
        "name": obj.name,
        "generation": obj.generation,
        "content_type": obj.content_type,
        "size": obj.size,
    }


# ---------------------------------------------------------------- parsing


def parse(doc: object, pipelines: Collection[str] | None = None) -> Routes:
    """Every route of a decoded file; InvalidInput names the route and its problem."""
    if not isinstance(doc, dict):
        raise InvalidInput('an uploads file is {"routes": [...]}', "routes")
    unknown = sorted(set(doc) - _FILE_KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}", "routes")
    unrouted = doc.get("unrouted", DEFAULT_PIPELINE)
    if unrouted not in UNROUTED:
        raise InvalidInput(f"unrouted must be one of {', '.join(UNROUTED)}", "unrouted")
    buckets = doc.get("buckets", [])
    if not isinstance(buckets, list) or not all(
        isinstance(b, str) and _BUCKET.fullmatch(b) for b in buckets
    ):
        raise InvalidInput("buckets must be a list of bucket names", "buckets")
    entries = doc.get("routes", [])
    if not isinstance(entries, list):
        raise InvalidInput("routes must be a list", "routes")
    out: list[Route] = []
    for i, entry in enumerate(entries):
        label = entry.get("name") if isinstance(entry, dict) else None
        where = f"routes[{i}]" + (f" ({label})" if isinstance(label, str) else "")
        try:
            out.append(_one(entry, pipelines, buckets))
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc.reason}", "routes") from None
    _check_names(out)
    _check_overlaps(out)
    routes = Routes(tuple(out), str(unrouted), tuple(buckets))
    _check_notifications(routes)
    return routes


NOTIFICATIONS_PER_BUCKET = 10
"""Cloud Storage allows "up to 10 notification configurations set to trigger for a
specific event" per bucket (https://cloud.google.com/storage/docs/pubsub-notifications):
terraform's plan refuses an 11th (uploads.tf), and so does the file here."""


def _check_notifications(routes: Routes) -> None:
    """At most NOTIFICATIONS_PER_BUCKET notifications per bucket, counted as terraform
    counts them (routes under one prefix share one). The uploads bucket is counted with
    the unrouted default at the bucket's root, the fewest it can need; terraform counts it
    again with its uploads_prefix."""
    counts: dict[str, int] = {}
    for bucket, _prefix in routes.notifications(""):
        counts[bucket] = counts.get(bucket, 0) + 1
    for bucket, n in sorted(counts.items()):
        if n > NOTIFICATIONS_PER_BUCKET:
            names = [r.name or "?" for r in routes.routes if (r.bucket or "") == bucket]
            raise InvalidInput(
                f"bucket {bucket or 'uploads'} needs {n} notifications (routes "
                f"{', '.join(names)}); Cloud Storage allows {NOTIFICATIONS_PER_BUCKET} per "
                "bucket and event type: share a prefix (one notification covers the routes "
                "under it)",
                "routes",
            )


def _one(entry: object, pipelines: Collection[str] | None, buckets: list[str]) -> Route:
    if not isinstance(entry, dict):
        raise InvalidInput("each route must be an object", "routes")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}", "routes")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(f"name {name!r} must be lowercase letters, digits and '-'", "name")
    bucket = entry.get("bucket")
    if bucket is not None and bucket not in buckets:
        raise InvalidInput(f"bucket {bucket!r} is unknown: list it in buckets", "bucket")
    prefix = entry.get("prefix")
    if not isinstance(prefix, str) or len(prefix) > 1024:
        raise InvalidInput('prefix must be a string ("" takes every object)', "prefix")
    pipeline = _pipeline(entry.get("pipeline"), pipelines)
    payload = entry.get("payload", {})
    if not isinstance(payload, dict) or set(payload) & set(OBJECT_KEYS):
        raise InvalidInput(f"payload must be an object without {', '.join(OBJECT_KEYS)}", "payload")
    metadata = entry.get("metadata", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k not in OBJECT_KEYS
        for k, v in metadata.items()
    ):
        raise InvalidInput(
            "metadata maps payload keys (not the object's own) to metadata keys", "metadata"
        )
    return Route(
        name=name,
        prefix=prefix,
        pipeline=pipeline,
        bucket=bucket,
        suffixes=_strings(entry, "suffixes"),
        content_types=tuple(t.lower() for t in _strings(entry, "content_types")),
        payload=payload,
        metadata=metadata,
        batch=_batch(entry.get("batch"), pipelines),
    )


def _pipeline(value: object, pipelines: Collection[str] | None) -> str:
    if not isinstance(value, str) or (pipelines is not None and value not in pipelines):
        known = f"; known: {', '.join(sorted(pipelines))}" if pipelines is not None else ""
        raise InvalidInput(f"pipeline {value!r} is unknown{known}", "pipeline")
    return value


def _strings(entry: dict[str, Any], key: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"{key} must be a list of non-empty strings", key)
    return tuple(value)


def _batch(value: object, pipelines: Collection[str] | None) -> BatchRule | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - _BATCH_KEYS:
        raise InvalidInput(f"batch is an object of {', '.join(sorted(_BATCH_KEYS))}", "batch")
    source = value.get("from")
    if source not in BATCH_SOURCES:
        raise InvalidInput(f"batch.from must be one of {', '.join(BATCH_SOURCES)}", "batch")
    key = value.get("key")
    if (source == "metadata") != isinstance(key, str) or key == "":
        raise InvalidInput("batch.key names the metadata field (only with from metadata)", "batch")
    close_with = value.get("close_with")
    on_complete = value.get("on_complete")
    if on_complete is not None:
        if not isinstance(on_complete, dict) or set(on_complete) - {"pipeline", "payload"}:
            raise InvalidInput("batch.on_complete is {pipeline, payload}", "batch")
        _pipeline(on_complete.get("pipeline"), pipelines)
        if not isinstance(on_complete.get("payload", {}), dict):
            raise InvalidInput("batch.on_complete.payload must be an object", "batch")
        if not isinstance(close_with, str) or not close_with or "/" in close_with:
            raise InvalidInput(
                'batch.close_with (an object name, e.g. "_done") is required with on_complete:'
                " its upload says the batch is whole",
                "batch",
            )
    elif close_with is not None:
        raise InvalidInput("batch.close_with only makes sense with on_complete", "batch")
    return BatchRule(str(source), key, close_with, on_complete)


def _check_names(routes: list[Route]) -> None:
    names = [r.name for r in routes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidInput(f"route name(s) used twice: {', '.join(dupes)}", "routes")


def _check_overlaps(routes: list[Route]) -> None:
    for i, first in enumerate(routes):
        for later in routes[i + 1 :]:
            if overlap(first, later):
                raise InvalidInput(
                    f"route {later.name}: prefix {later.prefix!r} overlaps route {first.name}"
                    f" ({first.prefix!r}) in the same bucket; tell them apart by suffixes or"
                    " content_types, or use prefixes that do not nest",
                    "routes",
                )


def overlap(a: Route, b: Route) -> bool:
    """Both routes could take one object: same bucket, nested prefixes, and neither
    their suffixes nor their content types tell them apart."""
    if a.bucket != b.bucket:
        return False
    if not (a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix)):
        return False
    suffixes_apart = bool(a.suffixes and b.suffixes) and not any(
        x.endswith(y) or y.endswith(x) for x in a.suffixes for y in b.suffixes
    )
    types_apart = bool(a.content_types and b.content_types) and not (
        set(a.content_types) & set(b.content_types)
    )
    return not (suffixes_apart or types_apart)


# ---------------------------------------------------------------- the file


def uploads_file(env: Mapping[str, str], root: Path | None = None) -> Path | None:
    """$RECLAIM_UPLOADS_FILE (terraform sets it to the archive path of the file it read;
    a relative path is read from the folder that holds the `shared` package); None
    when unset: no routes, every upload goes to upload-digest."""
    value = env.get(UPLOADS_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else (root or ROOT) / path


def dev_uploads_file(env: Mapping[str, str]) -> Path | None:
    """`make dev`'s routes file: $RECLAIM_UPLOADS_FILE, else uploads.json in the package
    of RECLAIM_PIPELINE_MODULES (terraform reads that one when pipeline_modules names a
    module); None: no routes."""
    from shared.config import package_file

    found = uploads_file(env)
    return found or package_file(FILE_NAME, env.get("RECLAIM_PIPELINE_MODULES", ""))


def load(path: Path | None, pipelines: Collection[str] | None = None) -> Routes:
    """The routes of a file (no routes when there is none); InvalidInput on a bad one."""
    if path is None:
        return Routes()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"{path} does not exist ({UPLOADS_ENV} names it)", "routes") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path.name} is not readable JSON: {exc}", "routes") from None
    return parse(doc, pipelines)
