"""POST /jobs, validated whole before the first write (pure: no cloud call).

A bad job in a batch rejects the batch with nothing written; every problem is listed
(InvalidSubmission). The features add their keys and fields (Feature.submit_keys,
Feature.parse); shared.submission.create writes what this accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shared import records, timing
from shared.config import Settings
from shared.errors import InvalidInput, InvalidSubmission, UnknownPipeline
from shared.features import workflow_graph as graph
from shared.jobs import JsonObject
from shared.pipelines import get_pipeline, pipeline_names
from shared.seams import Feature

JOB_KEYS = frozenset({"pipeline", "payload", "id", "batch_id", "max_attempts"})
"""A job's own keys; the features add theirs (Feature.submit_keys)."""
BATCH_KEYS = frozenset({"batch_id", "jobs", "on_complete"})
CALLBACK_KEYS = frozenset({"pipeline", "payload"})
MAX_ATTEMPTS = 100
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_PROBLEMS = 10
"""Problems a refusal lists (the first is its reason)."""


@dataclass(frozen=True)
class JobSpec:
    """One validated job of a request."""

    pipeline: str
    payload: JsonObject
    client_id: str | None = None
    batch_id: str | None = None
    max_attempts: int | None = None
    times: timing.TimeSpec = dataclasses.field(default_factory=timing.TimeSpec)  # time
    fields: tuple[tuple[str, Any], ...] = ()  # what the features' parse gave, for the record
    depends_on: tuple[str, ...] = ()  # workflows: parent ids (docs/workflows.md)
    on_parent_failure: str | None = None
    with_callback: bool = False  # workflows: a member of a batch with on_complete


@dataclass(frozen=True)
class Submission:
    """A validated request: one job, or a batch sharing one batch id."""

    jobs: tuple[JobSpec, ...]
    batch_id: str | None
    is_batch: bool
    on_complete: JsonObject | None = None  # workflows: the batch's callback {pipeline, payload}


def decode_body(raw: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys (they hide a client bug)."""
    try:
        return json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_no_dupes)
    except RecursionError:
        raise InvalidSubmission("malformed JSON: nested too deeply") from None
    except InvalidSubmission:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidSubmission(f"malformed JSON: {exc}") from None


def parse_submission(
    body: Any,
    settings: Settings,
    features: Sequence[Feature],
    *,
    pipelines: Collection[str] | None = None,
) -> Submission:
    """Validate a POST /jobs body completely, with the keys of the given features;
    InvalidSubmission lists every problem."""
    known = _Known(set(pipeline_names() if pipelines is None else pipelines), tuple(features))
    if not isinstance(body, dict):
        raise InvalidSubmission(f"body must be a JSON object, not {_kind(body)}")
    if "jobs" in body:
        return _parse_batch(body, settings, known)
    problems: list[str] = []
    spec = _parse_job(body, "", known, problems)
    _raise_if(problems)
    assert spec is not None
    return Submission(jobs=(spec,), batch_id=spec.batch_id, is_batch=False)


@dataclass(frozen=True)
class _Known:
    """What a request is checked against: the pipelines and the features."""

    pipelines: set[str]
    features: tuple[Feature, ...]

    @property
    def keys(self) -> frozenset[str]:
        return JOB_KEYS.union(*(f.submit_keys for f in self.features))


def _parse_batch(body: dict[str, Any], settings: Settings, known: _Known) -> Submission:
    problems: list[str] = []
    unknown = sorted(set(body) - BATCH_KEYS)
    if unknown:
        problems.append(f"unknown key(s) {names_text(unknown)}; a batch allows batch_id and jobs")
    batch_id = _optional_id(body, "batch_id", "", problems, records.validate_batch_id)
    jobs = body["jobs"]
    if not isinstance(jobs, list):
        raise InvalidSubmission(f"jobs must be a list, not {_kind(jobs)}", problems)
    if not jobs:
        problems.append("jobs must not be empty")
    if len(jobs) > settings.max_batch_jobs:
        raise InvalidSubmission(
            f"a batch may hold at most {settings.max_batch_jobs} jobs, got {len(jobs)}"
        )
    specs: list[JobSpec] = []
    for i, job in enumerate(jobs):
        spec = _parse_job(job, f"jobs[{i}].", known, problems)
        if spec is None:
            continue
        if spec.batch_id is not None and batch_id is not None and spec.batch_id != batch_id:
            problems.append(f"jobs[{i}].batch_id {spec.batch_id!r} differs from {batch_id!r}")
        elif spec.batch_id is not None and batch_id is None:
            problems.append(f"jobs[{i}].batch_id: put batch_id on the batch, not on a job")
        specs.append(spec)
    _check_duplicate_ids(specs, problems)
    on_complete = _parse_on_complete(body.get("on_complete"), known, problems)
    _check_cycles(specs, problems)
    _raise_if(problems)
    batch_id = batch_id or _batch_id_for(specs)
    specs = [
        dataclasses.replace(s, batch_id=batch_id, with_callback=on_complete is not None)
        for s in specs
    ]
    return Submission(jobs=tuple(specs), batch_id=batch_id, is_batch=True, on_complete=on_complete)


def _parse_on_complete(value: Any, known: _Known, problems: list[str]) -> JsonObject | None:
    """A batch's callback: a pipeline and its payload, checked like a job's."""
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append(f"on_complete must be a JSON object, not {_kind(value)}")
        return None
    unknown = sorted(set(value) - CALLBACK_KEYS)
    if unknown:
        problems.append(
            f"on_complete: unknown key(s) {names_text(unknown)}; allowed: pipeline, payload"
        )
        return None
    spec = _parse_job(value, "on_complete.", known, problems)
    return None if spec is None else {"pipeline": spec.pipeline, "payload": spec.payload}


def _check_cycles(specs: list[JobSpec], problems: list[str]) -> None:
    """A dependency cycle among the jobs of one submit is a 400 naming its jobs."""
    edges = {s.client_id: s.depends_on for s in specs if s.client_id is not None}
    looped = graph.cycles(edges)
    if looped:
        problems.append(f"depends_on has a cycle through {names_text(looped)}")


def _parse_job(job: Any, where: str, known: _Known, problems: list[str]) -> JobSpec | None:
    """A JobSpec, or None with the reasons appended to problems."""
    if not isinstance(job, dict):
        problems.append(f"{where.rstrip('.') or 'body'} must be a JSON object, not {_kind(job)}")
        return None
    before = len(problems)
    allowed = known.keys
    unknown = sorted(set(job) - allowed)
    if unknown:
        problems.append(
            f"{where}unknown key(s) {names_text(unknown)}; allowed: {names_text(allowed)}"
        )
    pipeline = job.get("pipeline")
    if not isinstance(pipeline, str):
        problems.append(
            f"{where}pipeline must be a string naming one of {names_text(known.pipelines)}"
        )
    elif pipeline not in known.pipelines:
        problems.append(
            f"{where}pipeline {pipeline[:60]!r} is unknown; known: {names_text(known.pipelines)}"
        )
    payload = job.get("payload", {})
    if not isinstance(payload, dict):
        problems.append(f"{where}payload must be a JSON object, not {_kind(payload)}")
    else:
        _check_payload(payload, pipeline, known.pipelines, where, problems)
    client_id = _optional_id(job, "id", where, problems, records.validate_job_id)
    batch_id = _optional_id(job, "batch_id", where, problems, records.validate_batch_id)
    max_attempts = job.get("max_attempts")
    if max_attempts is not None and not (
        type(max_attempts) is int and 1 <= max_attempts <= MAX_ATTEMPTS
    ):
        problems.append(f"{where}max_attempts must be an integer from 1 to {MAX_ATTEMPTS}")
    times = timing.parse_fields(job, where, problems)  # time (resolved at creation)
    fields = _feature_fields(job, where, known.features, problems)
    depends_on = graph.parse_depends_on(job.get("depends_on"), where, problems)  # workflows
    on_parent_failure = graph.parse_parent_failure(job, where, problems)
    if client_id is not None and client_id in depends_on:
        problems.append(f"{where}depends_on has a cycle through {client_id}")
    if len(problems) > before:
        return None
    return JobSpec(
        str(pipeline),
        payload,
        client_id,
        batch_id,
        max_attempts,
        times,
        fields,
        depends_on,
        on_parent_failure,
    )


def _feature_fields(
    job: dict[str, Any], where: str, features: Sequence[Feature], problems: list[str]
) -> tuple[tuple[str, Any], ...]:
    """The record fields of the features that parse their own keys, in table order."""
    fields: dict[str, Any] = {}
    for feature in features:
        if feature.parse is not None and feature.submit_keys & job.keys():
            fields.update(feature.parse(job, where, problems))
    return tuple(fields.items())


def _check_payload(
    payload: dict[str, Any], pipeline: Any, known: set[str], where: str, problems: list[str]
) -> None:
    problem = records.json_problem(payload, records.MAX_PAYLOAD_DEPTH, f"{where}payload")
    if problem is not None:  # 1e400 (read as inf), or nesting the runner cannot copy
        problems.append(problem)
        return
    try:
        size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    except UnicodeEncodeError:
        problems.append(f"{where}payload has text that is not valid Unicode (lone surrogate)")
        return
    if size > MAX_PAYLOAD_BYTES:
        problems.append(f"{where}payload is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}")
        return
    if not isinstance(pipeline, str) or pipeline not in known:
        return
    try:
        get_pipeline(pipeline).check_payload(payload)
    except UnknownPipeline:
        return  # a test passed its own names; nothing to check the payload against
    except (ValueError, TypeError, LookupError) as exc:  # the validator's verdict on odd data
        problems.append(f"{where}payload rejected by pipeline {pipeline!r}: {exc}")


def _optional_id(
    obj: dict[str, Any],
    key: str,
    where: str,
    problems: list[str],
    check: Callable[[object], str],
) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    try:
        return check(value)
    except InvalidInput as exc:
        problems.append(f"{where}{key}: {exc.reason}")
        return None


def _check_duplicate_ids(specs: list[JobSpec], problems: list[str]) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.client_id is None:
            continue
        if spec.client_id in seen:
            problems.append(f"id {spec.client_id!r} appears more than once in the batch")
        seen.add(spec.client_id)


def _batch_id_for(specs: list[JobSpec]) -> str:
    """Derived from the client ids when every job has one, so replaying the same
    batch without a batch_id lands in the same batch; random otherwise."""
    ids = [s.client_id for s in specs]
    if ids and all(ids):
        digest = hashlib.sha256("\n".join(sorted(str(i) for i in ids)).encode()).hexdigest()
        return "b-" + digest[:32]
    return "b-" + records.new_job_id()


def _raise_if(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvalidSubmission(problems[0] + more, problems[:MAX_PROBLEMS])


def _reject_constant(name: str) -> Any:
    raise InvalidSubmission(f"malformed JSON: {name} is not a JSON number")


def _no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidSubmission(f"malformed JSON: duplicate key {key[:60]!r}")
        out[key] = value
    return out


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), "a value")


def names_text(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "(none)"
