"""The ``upload-digest`` pipeline: digest an uploaded object, write report.json.

Two stages with the digest carried across the checkpoint in ``state`` (a few
numbers, never the bytes), so a retry after the report stage failed does not
read the upload again.

Never of the records buckets (RECLAIM_RECORDS_BUCKET and every RECLAIM_SHARD_BUCKETS
shard): their objects are every job's record, payload included, and a digest of one
would tell any submit caller its size and sha256. The upload notification path ignores
those buckets already; a POST /jobs naming one is refused here (400 at submit, and a
permanent failure for a job that names one anyway).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from shared.config import ENV_VARS, read_env
from shared.errors import ConfigError, NotFound
from shared.pipelines.base import PermanentError, Pipeline, StageContext

REPORT_NAME = "report.json"


def validate(payload: Mapping[str, Any]) -> None:
    """The payload names the object: non-empty string ``bucket`` and ``name``, and
    optionally the ``generation`` that was uploaded (then exactly that version is read)."""
    if not isinstance(payload, Mapping):
        raise ValueError("payload must be an object")
    for key in ("bucket", "name"):
        value = payload.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"payload.{key} must be a non-empty string")
    generation = payload.get("generation")
    if generation is not None and (
        isinstance(generation, bool) or not isinstance(generation, int) or generation < 1
    ):
        raise ValueError("payload.generation must be a positive integer when given")
    if payload["bucket"] in records_buckets():
        raise ValueError(
            "payload.bucket is a records bucket of this deployment: its objects are the "
            "jobs' records, never an upload to digest"
        )


def records_buckets(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """This deployment's records buckets (the home bucket and every shard), read as the
    settings read them (shared.config); none when they do not parse (the settings then
    refuse the whole function as misconfigured)."""
    table = [v for v in ENV_VARS if v.field in ("records_bucket", "shard_buckets")]
    try:
        values = read_env(table, os.environ if env is None else env)
    except ConfigError:
        return frozenset()
    return frozenset((values["records_bucket"], *values["shard_buckets"]))


def digest_bytes(data: bytes) -> dict[str, Any]:
    """Size, sha256 and, when the bytes are UTF-8 text, the line count."""
    out: dict[str, Any] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        out["text"] = False
        out["lines"] = None
    else:
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        out["text"] = True
        out["lines"] = lines
    return out


def digest(ctx: StageContext) -> None:
    """Read the upload once and keep only its digest in the checkpoint state."""
    try:
        validate(ctx.payload)
    except ValueError as exc:
        raise PermanentError(str(exc)) from None
    bucket, name = ctx.payload["bucket"], ctx.payload["name"]
    generation = ctx.payload.get("generation")
    try:
        data, content_type = ctx.store.read_object(bucket, name, generation)
    except NotFound:
        at = f" at generation {generation}" if generation else ""
        raise PermanentError(f"gs://{bucket}/{name}{at} does not exist") from None
    ctx.check()
    ctx.state["digest"] = {
        "bucket": bucket,
        "name": name,
        "content_type": content_type,
        **digest_bytes(data),
    }
    ctx.log.info("digested upload", size=len(data))


def report(ctx: StageContext) -> None:
    """Write report.json from the checkpointed digest; the result points at it."""
    found = ctx.state.get("digest")
    if not isinstance(found, dict):
        raise RuntimeError("no digest in the checkpoint state; the digest stage must run first")
    written = ctx.outputs.write(REPORT_NAME, found)
    ctx.result.update(report=written, size=found["size"], sha256=found["sha256"])


PIPELINE = Pipeline(
    name="upload-digest",
    stages=(("digest", digest), ("report", report)),
    validate=validate,
    doc="Size, sha256, content type and line count of an uploaded object.",
)
