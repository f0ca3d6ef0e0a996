"""The pure half of waits: the park and release fields, object names, waitpoint tokens,
children ids and what a person is shown. No I/O, no cloud import (like shared.job_queue).

A parked job's record (status ``waiting``) carries ``park``:

  {"kind": "sleep",    "stage", "next_stage", "since", "until"}
  {"kind": "token",    "stage", "next_stage", "since", "until" (the timeout, or null),
                       "ref", "token", "url"}
  {"kind": "children", "stage", "next_stage", "since", "fanout", "total",
                       "on_child_failure", "max_running"}

and, once released, ``waited`` (what the next stage reads: ``ctx.waited``): the park with
``status`` ("slept", "completed", "timed_out", "children"), ``at``, and for a token its
``data`` and ``by``. A child of a fan-out carries ``parent_job``: {"id", "stage",
"fanout", "index", "on_child_failure"}.

Index objects (beside the records, in the home bucket; create-only or deleted):

  waits/key                        the waitpoint signing key (random, created once)
  waits/repair/done/<job>/<ref>    a completion that came before its job parked on it
  waits/repair/stop/<fanout>       a fan-out stopped: its first failed child, or its
                                   parent's end; the siblings still open are cancelled
  waits/fanout/<fanout>.json       a fan-out's spec, written before its first child
  waits/open/<fanout>/<child>      a child that has not ended (written before its record)

The sweep's pass lists waits/repair/ once per run (both kinds are few and short-lived).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import job_queue, records, timing
from shared.errors import InvalidInput
from shared.jobs import MAX_ATTEMPTS_LIMIT, HistoryEntry, JobRecord, JobStatus, format_time

PREFIX = "waits/"
REPAIR_ROOT = f"{PREFIX}repair/"
"""What the sweep's pass looks at, under one prefix: one listing per run."""
DONE_ROOT = f"{REPAIR_ROOT}done/"
STOP_ROOT = f"{REPAIR_ROOT}stop/"
OPEN_ROOT = f"{PREFIX}open/"
FANOUT_ROOT = f"{PREFIX}fanout/"

KINDS = ("sleep", "token", "children")
CHILD_POLICIES = ("fail", "continue")
MAX_WAIT_S = timing.MAX_DELAY_S
"""The longest sleep or waitpoint timeout: 30 days, the time index's horizon."""
MAX_CHILDREN = 100_000
"""Most children one fan-out may create (the index in a child's id has five digits)."""
MAX_DATA_BYTES = 16 * 1024
"""Largest completion data (JSON) a waitpoint keeps: it is copied into the record."""
MAX_CHILD_KEYS = frozenset({"pipeline", "payload", "max_attempts", "tags", "timeout_seconds"})
FAR_DUE = timedelta(days=3650)
"""A parked job's pending marker is marked due this far ahead when nothing wakes it by
time (a waitpoint without a timeout, a fan-out): the sweep's plan never reads it for
nothing (shared.sweep_plan), the release marks it due again."""
STATUS_BY_KIND = {"sleep": "slept", "token": "completed", "children": "children"}
RECORD_FIELDS = ("park", "waited", "parent_job")
VIEW_FIELDS = ("park", "waited", "parent_job", "waiting_for", "children_url")
TOKEN_VERSION = b"reclaim-waitpoint/v1\n"
_TAG_BYTES = 16
_CHILD_INDEX_WIDTH = 5
_READABLE_PARENT_MAX = records.ID_MAX_LEN - 16


# ------------------------------------------------------------------ names


def done_prefix(job_id: str) -> str:
    return f"{DONE_ROOT}{records.validate_job_id(job_id)}/"


def done_name(job_id: str, ref: str) -> str:
    return done_prefix(job_id) + check_ref(ref)


def parse_done_name(name: str) -> tuple[str, str] | None:
    """(job id, ref) of a completion object's name, or None for any other name."""
    parts = name[len(DONE_ROOT) :].split("/") if name.startswith(DONE_ROOT) else []
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def fanout_id(parent: str, stage_index: int) -> str:
    """The fan-out of `parent`'s stage `stage_index`: the children's batch id, the same
    on every run of that stage (a rerun after a crash finds its children)."""
    digest = hashlib.sha256(f"{parent}\n{stage_index}".encode()).hexdigest()
    return f"fo-{digest[:24]}"


def child_id(parent: str, stage_index: int, index: int) -> str:
    """A child's id, derived from (parent, stage, index) alone: `<parent>-s<stage>-<index>`
    (five digits), or `<fanout>-<index>` when the parent's id is too long for that."""
    if not 0 <= index < MAX_CHILDREN:
        raise ValueError(f"child index {index} is outside 0..{MAX_CHILDREN - 1}")
    suffix = f"{index:0{_CHILD_INDEX_WIDTH}d}"
    if len(parent) <= _READABLE_PARENT_MAX:
        return records.validate_job_id(f"{parent}-s{stage_index}-{suffix}")
    return f"{fanout_id(parent, stage_index)}-{suffix}"


def open_prefix(fanout: str) -> str:
    return f"{OPEN_ROOT}{records.validate_batch_id(fanout)}/"


def open_name(fanout: str, child: str) -> str:
    return open_prefix(fanout) + records.validate_job_id(child)


def fanout_spec_name(fanout: str) -> str:
    return f"{FANOUT_ROOT}{records.validate_batch_id(fanout)}.json"


def stop_name(fanout: str) -> str:
    return f"{STOP_ROOT}{records.validate_batch_id(fanout)}"


def last_segment(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def concurrency_key(fanout: str) -> str:
    """The flow-control key that throttles one fan-out's children (max_running)."""
    return records.validate_job_id(f"{fanout}.children", "concurrency_key")


# ------------------------------------------------------------------ waitpoint tokens


def ref_of(attempt: int, stage_index: int, seq: int) -> str:
    """A waitpoint's reference within its job: the attempt, stage and call that made it."""
    return f"{attempt}.{stage_index}.{seq}"


def check_ref(ref: object) -> str:
    parts = ref.split(".") if isinstance(ref, str) else []
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 9 for p in parts):
        raise InvalidInput(f"waitpoint reference {str(ref)[:40]!r} is not valid", "waitpoint")
    return str(ref)


def sign(key: bytes, job_id: str, ref: str) -> str:
    """The token of a waitpoint: its job and reference, and an HMAC-SHA256 tag over them
    (RFC 2104), both base64url: whoever holds the token may complete that waitpoint, and
    nobody can make one without the key."""
    payload = f"{records.validate_job_id(job_id)}/{check_ref(ref)}".encode()
    tag = hmac.new(key, TOKEN_VERSION + payload, hashlib.sha256).digest()[:_TAG_BYTES]
    return f"{_b64(payload)}.{_b64(tag)}"


def verify(key: bytes, token: object) -> tuple[str, str] | None:
    """(job id, ref) of a token signed with `key`, or None for anything else. The tag is
    compared in constant time (hmac.compare_digest), so a guess learns nothing from the
    time the answer takes."""
    if not isinstance(token, str) or len(token) > 400 or token.count(".") != 1:
        return None
    head, _, tail = token.partition(".")
    payload, tag = _unb64(head), _unb64(tail)
    if payload is None or tag is None:
        return None
    expected = hmac.new(key, TOKEN_VERSION + payload, hashlib.sha256).digest()[:_TAG_BYTES]
    if not hmac.compare_digest(expected, tag):
        return None
    job_id, _, ref = payload.decode("ascii", "replace").partition("/")
    try:
        return records.validate_job_id(job_id), check_ref(ref)
    except InvalidInput:
        return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes | None:
    if not text or not all(c.isalnum() or c in "-_" for c in text):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None


def completion_url(base: str | None, token: str) -> str | None:
    """Where a provider POSTs to complete a waitpoint (None when no base is configured:
    the CLI, the client and the dashboard still complete it)."""
    return f"{base.rstrip('/')}/waitpoints/{token}" if base else None


def check_data(data: Any) -> Any:
    """Completion data as the record keeps it: JSON, at most MAX_DATA_BYTES (ValueError)."""
    try:
        text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"completion data must be JSON: {exc}") from None
    if len(text.encode("utf-8")) > MAX_DATA_BYTES:
        raise ValueError(f"completion data is larger than {MAX_DATA_BYTES} bytes as JSON")
    problem = records.json_problem(data, records.MAX_PAYLOAD_DEPTH, "data")
    if problem is not None:
        raise ValueError(problem)
    return json.loads(text)


def outcome(status: str, now: datetime, *, data: Any = None, by: str | None = None) -> dict:
    """How a wait ended, as the release writes it into `waited`."""
    out: dict[str, Any] = {"status": status, "at": format_time(now)}
    if data is not None:
        out["data"] = data
    if by is not None:
        out["by"] = str(by)[:200]
    return out


# ------------------------------------------------------------------ parks


def check_seconds(seconds: object, what: str) -> float:
    """A sleep's or timeout's length: 0..MAX_WAIT_S seconds (ValueError)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    value = float(seconds)
    if math.isnan(value) or not 0 <= value <= MAX_WAIT_S:
        raise ValueError(f"{what} must be from 0 to {MAX_WAIT_S:g} seconds (30 days)")
    return value


def check_when(when: object, now: datetime) -> datetime:
    """A sleep's end as an aware time, at most MAX_WAIT_S ahead (ValueError)."""
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ValueError("sleep_until needs an aware datetime (with a time zone)")
    at = when.astimezone(UTC)
    if (at - now).total_seconds() > MAX_WAIT_S:
        raise ValueError("sleep_until may be at most 30 days ahead")
    return max(at, now)


def base_park(kind: str, stage: str, next_stage: int, now: datetime) -> dict[str, Any]:
    return {"kind": kind, "stage": stage, "next_stage": next_stage, "since": format_time(now)}


def park_fields(
    job: JobRecord, now: datetime, park: Mapping[str, Any], max_attempts: int
) -> JobRecord:
    """running -> waiting at a stage boundary (the checkpoint goes in the same write): no
    owner, no attempt spent (the budget is raised by one, as a hand-back's), the park
    saying what wakes it. Raises ValueError on a job that is not running."""
    if job.get("status") != JobStatus.RUNNING:
        raise ValueError(f"only a running job parks, not a {job.get('status')!s} one")
    at = format_time(now)
    budget = _max_attempts(job, max_attempts)
    raised = budget + 1 if budget < MAX_ATTEMPTS_LIMIT else budget
    entry: HistoryEntry = {
        "at": at,
        "event": "parked",
        "owner": job.get("owner"),
        "attempt": _attempts(job),
        "stage": str(park.get("stage")),
        "reason": reason(park),
        "max_attempts": raised,
    }
    return {
        "status": JobStatus.WAITING,
        "owner": None,
        "stage": None,
        "updated_at": at,
        "not_before": None,
        "max_attempts": raised,
        "park": dict(park),
        **_history(job, entry),
    }


def parked_on(record: Mapping[str, Any], kind: str, key: str | None = None) -> bool:
    """The record is parked by this kind of wait (and this waitpoint or fan-out)."""
    park = record.get("park")
    if record.get("status") != JobStatus.WAITING or not isinstance(park, dict):
        return False
    if park.get("kind") != kind:
        return False
    if kind == "token":
        return key is None or park.get("ref") == key
    if kind == "children":
        return key is None or park.get("fanout") == key
    return True


def is_parked(record: Mapping[str, Any]) -> bool:
    """A waiting job parked by one of its stages (not a child waiting for its parents)."""
    park = record.get("park")
    return (
        record.get("status") == JobStatus.WAITING
        and isinstance(park, dict)
        and park.get("kind") in KINDS
    )


def wake_at(record: Mapping[str, Any]) -> datetime | None:
    """When time wakes a parked job (a sleep's end, a waitpoint's timeout), or None."""
    park = record.get("park")
    return timing.read_time(park.get("until")) if isinstance(park, dict) else None


def release_fields(job: JobRecord, now: datetime, ended: Mapping[str, Any]) -> JobRecord:
    """waiting (parked) -> queued and due at once: the park becomes `waited`, with how it
    ended (`ended`: outcome()), for the next stage to read. Raises ValueError when the job
    is not parked."""
    if not is_parked(job):
        raise ValueError(f"job {job.get('id')} is not parked")
    park = dict(job.get("park") or {})
    at = format_time(now)
    entry: HistoryEntry = {"at": at, "event": "resumed", "reason": str(ended.get("status"))}
    if ended.get("by"):
        entry["by"] = str(ended["by"])
    return {
        "status": JobStatus.QUEUED,
        "updated_at": at,
        "not_before": None,
        "park": None,
        "waited": {**park, **ended},
        **_history(job, entry),
    }


def fail_parked_fields(
    job: JobRecord, now: datetime, *, error_type: str, message: str, ended: Mapping[str, Any]
) -> JobRecord:
    """waiting (parked) -> failed: a fan-out whose child failed under "fail". The error
    names the child; the checkpoint stays, so a retry resumes at the join stage."""
    if not is_parked(job):
        raise ValueError(f"job {job.get('id')} is not parked")
    at = format_time(now)
    park = dict(job.get("park") or {})
    error = {
        "stage": park.get("stage"),
        "attempt": _attempts(job),
        "type": error_type,
        "message": message[:2000],
        "retryable": False,
        "at": at,
    }
    entry: HistoryEntry = {"at": at, "event": "failed", "attempt": _attempts(job)}
    entry["error"] = error  # type: ignore[typeddict-item]
    return {
        "status": JobStatus.FAILED,
        "stage": park.get("stage"),
        "error": error,  # type: ignore[typeddict-item]
        "updated_at": at,
        "not_before": None,
        "park": None,
        "waited": {**park, **ended},
        **_history(job, entry),
    }


# ------------------------------------------------------------------ children


@dataclass(frozen=True)
class ChildSpec:
    """One child of a fan-out, checked: its pipeline, payload and own settings."""

    pipeline: str
    payload: dict[str, Any]
    max_attempts: int | None = None
    tags: tuple[str, ...] = ()
    timeout_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def child_specs(children: object) -> list[ChildSpec]:
    """The children a stage asked for (a list of {"pipeline", "payload", "max_attempts",
    "tags", "timeout_seconds"}), or ValueError naming the first problem."""
    if not isinstance(children, Sequence) or isinstance(children, str | bytes):
        raise ValueError("fan_out takes a list of children, each {'pipeline': ..., ...}")
    if not 1 <= len(children) <= MAX_CHILDREN:
        raise ValueError(f"fan_out takes 1 to {MAX_CHILDREN} children, not {len(children)}")
    out = []
    for i, child in enumerate(children):
        if not isinstance(child, Mapping):
            raise ValueError(f"children[{i}] must be a dict with a pipeline")
        unknown = sorted(set(child) - MAX_CHILD_KEYS)
        if unknown:
            raise ValueError(f"children[{i}] has unknown keys {unknown}")
        pipeline = child.get("pipeline")
        payload = child.get("payload", {})
        if not isinstance(pipeline, str) or not isinstance(payload, dict):
            raise ValueError(f"children[{i}] needs a pipeline name and a dict payload")
        tags = child.get("tags") or ()
        if not isinstance(tags, Sequence) or not all(isinstance(t, str) for t in tags):
            raise ValueError(f"children[{i}].tags must be a list of strings")
        timeout = child.get("timeout_seconds")
        if timeout is not None and timing.read_seconds(timeout, 1, timing.MAX_TIMEOUT_S) is None:
            raise ValueError(f"children[{i}].timeout_seconds must be 1..{timing.MAX_TIMEOUT_S:g}")
        out.append(
            ChildSpec(pipeline, dict(payload), child.get("max_attempts"), tuple(tags), timeout)
        )
    return out


def check_policy(on_child_failure: object, max_running: object) -> tuple[str, int | None]:
    if on_child_failure not in CHILD_POLICIES:
        raise ValueError(f"on_child_failure must be one of {', '.join(CHILD_POLICIES)}")
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise ValueError("max_running must be a positive integer or None")
    return str(on_child_failure), max_running


def merged_tags(parent: Sequence[str], own: Sequence[str], limit: int = 10) -> list[str]:
    """A child's tags: its parent's, then its own, each once, at most `limit`."""
    out: list[str] = []
    for tag in [*parent, *own]:
        if tag not in out:
            out.append(tag)
    return out[:limit]


def page_of(ids: Sequence[str], page_size: int) -> tuple[list[str], str | None]:
    """One page of children ids listed with one extra: (the page, the next page's token,
    the first id of the next page, or None at the end)."""
    return list(ids[:page_size]), (ids[page_size] if len(ids) > page_size else None)


# ------------------------------------------------------------------ what a person sees


def reason(park: Mapping[str, Any], remaining: int | None = None) -> str:
    """One line saying what a parked job waits for."""
    kind = park.get("kind")
    until = park.get("until")
    if kind == "sleep":
        return f"sleeping until {until}"
    if kind == "token":
        text = "waiting for its waitpoint to be completed"
        return text + (f" (times out at {until})" if until else "")
    if kind == "children":
        total = park.get("total")
        left = "?" if remaining is None else str(remaining)
        return f"waiting for {left} of {total} children"
    return f"parked ({kind})"


def view(record: Mapping[str, Any], remaining: int | None = None) -> dict[str, Any]:
    """A job's view: its park and what it waits for, the last wait's outcome, its parent
    (a child) or its children (a parent)."""
    out: dict[str, Any] = {}
    park = record.get("park")
    if isinstance(park, dict) and is_parked(record):
        out["park"] = park
        out["waiting_for"] = reason(park, remaining)
        if park.get("kind") == "children" and park.get("fanout"):
            out["children_url"] = f"/batches/{park['fanout']}"
    waited = record.get("waited")
    if isinstance(waited, dict):
        out["waited"] = waited
        if waited.get("kind") == "children" and waited.get("fanout") and "children_url" not in out:
            out["children_url"] = f"/batches/{waited['fanout']}"
    parent = record.get("parent_job")
    if isinstance(parent, dict):
        out["parent_job"] = {**parent, "status_url": f"/jobs/{parent.get('id')}"}
    return out


# ------------------------------------------------------------------ helpers


def _attempts(job: JobRecord) -> int:
    value = job_queue.attempts_of(job)
    return value if value != job_queue.ATTEMPTS_UNREADABLE else 0


def _max_attempts(job: JobRecord, default: int) -> int:
    return job_queue.max_attempts_of(job, default)


def _history(job: JobRecord, entry: HistoryEntry) -> JobRecord:
    return job_queue.with_history(job, entry)
