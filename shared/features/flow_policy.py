"""Flow control's pure rules: keys, limits, rates, windows and the index object names.

No I/O and no cloud import (shared.features.flow does the storage work), so every rule here is
property-tested on its own. Layout of the flow-control objects in the records bucket:

  limits/<key>/<k>                      place k (k < max_running) of a concurrency key:
                                        {"job", "attempt", "at"} of its holder (and
                                        "until": held whatever the record says, while a
                                        stage handed back from outside may run), or empty
                                        (free; a place is emptied, never deleted)
  waiting-for/<key>/<created>-<id>      a job waiting for a place (oldest first)
  rates/<key>/<window>/<k>              token k (k < limit) of one rate window
  paused/<pipeline>                     the pipeline is paused (its presence is the flag)
  parked/<pipeline>/<id>                a job held back by the pause, rung on resume
  ended/<status>/<slot>/<YYYYMMDD>/<id> a job that failed or was cancelled that day (bulk),
                                        each day spread over fan-out slots (shared.shards;
                                        ended/<status>/<YYYYMMDD>/<id>: written before, read)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from shared import timing
from shared.errors import InvalidInput
from shared.jobs import JobRecord, JobStatus
from shared.records import validate_job_id
from shared.shards import fanout_slot, fanout_slots

LIMITS_PREFIX = "limits/"
WAITING_PREFIX = "waiting-for/"
RATES_PREFIX = "rates/"
PAUSED_PREFIX = "paused/"
PARKED_PREFIX = "parked/"
ENDED_PREFIX = "ended/"
PREFIXES = (LIMITS_PREFIX, WAITING_PREFIX, RATES_PREFIX, PAUSED_PREFIX, PARKED_PREFIX, ENDED_PREFIX)

MAX_RUNNING_LIMIT = 1000
"""A key's places are listed in one page: at most this many."""
MAX_RATE_LIMIT = 1000
"""Tokens of one window are listed in one page: at most this many per window."""
RATE_LISTING = 1000
"""Tokens one reservation lists: windows ahead = RATE_LISTING // limit (at least 1)."""
RESERVE_AHEAD_S = 3600
"""A job reserves a token at most this far ahead; beyond, it is deferred and looks again."""

_PERIODS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
}
_RATE = re.compile(r"\s*(\d{1,6})\s*/\s*([a-z]+)\s*")


@dataclass(frozen=True)
class Rate:
    """At most `limit` starts per window of `period_s` seconds (aligned to the epoch)."""

    limit: int
    period_s: int

    def window_start(self, now: datetime) -> datetime:
        epoch = int(_utc(now).timestamp())
        return datetime.fromtimestamp(epoch - epoch % self.period_s, UTC)

    def windows_from(self, now: datetime, count: int) -> list[datetime]:
        first = self.window_start(now)
        return [first + timedelta(seconds=i * self.period_s) for i in range(count)]

    @property
    def lookahead(self) -> int:
        """How many windows one reservation listing covers: at most RATE_LISTING tokens and
        RESERVE_AHEAD_S ahead (a token older than a day may be deleted: terraform's
        lifecycle rule on rates/)."""
        return max(1, min(RATE_LISTING // self.limit, RESERVE_AHEAD_S // self.period_s))


def parse_rate(text: object) -> Rate:
    """'5/s', '100/min', '2/hour' -> Rate; InvalidInput says what is wrong."""
    if not isinstance(text, str):
        raise InvalidInput(
            f"rate must be a string such as '5/s', not {type(text).__name__}", "rate"
        )
    match = _RATE.fullmatch(text.lower())
    if match is None or match.group(2) not in _PERIODS:
        raise InvalidInput(
            f"rate {text[:40]!r} is malformed: write N/s, N/min or N/h (e.g. '5/s')", "rate"
        )
    limit = int(match.group(1))
    if not 1 <= limit <= MAX_RATE_LIMIT:
        raise InvalidInput(f"rate {text!r}: the limit must be from 1 to {MAX_RATE_LIMIT}", "rate")
    return Rate(limit, _PERIODS[match.group(2)])


def validate_key(value: object) -> str:
    """A concurrency key names objects: the job-id alphabet (letters, digits, '.', '_', '-')."""
    return validate_job_id(value, "concurrency_key")


def validate_max_running(value: object) -> int:
    if type(value) is not int or not 1 <= value <= MAX_RUNNING_LIMIT:
        raise InvalidInput(
            f"max_running must be an integer from 1 to {MAX_RUNNING_LIMIT}", "max_running"
        )
    return value


FLOW_KEYS = frozenset({"concurrency_key", "max_running", "rate"})
"""A job's flow fields: keys at submit, copied into the record as given, shown when set."""


def parse_fields(job: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    """Submit's checks of the flow fields of one job (appends reasons to problems); the
    record fields they become, as given."""
    key = job.get("concurrency_key")
    if key is not None:
        _collect(problems, where, lambda: validate_key(key))
    if job.get("max_running") is not None:
        _collect(problems, where, lambda: validate_max_running(job.get("max_running")))
        if key is None:
            problems.append(f"{where}max_running needs a concurrency_key to count against")
    if job.get("rate") is not None:
        _collect(problems, where, lambda: parse_rate(job.get("rate")))
    return {k: job[k] for k in sorted(FLOW_KEYS) if job.get(k) is not None}


def view(_ctx: object, record: Mapping[str, Any]) -> dict[str, Any]:
    """A job's view: its flow fields, only when it has them."""
    return {k: record.get(k) for k in sorted(FLOW_KEYS) if record.get(k) is not None}


def _collect(problems: list[str], where: str, check: Any) -> None:
    try:
        check()
    except InvalidInput as exc:
        problems.append(f"{where}{exc.reason}")


# ------------------------------------------------------------------ what applies to a job


@dataclass(frozen=True)
class Limits:
    """The flow limits one job is under (None: not limited that way)."""

    key: str | None
    max_running: int | None
    rate: Rate | None
    rate_key: str | None


def limits_of(
    job: JobRecord, pipeline_max_running: int | None, pipeline_rate: str | None
) -> Limits:
    """The job's own fields win over its pipeline's; a rate counts per concurrency key, or
    per pipeline for a job without one. A field the record holds but cannot be read
    (hand-edited) is ignored rather than blocking the job forever."""
    raw: Mapping[str, Any] = job
    key = raw.get("concurrency_key")
    try:
        key = validate_key(key) if key is not None else None
    except InvalidInput:
        key = None
    max_running: int | None = None
    if key is not None:
        for candidate in (raw.get("max_running"), pipeline_max_running):
            if candidate is None:
                continue
            try:
                max_running = validate_max_running(candidate)
                break
            except InvalidInput:
                continue
    rate: Rate | None = None
    for text in (raw.get("rate"), pipeline_rate):
        if text is None:
            continue
        try:
            rate = parse_rate(text)
            break
        except InvalidInput:
            continue
    rate_key = None
    if rate is not None:
        rate_key = key if key is not None else "pipeline." + str(raw.get("pipeline"))
        try:
            validate_key(rate_key)
        except InvalidInput:  # a hand-edited pipeline name: the runner fails the job
            rate, rate_key = None, None
    return Limits(key, max_running, rate, rate_key)


# ------------------------------------------------------------------ names


def place_name(key: str, k: int) -> str:
    return f"{LIMITS_PREFIX}{key}/{k:04d}"


def place_index(name: str) -> int | None:
    tail = name.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def places_prefix(key: str) -> str:
    return f"{LIMITS_PREFIX}{key}/"


def waiting_prefix(key: str) -> str:
    return f"{WAITING_PREFIX}{key}/"


def waiter_name(key: str, job: JobRecord) -> str:
    """Oldest job first: the name sorts by the record's creation time, then its id."""
    created = "".join(ch for ch in str(job.get("created_at") or "") if ch.isdigit())
    return f"{WAITING_PREFIX}{key}/{created or '0'}-{job.get('id')}"


def waiter_job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1].split("-", 1)[-1]


def window_label(start: datetime) -> str:
    return _utc(start).strftime("%Y%m%dT%H%M%S")


def label_start(label: str) -> datetime | None:
    try:
        return datetime.strptime(label, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def rates_prefix(key: str) -> str:
    return f"{RATES_PREFIX}{key}/"


def token_name(key: str, start: datetime, k: int) -> str:
    return f"{RATES_PREFIX}{key}/{window_label(start)}/{k:04d}"


def token_window(name: str) -> str:
    """The window label of a token name (rates/<key>/<window>/<k>)."""
    parts = name.split("/")
    return parts[-2] if len(parts) >= 4 else ""


def paused_name(pipeline: str) -> str:
    return f"{PAUSED_PREFIX}{pipeline}"


def parked_prefix(pipeline: str) -> str:
    return f"{PARKED_PREFIX}{pipeline}/"


def parked_name(pipeline: str, job_id: str) -> str:
    return f"{PARKED_PREFIX}{pipeline}/{job_id}"


ENDED_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED)
"""The statuses the ended index keeps: what a bulk retry takes back (a done job is never
retried, so it costs nothing here)."""


def ended_name(job: JobRecord) -> str | None:
    """The index entry of a failed or cancelled record (deterministic, so the hook that
    writes it is idempotent); None for any other job, or one that cannot be dated."""
    status = job.get("status")
    if status not in ENDED_STATUSES:
        return None
    at = str(job.get("updated_at") or "")
    day = at[:10].replace("-", "")
    if len(day) != 8 or not day.isdigit():
        return None
    job_id = str(job.get("id"))
    return f"{ENDED_PREFIX}{status}/{fanout_slot(job_id)}/{day}/{job_id}"


def ended_day_prefixes(status: str, day: datetime) -> list[str]:
    """The listings of one status and day: the old names' (ended/<status>/<day>/, before
    the fan-out) and one per fan-out slot (shared.shards.TIME_INDEX_FANOUT)."""
    stamp = _utc(day).strftime("%Y%m%d")
    slots = [f"{ENDED_PREFIX}{status}/{s}/{stamp}/" for s in fanout_slots()]
    return [f"{ENDED_PREFIX}{status}/{stamp}/", *slots]


# ------------------------------------------------------------------ places


@dataclass(frozen=True)
class Holder:
    """Who a place object says holds it: a job's attempt, when it took the place, and, for
    an attempt that ended while its stage could still run (a hand-back from outside),
    until when it keeps the place whatever its record says."""

    job_id: str
    attempt: int
    at: datetime | None
    until: datetime | None = None

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "job": self.job_id,
            "attempt": self.attempt,
            "at": _utc(self.at).isoformat() if self.at is not None else None,
        }
        if self.until is not None:
            body["until"] = _utc(self.until).isoformat()
        return json.dumps(body).encode()


def parse_holder(data: bytes) -> Holder | None:
    try:
        obj = json.loads(data)
        at = datetime.fromisoformat(obj["at"]) if obj.get("at") else None
        until = datetime.fromisoformat(obj["until"]) if obj.get("until") else None
        return Holder(str(obj["job"]), int(obj["attempt"]), at, until)
    except (ValueError, KeyError, TypeError):
        return None


class Standing(StrEnum):
    """What a place's holder is to a job that wants the place."""

    HOLDS = "holds"
    """It counts against the key: the place is not free."""
    GONE = "gone"
    """It no longer holds: ended, requeued, handed back, rescued, or its record is gone.
    Whatever it ran has stopped, or can write nothing more: the place is free."""
    SILENT = "silent"
    """Running that attempt, but stale: dead, or alive and silent (paused, starved, cut
    off). Its record must be fenced (rescued) first: a live one would run on unfenced."""
    UNCLAIMED = "unclaimed"
    """It took the place longer than the stale time ago and never claimed: its claim may
    still land (a stalled delivery). Its record must be fenced (rewritten) first."""


def standing(holder: Holder, job: JobRecord | None, now: datetime, stale_s: float) -> Standing:
    """The holder's standing, by its own job's record (the same staleness rule as the
    watchdog's). A place counts while its holder runs that attempt and is fresh; while it
    has just taken the place and is about to claim (queued one attempt below, the place
    younger than stale_s); while its job runs the attempt before, fresh (a delivery that
    took the place from its own silent attempt and lost the claim to it: that attempt is
    alive); and until its `until`, whatever the record says. A holder that is stale (or
    never claimed) is not free yet: it must be fenced first. Any other holder is gone."""
    if holder.until is not None and _utc(now) < _utc(holder.until):
        return Standing.HOLDS
    if job is None:
        return Standing.GONE
    status = job.get("status")
    attempts = job.get("attempts")
    if status == JobStatus.RUNNING and attempts in (holder.attempt, holder.attempt - 1):
        updated = timing.read_time(job.get("updated_at"))
        fresh = updated is not None and (_utc(now) - updated).total_seconds() <= stale_s
        return Standing.HOLDS if fresh else Standing.SILENT
    if status == JobStatus.QUEUED and attempts == holder.attempt - 1:
        taken = holder.at
        if taken is not None and (_utc(now) - _utc(taken)).total_seconds() <= stale_s:
            return Standing.HOLDS
        return Standing.UNCLAIMED
    return Standing.GONE


def holds(holder: Holder, job: JobRecord | None, now: datetime, stale_s: float) -> bool:
    """Does this place still count against its key (standing HOLDS)?"""
    return standing(holder, job, now, stale_s) is Standing.HOLDS


def running_until(job: JobRecord) -> datetime | None:
    """When an attempt that just ended may still run a stage until: the newest history
    entry's `stopped_by`, when it says its stage was still running (a hand-back from
    outside: until the platform's SIGKILL); None when its stage had stopped."""
    history = job.get("history")
    entry = history[-1] if isinstance(history, list) and history else None
    if not isinstance(entry, Mapping) or entry.get("stage_running") is not True:
        return None
    return timing.read_time(entry.get("stopped_by"))


def defer_fields(job: JobRecord, not_before: datetime, token: str | None) -> JobRecord:
    """A queued job held back by its rate until a window: due then, no attempt spent (the
    token it reserved there, if any, goes with it)."""
    return {"not_before": _utc(not_before).isoformat(), "rate_token": token}


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
