"""The ``csv-summary`` pipeline: profile a CSV object and write summary.json.

An example of a pipeline that lives outside the library: it uses only the public API
(``reclaim``) and the storage seam's ``read_object``.

Payload: ``bucket`` and ``name`` of the CSV object (required), ``generation``
(read exactly that version), ``delimiter`` (one character, default ``,``) and
``max_rows`` (1..1,000,000, default 100,000). The first row is the header.

Stage ``profile`` reads the object once and keeps per column only counts and the
numeric min / max / sum in the checkpoint state, never the bytes; stage ``report``
writes ``summary.json`` from that state, so a retry of the report does not read the
object again.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from typing import Any

from reclaim import NotFound, PermanentError, Pipeline, StageContext, register

NAME = "csv-summary"
REPORT_NAME = "summary.json"
MAX_COLUMNS = 200
MAX_ROWS = 1_000_000
DEFAULT_MAX_ROWS = 100_000


def validate(payload: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first bad field (submit answers 400 with it)."""
    if not isinstance(payload, Mapping):
        raise ValueError("payload must be an object")
    for key in ("bucket", "name"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            raise ValueError(f"payload.{key} must be a non-empty string")
    generation = payload.get("generation")
    if generation is not None and (type(generation) is not int or generation < 1):
        raise ValueError("payload.generation must be a positive integer when given")
    delimiter = payload.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
        raise ValueError("payload.delimiter must be one character other than a quote or newline")
    max_rows = payload.get("max_rows", DEFAULT_MAX_ROWS)
    if type(max_rows) is not int or not 1 <= max_rows <= MAX_ROWS:
        raise ValueError(f"payload.max_rows must be an integer from 1 to {MAX_ROWS}")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def profile_csv(
    text: str, delimiter: str = ",", max_rows: int = DEFAULT_MAX_ROWS
) -> dict[str, Any]:
    """Rows read, whether more were left, and per column: filled / empty / numeric
    counts and the numeric min, max and sum. Raises ValueError on a bad header."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise ValueError("the object has no header row")
    if len(header) > MAX_COLUMNS:
        raise ValueError(f"{len(header)} columns; at most {MAX_COLUMNS} are profiled")
    columns: list[dict[str, Any]] = [
        {
            "name": h.strip(),
            "filled": 0,
            "empty": 0,
            "numeric": 0,
            "min": None,
            "max": None,
            "sum": 0.0,
        }
        for h in header
    ]
    rows, truncated, ragged = 0, False, 0
    for row in reader:
        if rows >= max_rows:
            truncated = True
            break
        rows += 1
        if len(row) != len(header):
            ragged += 1
        for col, cell in zip(columns, row, strict=False):
            cell = cell.strip()
            if not cell:
                col["empty"] += 1
                continue
            col["filled"] += 1
            value = _number(cell)
            if value is not None:
                col["numeric"] += 1
                col["sum"] += value
                col["min"] = value if col["min"] is None else min(col["min"], value)
                col["max"] = value if col["max"] is None else max(col["max"], value)
        for col in columns[len(row) :]:
            col["empty"] += 1
    return {"rows": rows, "truncated": truncated, "ragged_rows": ragged, "columns": columns}


def profile(ctx: StageContext) -> None:
    """Read the object once; keep only the profile in the checkpoint state."""
    try:
        validate(ctx.payload)
    except ValueError as exc:
        raise PermanentError(str(exc)) from None
    bucket, name = ctx.payload["bucket"], ctx.payload["name"]
    generation = ctx.payload.get("generation")
    try:
        data, _content_type = ctx.store.read_object(bucket, name, generation)
    except NotFound:  # e.g. an upload deleted before its job ran
        at = f" at generation {generation}" if generation else ""
        raise PermanentError(f"gs://{bucket}/{name}{at} does not exist") from None
    ctx.check()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PermanentError(f"gs://{bucket}/{name} is not UTF-8 text") from None
    try:
        found = profile_csv(
            text, ctx.payload.get("delimiter", ","), ctx.payload.get("max_rows", DEFAULT_MAX_ROWS)
        )
    except (ValueError, csv.Error) as exc:
        raise PermanentError(f"gs://{bucket}/{name}: {exc}") from None
    ctx.state["profile"] = {"source": f"gs://{bucket}/{name}", "bytes": len(data), **found}
    ctx.log.info("profiled csv", rows=found["rows"], columns=len(found["columns"]))


def report(ctx: StageContext) -> None:
    """Write summary.json (with each numeric column's mean); the result names it."""
    found = ctx.state.get("profile")
    if not isinstance(found, dict):
        raise RuntimeError("no profile in the checkpoint state; the profile stage must run first")
    columns = []
    for col in found["columns"]:
        numeric = col["numeric"]
        summary = {k: col[k] for k in ("name", "filled", "empty", "numeric")}
        if numeric:
            summary.update(min=col["min"], max=col["max"], mean=col["sum"] / numeric)
        columns.append(summary)
    summary_doc = {k: found[k] for k in ("source", "bytes", "rows", "truncated", "ragged_rows")}
    summary_doc["columns"] = columns
    written = ctx.outputs.write(REPORT_NAME, summary_doc)
    ctx.result.update(summary=written, rows=found["rows"], columns=len(columns))


PIPELINE = register(
    Pipeline(
        name=NAME,
        stages=(("profile", profile), ("report", report)),
        validate=validate,
        doc="Row count and per-column counts, min, max and mean of a CSV object.",
    )
)
