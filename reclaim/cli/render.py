"""Text rendering for the reclaim CLI: pure functions from data to strings.

Kept apart from the commands so the look of the output is testable without a
cloud, and so the commands stay about I/O and decisions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from shared.job_queue import TERMINAL_STATUSES, error_kind, parse_time
from shared.jobs import MEMBER_UNREADABLE, JobStatus

# Order in which statuses are shown: what still owes work first, then the outcomes.
STATUS_ORDER: tuple[str, ...] = tuple(JobStatus)
# A member whose record is corrupt will not change until a person acts: watch counts
# it as finished (and failing) instead of waiting forever.
_SETTLED = (*TERMINAL_STATUSES, MEMBER_UNREADABLE)


def to_json(value: Any) -> str:
    """Stable, machine-readable output for --json (sorted keys, one document)."""
    return json.dumps(value, sort_keys=True, default=str)


def format_duration(seconds: float | None) -> str:
    """Seconds as h:mm:ss or m:ss; '?' when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def count_statuses(statuses: Iterable[str]) -> dict[str, int]:
    """Counts by status, every known status present (zero if absent)."""
    counts = dict.fromkeys(STATUS_ORDER, 0)
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


def terminal_count(counts: Mapping[str, int]) -> int:
    """How many jobs have settled, whatever the outcome (unreadable included)."""
    return sum(counts.get(s, 0) for s in _SETTLED)


def watch_verdict(counts: Mapping[str, int]) -> Literal["ok", "failed"] | None:
    """None while some job still owes work (or has no record yet); else "ok" when
    none failed and none is unreadable, "failed" otherwise. Cancelled is not a failure."""
    total = sum(counts.values())
    if total == 0 or terminal_count(counts) < total:
        return None
    failed = counts.get(JobStatus.FAILED, 0) or counts.get(MEMBER_UNREADABLE, 0)
    return "failed" if failed else "ok"


def rate_and_eta(
    elapsed_s: float, finished_since_start: int, remaining: int
) -> tuple[float | None, float | None]:
    """Jobs finished per second since the watch began, and the seconds left at that rate.

    Measured from the watch's own start (not the batch's), so a rate is only
    claimed once something finished while we looked.
    """
    if elapsed_s <= 0 or finished_since_start <= 0:
        return None, (0.0 if remaining == 0 else None)
    rate = finished_since_start / elapsed_s
    return rate, remaining / rate


def progress_bar(done: int, total: int, width: int = 30) -> str:
    """[#######.......] with the finished fraction filled."""
    if total <= 0:
        return "[" + " " * width + "]"
    filled = min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def progress_line(
    counts: Mapping[str, int],
    rate: float | None,
    eta_s: float | None,
    width: int = 30,
    running: float | None = None,
) -> str:
    """One line of watch output: bar, finished/total, counts by status, how far the
    running jobs' stages say they are (ctx.progress), rate, ETA."""
    total = sum(counts.values())
    finished = terminal_count(counts)
    shown = " ".join(f"{s} {counts[s]}" for s in _ordered(counts) if counts[s])
    rate_text = "rate ?" if rate is None else f"{rate * 60:.1f} jobs/min"
    running_text = "" if running is None else f" ({running:.0%} along)"
    return (
        f"{progress_bar(finished, total, width)} {finished}/{total} | {shown or 'no jobs'}"
        f"{running_text} | {rate_text} | ETA {format_duration(eta_s)}"
    )


def progress_text(progress: object) -> str | None:
    """A stage's ctx.progress as `3/10 (30%) frames`, or None when it reported none."""
    if not isinstance(progress, Mapping):
        return None
    done, total, message = progress.get("done"), progress.get("total"), progress.get("message")
    if isinstance(total, int | float) and total > 0 and isinstance(done, int | float):
        text = f"{done:g}/{total:g} ({min(done / total, 1.0):.0%})"
    else:
        text = f"{done}"
    return f"{text} {message}" if message else text


def running_progress(members: Sequence[Mapping[str, Any]]) -> float | None:
    """The mean done/total of the running members that reported progress, or None."""
    fractions = []
    for member in members:
        progress = member.get("progress")
        if member.get("status") != "running" or not isinstance(progress, Mapping):
            continue
        done, total = progress.get("done"), progress.get("total")
        if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
            fractions.append(min(max(done / total, 0.0), 1.0))
    return sum(fractions) / len(fractions) if fractions else None


def _ordered(counts: Mapping[str, int]) -> list[str]:
    known = [s for s in STATUS_ORDER if s in counts]
    return known + sorted(s for s in counts if s not in STATUS_ORDER)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table; missing cells are '-', ISO times are shortened."""
    cells = [[_cell(short_time(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    for row_cells in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row_cells, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def job_row(record: Mapping[str, Any], default_max_attempts: int | None = None) -> dict[str, Any]:
    """The columns `reclaim list` shows for one record."""
    error = record.get("error") or {}
    return {
        "id": record.get("id"),
        "status": record.get("status"),
        "pipeline": record.get("pipeline"),
        "batch": record.get("batch_id"),
        "stage": _parked(record) or record.get("stage"),
        "attempts": _attempts(record, default_max_attempts),
        "updated": record.get("updated_at"),
        "error": error.get("type") if isinstance(error, dict) else None,
    }


def short_time(value: Any) -> Any:
    """'2026-07-26T10:05:00.123+00:00' -> '2026-07-26 10:05:00' (UTC, for tables)."""
    if not isinstance(value, str) or len(value) < 19 or value[10] != "T" or value[4] != "-":
        return value
    return f"{value[:10]} {value[11:19]}"


LIST_COLUMNS = ("id", "status", "pipeline", "batch", "stage", "attempts", "updated", "error")


def _parked(record: Mapping[str, Any]) -> str | None:
    """A parked job's stage column: what it waits for (docs/waiting.md)."""
    park = record.get("park")
    if record.get("status") != JobStatus.WAITING or not isinstance(park, dict):
        return None
    kind = {"sleep": "sleeping", "token": "waitpoint", "children": "children"}
    return f"parked: {kind.get(str(park.get('kind')), park.get('kind'))}"


def _waits_fields(record: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What a job waits for, how its last wait ended, its parent or children (waits)."""
    park = _dict(record.get("park"))
    waited = _dict(record.get("waited"))
    parent = _dict(record.get("parent_job"))
    last = None
    if waited:
        last = f"{waited.get('kind')} {waited.get('status')} at {waited.get('at')}"
        if waited.get("by"):
            last += f" by {waited['by']}"
    return [
        ("waiting for", record.get("waiting_for")),
        ("complete at", park.get("url") if park.get("kind") == "token" else None),
        ("token", park.get("token") if park.get("kind") == "token" else None),
        ("last wait", last),
        ("parent", f"{parent.get('id')} (child {parent.get('index')})" if parent else None),
        ("children at", record.get("children_url")),
    ]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _attempts(record: Mapping[str, Any], default_max_attempts: int | None) -> str:
    attempts = record.get("attempts", 0)
    limit = record.get("max_attempts") or default_max_attempts
    return f"{attempts}/{limit}" if limit else str(attempts)


def job_text(record: Mapping[str, Any], default_max_attempts: int | None = None) -> str:
    """A record as an operator wants to read it: summary, error, then history."""
    limit = record.get("max_attempts") or default_max_attempts
    attempts = record.get("attempts", 0)
    fields = [
        ("job", record.get("id")),
        ("status", record.get("status")),
        ("pipeline", record.get("pipeline")),
        ("batch", record.get("batch_id")),
        ("stage", record.get("stage")),
        (
            "paused",
            "yes: its pipeline is paused (it waits for the resume)"
            if record.get("paused")
            else None,
        ),
        ("progress", progress_text(record.get("progress"))),
        ("attempts", f"{attempts}/{limit}" if limit else attempts),
        ("owner", record.get("owner")),
        ("created", record.get("created_at")),
        ("updated", record.get("updated_at")),
        ("not before", record.get("not_before")),
        ("rescues", record.get("rescues") or None),
        ("client id", record.get("client_id")),
        ("source", record.get("source")),
        ("payload", record.get("payload")),
        ("result", record.get("result")),
    ]
    fields += [("outputs", record.get("outputs") or None), ("watchdog", record.get("watchdog"))]
    fields += [  # workflows (docs/workflows.md)
        ("parents", ", ".join(map(str, record.get("depends_on") or [])) or None),
        ("children", ", ".join(map(str, record.get("children") or [])) or None),
        ("parent failure", record.get("parent_failure")),
        ("callback of", record.get("callback_of")),
    ]
    fields += _waits_fields(record)  # waits (docs/waiting.md)
    width = max(len(k) for k, _ in fields)
    lines = [f"{k.ljust(width)}  {_cell(v)}" for k, v in fields if v not in (None, "", {})]
    lines += _error_lines(record)
    history = record.get("history")
    if isinstance(history, list) and history:
        lines += ["", f"history ({len(history)}, oldest first):"]
        lines += ["  " + history_line(entry) for entry in history if isinstance(entry, dict)]
    elif history not in (None, []):  # hand-edited: shown as stored, never a traceback
        lines += ["", f"history (not a list): {_cell(history)}"]
    return "\n".join(lines)


def _error_lines(record: Mapping[str, Any]) -> list[str]:
    """The error of the job's attempt (its kind, then the stage's traceback), or an
    earlier attempt's while a retry is pending."""
    lines: list[str] = []
    for key, label in (("error", "error:"), ("previous_error", "error of an earlier attempt:")):
        error = record.get(key)
        if isinstance(error, dict) and error:
            lines += ["", label, "  " + _error_line(error)]
            where = error.get("where")
            if isinstance(where, dict) and where.get("file"):
                lines.append(f"  raised at {where.get('file')}:{where.get('line')}")
            trace = error.get("traceback")
            if isinstance(trace, str) and trace:
                lines += ["  " + line for line in trace.rstrip().splitlines()]
        elif error not in (None, "", {}):  # hand-edited: shown as stored
            lines += ["", label, "  " + _cell(error)]
    return lines


def _error_line(error: Mapping[str, Any]) -> str:
    where = ", ".join(
        f"{k} {error[k]}" for k in ("stage", "attempt") if error.get(k) not in (None, "")
    )
    kind = error.get("type") or "error"
    label = f" ({error_kind(error)})" if "kind" in error or "retryable" in error else ""
    head = f"{kind}: {error.get('message', '')}".rstrip(": ")
    at = f" at {error['at']}" if error.get("at") else ""
    return f"{head}{label}" + (f" [{where}]" if where else "") + at


def quiet_for(record: Mapping[str, Any], now: datetime, stale_s: float) -> str | None:
    """How long a running job's record has not moved, when that is longer than `stale_s`
    (this CLI's stale time: a hint, never a verdict), else None."""
    if record.get("status") != JobStatus.RUNNING:
        return None
    updated = parse_time(record.get("updated_at"))
    if updated is None:
        return "a time it cannot say (its updated_at is unreadable)"
    quiet = (now - updated).total_seconds()
    return f"{quiet:.0f} s" if quiet > stale_s else None


def history_line(entry: Mapping[str, Any]) -> str:
    """`<at>  <event>  key=value ...` for one history entry (an error as `type: message`)."""
    extras = " ".join(
        f"{k}={_history_value(v)}"
        for k, v in entry.items()
        if k not in ("at", "event") and v is not None
    )
    return f"{entry.get('at', '?')}  {entry.get('event', '?')}" + (f"  {extras}" if extras else "")


def _history_value(value: Any) -> str:
    if isinstance(value, dict) and "type" in value and "message" in value:
        return json.dumps(f"{value['type']}: {value['message']}")
    return _cell(value)


def counts_text(counts: Mapping[str, Any]) -> str:
    """`key: value` lines, for the sweep's counts and similar summaries."""
    if not counts:
        return "(nothing)"
    width = max(len(str(k)) for k in counts)
    return "\n".join(f"{str(k).ljust(width)}  {_cell(v)}" for k, v in counts.items())


def ended_text(record: Mapping[str, Any]) -> str:
    """`submit --wait`: one ended job as `<id>  <status>  <result>` (or its error)."""
    status = record.get("status")
    head = f"{record.get('id')}  {status}"
    error = record.get("error")
    if status != JobStatus.DONE and isinstance(error, dict) and error:
        return f"{head}  {_error_line(error)}"
    result = record.get("result")
    return f"{head}  {to_json(result)}" if result not in (None, {}) else head


def change_line(record: Mapping[str, Any]) -> str:
    """`watch <job>`: one line per change: status, stage, attempt, progress, last event."""
    history = record.get("history")
    last = history[-1] if isinstance(history, list) and history else {}
    parts = [
        str(record.get("status")),
        f"stage {record.get('stage')}" if record.get("stage") else "",
        f"attempt {record.get('attempts')}" if record.get("attempts") else "",
        progress_text(record.get("progress")) or "",
        f"({last.get('event')})" if isinstance(last, Mapping) and last.get("event") else "",
    ]
    return f"{record.get('id')}  " + "  ".join(p for p in parts if p)
