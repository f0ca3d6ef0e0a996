"""Cron schedules, declared once in `pipelines/schedules.json` (terraform reads the same
file with jsondecode(file(...)) and makes one Cloud Scheduler job per entry; `make dev`'s
ticker reads it too). Parsing is pure: the cron expression through cronsim, the time zone
through zoneinfo (with the pinned tzdata), every problem a readable reason.

File shape::

    {"schedules": [{"name": "nightly-report", "cron": "0 3 * * *",
                    "time_zone": "Europe/Paris", "pipeline": "demo",
                    "payload": {"stages": 1}, "overlap": "skip"}]}
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from shared.config import package_file
from shared.cron import dialect as cron_dialect
from shared.errors import InvalidInput

SCHEDULES_ENV = "RECLAIM_SCHEDULES_FILE"
_MODULES_ENV = "RECLAIM_PIPELINE_MODULES"
ROOT = Path(__file__).resolve().parents[2]  # the repo, or a deployed archive's root
DEFAULT_FILE = ROOT / "pipelines" / "schedules.json"
DEFAULT_ZONE = "Etc/UTC"  # the tz database name Cloud Scheduler keeps (schedules.tf)
OVERLAPS = ("allow", "skip")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")  # also a Cloud Scheduler job name suffix
_KEYS = frozenset({"name", "cron", "time_zone", "pipeline", "payload", "overlap"})


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: which pipeline runs, when, and whether runs may overlap."""

    name: str
    cron: str
    time_zone: str
    pipeline: str
    payload: dict[str, Any] = field(default_factory=dict)
    overlap: str = "allow"

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def next_after(self, when: datetime) -> datetime:
        """The first tick strictly after `when` (UTC)."""
        local = when.astimezone(self.zone())
        return next(iter(CronSim(self.cron, local))).astimezone(UTC)

    def last_at_or_before(self, when: datetime) -> datetime:
        """The newest tick at or before `when` (UTC)."""
        local = (when + timedelta(seconds=1)).astimezone(self.zone()).replace(microsecond=0)
        return next(iter(CronSim(self.cron, local, reverse=True))).astimezone(UTC)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "time_zone": self.time_zone,
            "pipeline": self.pipeline,
            "payload": self.payload,
            "overlap": self.overlap,
        }


def check_cron(expr: object) -> str:
    """The expression when Cloud Scheduler and cronsim accept it; InvalidInput otherwise."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidInput("cron must be a non-empty string like '*/5 * * * *'", "cron")
    reason = cron_dialect.problem(expr)
    if reason is not None:
        raise InvalidInput(f"invalid cron expression {expr[:60]!r}: {reason}", "cron")
    try:
        CronSim(expr, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidInput(f"invalid cron expression {expr[:60]!r}: {exc}", "cron") from None
    return expr


def check_zone(name: object) -> str:
    """An IANA time zone name zoneinfo knows; InvalidInput otherwise."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidInput("time_zone must be an IANA name such as 'Europe/Paris'", "time_zone")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {name[:60]!r}", "time_zone") from None
    return name


def parse(doc: object, pipelines: Collection[str] | None = None) -> tuple[Schedule, ...]:
    """Every schedule of a decoded file; InvalidInput names the first bad entry."""
    good, problems = parse_each(doc, pipelines)
    if problems:
        raise InvalidInput(next(iter(problems.values())), "schedules")
    return good


def parse_each(
    doc: object, pipelines: Collection[str] | None = None
) -> tuple[tuple[Schedule, ...], dict[str, str]]:
    """The good schedules, and {entry name (or schedules[i]): reason} for each bad one:
    one bad entry must not stop the others' ticks. A name used twice is bad both times
    (which one is meant cannot be told). InvalidInput only when the file is not a list."""
    if not isinstance(doc, dict) or not isinstance(doc.get("schedules"), list):
        raise InvalidInput('a schedules file is {"schedules": [...]}', "schedules")
    good: list[Schedule] = []
    problems: dict[str, str] = {}
    for i, entry in enumerate(doc["schedules"]):
        try:
            good.append(_one(entry, pipelines))
        except InvalidInput as exc:
            name = entry.get("name") if isinstance(entry, dict) else None
            key = name if isinstance(name, str) and name else f"schedules[{i}]"
            problems.setdefault(key, f"schedules[{i}]: {exc.reason}")
    names = [s.name for s in good] + list(problems)
    for dupe in sorted({n for n in names if names.count(n) > 1}):
        problems[dupe] = f"schedule name {dupe!r} is used twice"
    return tuple(s for s in good if s.name not in problems), problems


def _one(entry: object, pipelines: Collection[str] | None) -> Schedule:
    if not isinstance(entry, dict):
        raise InvalidInput("each schedule must be an object", "schedules")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}", "schedules")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"name {name!r} must be lowercase letters, digits and '-' (max 40)", "name"
        )
    pipeline = entry.get("pipeline")
    if not isinstance(pipeline, str) or (pipelines is not None and pipeline not in pipelines):
        raise InvalidInput(f"{name}: pipeline {pipeline!r} is unknown", "pipeline")
    payload = entry.get("payload", {})
    if not isinstance(payload, dict):
        raise InvalidInput(f"{name}: payload must be an object", "payload")
    overlap = entry.get("overlap", "allow")
    if overlap not in OVERLAPS:
        raise InvalidInput(f"{name}: overlap must be one of {', '.join(OVERLAPS)}", "overlap")
    try:
        cron = check_cron(entry.get("cron"))
        zone = check_zone(entry.get("time_zone", DEFAULT_ZONE))
    except InvalidInput as exc:
        raise InvalidInput(f"{name}: {exc.reason}", exc.what) from None
    return Schedule(name, cron, zone, pipeline, payload, str(overlap))


def schedules_file(env: dict[str, str] | None = None) -> Path:
    """$RECLAIM_SCHEDULES_FILE (terraform sets it to the file it made the cron jobs from,
    by its archive path; a relative path is from ROOT, not the working directory); else
    schedules.json in the package of the deployment's pipelines (RECLAIM_PIPELINE_MODULES);
    else the repo's pipelines/schedules.json."""
    env = dict(os.environ) if env is None else env
    if env.get(SCHEDULES_ENV, "").strip():
        return ROOT / env[SCHEDULES_ENV].strip()  # an absolute path stays itself
    return package_file("schedules.json", env.get(_MODULES_ENV, "")) or DEFAULT_FILE


def load(
    path: Path | None = None, pipelines: Collection[str] | None = None
) -> tuple[Schedule, ...]:
    """The schedules of a file (none when it does not exist); InvalidInput on a bad one."""
    return parse(_read(path or schedules_file()), pipelines)


def load_each(
    path: Path | None = None, pipelines: Collection[str] | None = None
) -> tuple[tuple[Schedule, ...], dict[str, str]]:
    """The good schedules of a file and the bad entries' reasons (parse_each)."""
    return parse_each(_read(path or schedules_file()), pipelines)


def _read(path: Path) -> object:
    """The decoded file; an empty list when it does not exist."""
    if not path.exists():
        return {"schedules": []}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path.name} is not readable JSON: {exc}", "schedules") from None
