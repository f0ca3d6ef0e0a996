"""The pure half of workflows: field checks, cycles, names. No I/O, no cloud import.

A submit's ``depends_on`` edges and a batch's ``on_complete`` are checked here before
anything is written (shared.submission.create), and the index-object names the storage half
(shared.features.workflows) uses are built here so both halves agree on one layout:

  workflows/seal/<batch>.json          the batch's on_complete spec (create-only)
  workflows/open/<batch>/<job>         a member of a batch with on_complete not yet ended
  workflows/parents/<parent>           the parent has children (written before the first
                                       edge): a job without it ends without listing
  workflows/children/<parent>/<child>  reverse edge: who to release when a parent ends
  workflows/waiting/<child>/<parent>   a parent the child still waits for
  workflows/open/<batch>/upload-batch-open   an upload batch not yet closed (its hold)
  workflows/closed/<batch>             an upload batch's closing object arrived
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from shared import records
from shared.errors import InvalidInput

PREFIX = "workflows/"
MAX_PARENTS = 100
"""Most parents one job may name (each costs a marker at submit and a read at release)."""
PARENT_FAILURE_POLICIES = ("cancel", "run")
DEFAULT_PARENT_FAILURE = "cancel"
CALLBACK_BY = "workflow"
"""The ``by`` of a cancel a failed parent caused."""
SUBMIT_KEYS = frozenset({"depends_on", "on_parent_failure"})
"""A job's workflow keys at submit (a batch's on_complete is a batch key)."""
VIEW_FIELDS = ("depends_on", "on_parent_failure", "parent_failure", "callback_of")
"""A job's workflow fields in its view, only when it has them."""
RECORD_FIELDS = (*VIEW_FIELDS, "batch_has_callback")


def seal_name(batch_id: str) -> str:
    return f"{PREFIX}seal/{records.validate_batch_id(batch_id)}.json"


OPEN_ROOT = f"{PREFIX}open/"


def parse_open_name(name: str) -> tuple[str, str] | None:
    """(batch id, job id) of an open marker's name, or None for anything else."""
    parts = name[len(OPEN_ROOT) :].split("/") if name.startswith(OPEN_ROOT) else []
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def open_prefix(batch_id: str) -> str:
    return f"{PREFIX}open/{records.validate_batch_id(batch_id)}/"


def open_name(batch_id: str, job_id: str) -> str:
    return open_prefix(batch_id) + records.validate_job_id(job_id)


HOLD_ID = "upload-batch-open"
"""The pseudo-member that holds an upload batch open until its closing object arrives
(shared.submission.uploads): its open marker counts like a member's, and only that object
removes it (the sweep's repair of stray markers leaves it alone)."""


def hold_name(batch_id: str) -> str:
    return open_name(batch_id, HOLD_ID)


def closed_name(batch_id: str) -> str:
    return f"{PREFIX}closed/{records.validate_batch_id(batch_id)}"


def parent_mark_name(parent: str) -> str:
    return f"{PREFIX}parents/{records.validate_job_id(parent)}"


def children_prefix(parent: str) -> str:
    return f"{PREFIX}children/{records.validate_job_id(parent)}/"


def child_name(parent: str, child: str) -> str:
    return children_prefix(parent) + records.validate_job_id(child)


def waiting_prefix(child: str) -> str:
    return f"{PREFIX}waiting/{records.validate_job_id(child)}/"


def waiting_name(child: str, parent: str) -> str:
    return waiting_prefix(child) + records.validate_job_id(parent)


def last_segment(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def callback_id(batch_id: str) -> str:
    """Deterministic: every finisher of a batch names the same callback job, so a
    create-only write makes exactly one (racing finishers and repeats find it there)."""
    return "cb-" + hashlib.sha256(batch_id.encode("utf-8")).hexdigest()[:40]


def parse_depends_on(value: Any, where: str, problems: list[str]) -> tuple[str, ...]:
    """The parent ids of one job, or () with the reasons appended to problems."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        problems.append(f"{where}depends_on must be a non-empty list of job ids")
        return ()
    if len(value) > MAX_PARENTS:
        problems.append(f"{where}depends_on names {len(value)} jobs; at most {MAX_PARENTS}")
        return ()
    parents: list[str] = []
    for i, item in enumerate(value):
        try:
            parents.append(records.validate_job_id(item, "parent id"))
        except InvalidInput as exc:
            problems.append(f"{where}depends_on[{i}]: {exc.reason}")
    if len(set(parents)) != len(parents):
        problems.append(f"{where}depends_on names a job more than once")
    return tuple(parents) if len(parents) == len(value) else ()


def parse_parent_failure(job: Mapping[str, Any], where: str, problems: list[str]) -> str | None:
    """on_parent_failure: only beside depends_on; cancel (default) or run."""
    value = job.get("on_parent_failure")
    if value is None:
        return None
    if value not in PARENT_FAILURE_POLICIES:
        problems.append(
            f"{where}on_parent_failure must be one of {', '.join(PARENT_FAILURE_POLICIES)}"
        )
        return None
    if job.get("depends_on") is None:
        problems.append(f"{where}on_parent_failure needs depends_on")
        return None
    return str(value)


def cycles(edges: Mapping[str, Sequence[str]]) -> list[str]:
    """Ids on a dependency cycle among `edges` (child -> parents), sorted; [] if none.

    Only edges inside one submit can close a cycle: an existing job's parents were fixed
    when it was created, before any job of this submit existed.
    """
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(edges, white)
    on_cycle: set[str] = set()
    for root in edges:
        if color[root] != white:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        color[root] = grey
        while stack:
            node, i = stack[-1]
            parents = [p for p in edges.get(node, ()) if p in edges]
            if i < len(parents):
                stack[-1] = (node, i + 1)
                nxt = parents[i]
                if color[nxt] == grey:  # a back edge: the path from nxt to node is a cycle
                    on_cycle.update(path[path.index(nxt) :])
                elif color[nxt] == white:
                    color[nxt] = grey
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                color[node] = black
                stack.pop()
                path.pop()
    return sorted(on_cycle)


def parent_verdict(
    parents: Mapping[str, str | None], policy: str
) -> tuple[str, dict[str, str] | None]:
    """What a waiting child does, given its parents' statuses (None: unreadable/missing).

    Returns ("wait" | "release" | "cancel", the parent that failed or None). A failed or
    cancelled parent cancels a "cancel" child at once; a "run" child runs once every
    parent is terminal, its record naming the first parent that failed.
    """
    failed = next(
        (
            {"parent": p, "status": str(s)}
            for p, s in sorted(parents.items())
            if s in ("failed", "cancelled")
        ),
        None,
    )
    if failed is not None and policy != "run":
        return "cancel", failed
    if all(s in ("done", "failed", "cancelled") for s in parents.values()):
        return "release", failed
    return "wait", None
