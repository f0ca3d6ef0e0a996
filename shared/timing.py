"""Time policy of a job: when it may start, when it expires, how long an attempt may run,
and whether a unique key still blocks. Pure (stdlib only), like shared.job_queue.

Submit validates the raw fields here (`parse_fields`, a list of reasons on bad input) and
resolves the relative ones against its clock (`resolve`). The record then carries only
absolute UTC times (`run_at`, `expires_at`, `unique_until`) and `timeout_seconds`, which
the policy (job_queue), the gates, the sweep and the runner read back through the readers
here (a hand-edited value is ignored, never trusted to pin a job).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.shards import fanout_slot, fanout_slots

MAX_DELAY_S = 30 * 24 * 3600.0
"""The farthest a job may be scheduled ahead (run_at or delay_seconds): 30 days."""
MAX_TTL_S = 365 * 24 * 3600.0
"""The longest expiry (ttl_seconds, or expires_at ahead of submit): a year."""
MAX_TIMEOUT_S = 24 * 3600.0
"""The longest attempt timeout a job or pipeline may ask for."""
MAX_UNIQUE_FOR_S = 30 * 24 * 3600.0
"""The longest unique window."""
MAX_UNIQUE_KEY_LEN = 256
SCHEDULED_PREFIX = "scheduled/"
"""Index of delayed jobs: scheduled/<slot>/<YYYYMMDDTHH>/<job id>, one hour per bucket,
each hour spread over TIME_INDEX_FANOUT slots (shared.shards.fanout_slot); entries written
before the fan-out, scheduled/<YYYYMMDDTHH>/<job id>, are still read (scheduled_ranges)."""
UNIQUE_PREFIX = "unique/"
"""Unique-key locks: unique/<sha256 of the key>."""
EXPIRED_TYPE = "Expired"
TIMED_OUT_TYPE = "TimedOut"

TIME_KEYS = frozenset(
    {
        "run_at",
        "delay_seconds",
        "expires_at",
        "ttl_seconds",
        "timeout_seconds",
        "unique_key",
        "unique_for_seconds",
    }
)

HOLDING_STATUSES = ("waiting", "queued", "running")
"""A "while pending" unique key is held while its job is in one of these: not ended."""

RECORD_FIELDS = ("run_at", "expires_at", "timeout_seconds", "unique_key", "unique_until")
"""What the time keys become in a record (resolve), shown in a job's view when present."""


def view(_ctx: object, record: Mapping[str, Any]) -> dict[str, Any]:
    """A job's view: the time fields its record holds."""
    return {k: record.get(k) for k in RECORD_FIELDS if k in record}


@dataclass(frozen=True)
class TimeSpec:
    """The time fields of one submitted job, validated but not yet resolved."""

    run_at: datetime | None = None
    delay_s: float | None = None
    expires_at: datetime | None = None
    ttl_s: float | None = None
    timeout_s: float | None = None
    unique_key: str | None = None
    unique_for_s: float | None = None

    @property
    def empty(self) -> bool:
        return self == TimeSpec()


# --------------------------------------------------------------------------- parsing


def parse_zoned(value: object, what: str) -> datetime:
    """An RFC 3339 timestamp WITH a zone (Z or +hh:mm), as aware UTC; ValueError says why.

    A timestamp without a zone is refused: read as UTC it would silently run hours off
    for a client in another zone."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"{what} must be an RFC 3339 timestamp string with a zone")
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    except (ValueError, IndexError):
        raise ValueError(f"{what} {value[:40]!r} is not an RFC 3339 timestamp") from None
    if "T" not in text.upper() or parsed.tzinfo is None:
        raise ValueError(f"{what} {value[:40]!r} has no time zone; add Z or an offset like +02:00")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+03:00 is before year 1 in UTC
        raise ValueError(f"{what} {value[:40]!r} is outside the years 1 to 9999 in UTC") from None


def read_seconds(value: object, low: float, high: float) -> float | None:
    """The one reader of a number of seconds, for every time field (submit and stored
    records alike): a JSON number from low to high, else None.

    JSON numbers are unbounded: an integer literal like 10**400 is not a float, and
    turning it into one overflows. Comparing first, exactly (Python compares an int and
    a float without converting), keeps every such value an ordinary "out of range"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not low <= value <= high:
        return None
    return float(value)


def _seconds(value: object, what: str, *, low: float, high: float, problems: list[str]) -> float:
    seconds = read_seconds(value, low, high)
    if seconds is not None:
        return seconds
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        problems.append(f"{what} must be a number of seconds")
    else:
        problems.append(f"{what} must be from {low:g} to {high:g} seconds")
    return 0.0


def encode_key(value: object, what: str = "unique_key") -> bytes:
    """The one encoder of a key (unique_key, and whatever names an object after it): the
    key as UTF-8 bytes; ValueError says why not. A JSON string may carry a lone surrogate
    ("\\ud800") that no UTF-8 encoder accepts, and a CLI argument may carry undecodable
    bytes (Python keeps them as surrogates): both are refused here, before any write."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_UNIQUE_KEY_LEN:
        raise ValueError(f"{what} must be a string of 1 to {MAX_UNIQUE_KEY_LEN} chars")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} has text that is not valid Unicode (a lone surrogate or a byte that is"
            " not UTF-8)"
        ) from None


def parse_fields(job: Mapping[str, Any], where: str, problems: list[str]) -> TimeSpec:
    """The time fields of a submitted job; each bad one appends a reason to problems."""
    if not TIME_KEYS & job.keys():
        return TimeSpec()
    for one, other in (("run_at", "delay_seconds"), ("expires_at", "ttl_seconds")):
        if one in job and other in job:
            problems.append(f"{where}give {one} or {other}, not both")
    run_at = _zoned(job, "run_at", where, problems)
    expires_at = _zoned(job, "expires_at", where, problems)
    delay = _number(job, "delay_seconds", where, 0, MAX_DELAY_S, problems)
    ttl = _number(job, "ttl_seconds", where, 1, MAX_TTL_S, problems)
    timeout = _number(job, "timeout_seconds", where, 1, MAX_TIMEOUT_S, problems)
    unique_for = _number(job, "unique_for_seconds", where, 1, MAX_UNIQUE_FOR_S, problems)
    key = job.get("unique_key")
    if key is not None:
        try:
            encode_key(key, f"{where}unique_key")
        except ValueError as exc:
            problems.append(str(exc))
            key = None
    if job.get("unique_for_seconds") is not None and job.get("unique_key") is None:
        problems.append(f"{where}unique_for_seconds needs a unique_key")
    if run_at is not None and expires_at is not None and expires_at <= run_at:
        problems.append(f"{where}expires_at must be after run_at (the job could never run)")
    if delay is not None and ttl is not None and ttl <= delay:
        problems.append(f"{where}ttl_seconds must exceed delay_seconds (the job could never run)")
    return TimeSpec(run_at, delay, expires_at, ttl, timeout, key, unique_for)


def _zoned(job: Mapping[str, Any], key: str, where: str, problems: list[str]) -> datetime | None:
    if job.get(key) is None:
        return None
    try:
        return parse_zoned(job[key], f"{where}{key}")
    except ValueError as exc:
        problems.append(str(exc))
        return None


def _number(
    job: Mapping[str, Any], key: str, where: str, low: float, high: float, problems: list[str]
) -> float | None:
    if job.get(key) is None:
        return None
    return _seconds(job[key], f"{where}{key}", low=low, high=high, problems=problems)


def resolve(spec: TimeSpec, now: datetime) -> tuple[dict[str, Any], list[str]]:
    """The record fields of a TimeSpec at submit time `now`, and the reasons it cannot be.

    A run_at in the past runs now (it is kept, for the record); one past MAX_DELAY_S is
    refused, as is an expiry at or before the start."""
    problems: list[str] = []
    now = _utc(now)
    fields: dict[str, Any] = {}
    start = now
    if spec.delay_s is not None and spec.delay_s > 0:
        start = now + timedelta(seconds=spec.delay_s)
        fields["run_at"] = start.isoformat()
    elif spec.run_at is not None:
        if (spec.run_at - now).total_seconds() > MAX_DELAY_S:
            problems.append(f"run_at is more than {MAX_DELAY_S / 86400:g} days ahead")
        start = max(spec.run_at, now)
        fields["run_at"] = spec.run_at.isoformat()
    expires = spec.expires_at
    if spec.ttl_s is not None:
        expires = now + timedelta(seconds=spec.ttl_s)
    if expires is not None:
        if expires <= start:
            problems.append("the expiry is at or before the job's start: it could never run")
        elif (expires - now).total_seconds() > MAX_TTL_S:
            problems.append(f"expires_at is more than {MAX_TTL_S / 86400:g} days ahead")
        fields["expires_at"] = expires.isoformat()
    if spec.timeout_s is not None:
        fields["timeout_seconds"] = spec.timeout_s
    if spec.unique_key is not None:
        fields["unique_key"] = spec.unique_key
        until = None
        if spec.unique_for_s is not None:
            until = (now + timedelta(seconds=spec.unique_for_s)).isoformat()
        fields["unique_until"] = until
    return fields, problems


# --------------------------------------------------------------------------- readers


def read_time(value: object) -> datetime | None:
    """A stored time as aware UTC, or None for anything we cannot trust as one (a record
    may hold anything: a hand edit, or an offset that takes it past year 1 or 9999)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    try:
        return _utc(parsed)
    except OverflowError:
        return None


def run_at_of(job: Mapping[str, Any], now: datetime, *, skew_s: float = 300.0) -> datetime | None:
    """The job's run_at when believable (at most MAX_DELAY_S + skew ahead), else None."""
    run_at = read_time(job.get("run_at"))
    if run_at is None or (run_at - _utc(now)).total_seconds() > MAX_DELAY_S + skew_s:
        return None
    return run_at


def expires_at_of(job: Mapping[str, Any]) -> datetime | None:
    return read_time(job.get("expires_at"))


def expired(job: Mapping[str, Any], now: datetime) -> bool:
    """Queued, never started (no attempt used), and its expiry has passed."""
    expires = expires_at_of(job)
    return (
        expires is not None
        and job.get("status") == "queued"
        and job.get("attempts") in (0, None)
        and _utc(now) >= expires
    )


def timeout_of(job: Mapping[str, Any], pipeline_default: float | None) -> float | None:
    """The attempt timeout in seconds: the job's own, else the pipeline's, else none."""
    seconds = read_seconds(job.get("timeout_seconds"), 0, MAX_TIMEOUT_S)
    return seconds if seconds else pipeline_default


# --------------------------------------------------------------------------- index names


def hour_bucket(when: datetime) -> str:
    return _utc(when).strftime("%Y%m%dT%H")


def scheduled_name(job_id: str, run_at: datetime) -> str:
    """A delayed job's entry: its hour, in the fan-out slot its id hashes to."""
    return f"{SCHEDULED_PREFIX}{fanout_slot(job_id)}/{hour_bucket(run_at)}/{job_id}"


def legacy_scheduled_name(job_id: str, run_at: datetime) -> str:
    """The entry as written before the fan-out (still read, never written)."""
    return f"{SCHEDULED_PREFIX}{hour_bucket(run_at)}/{job_id}"


def scheduled_ranges(now: datetime) -> list[tuple[str, str]]:
    """(prefix, end) of each listing that finds every due entry: one per fan-out slot, and
    the old names' (scheduled/<hour>/..., whose digits sort before every slot's letter),
    each up to the first name past the current hour (objects.list endOffset)."""
    end = hour_bucket(_utc(now) + timedelta(hours=1))
    slots = [(f"{SCHEDULED_PREFIX}{s}/", f"{SCHEDULED_PREFIX}{s}/{end}") for s in fanout_slots()]
    return [(SCHEDULED_PREFIX, f"{SCHEDULED_PREFIX}{end}"), *slots]


def scheduled_job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def unique_lock_name(key: str) -> str:
    """Hashed: any key maps to a safe, fixed-length object name."""
    return UNIQUE_PREFIX + hashlib.sha256(encode_key(key)).hexdigest()


def lock_holds(
    lock: dict[str, Any],
    holder_status: str | None,
    now: datetime,
    grace_s: float,
) -> bool:
    """Whether a unique lock still blocks a new job with its key.

    `holder_status` is the status of the job the lock names, None when it has no record.
    A lock never blocks forever: not past its window, not once a "while pending" holder
    ended (it holds while it waits for parents, is queued or runs), and not when its job
    never got a record (a crash between lock and record)
    once the grace has passed. An unreadable lock does not block.
    """
    now = _utc(now)
    until = read_time(lock.get("until"))
    if lock.get("until") is not None and (until is None or now >= until):
        return False
    if holder_status is None:
        taken = read_time(lock.get("at"))
        return taken is not None and (now - taken).total_seconds() <= grace_s
    if until is None:
        return holder_status in HOLDING_STATUSES
    return True


def lock_data(job_id: str, key: str, until: str | None, now: datetime) -> dict[str, Any]:
    return {"job_id": job_id, "key": key, "until": until, "at": _utc(now).isoformat()}


def tick_job_id(schedule: str, tick: datetime) -> str:
    """One job per schedule tick: Cloud Scheduler's retries carry the same tick time."""
    return f"cron-{schedule}-{_utc(tick).strftime('%Y%m%dT%H%M%SZ')}"


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
