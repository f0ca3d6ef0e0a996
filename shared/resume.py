"""Where a claimed job resumes when the pipeline may have changed under it (pure).

A job is stamped at its first claim with its pipeline's version; each checkpoint carries
the version it was written by and the names of the stages it completed. A later claim,
perhaps by another revision, decides here (docs/pipelines.md "Deploying a change"):

- no stamp yet: a first claim, from the start of this revision's version (a record made
  before versions resumes at its checkpoint index, as it always did);
- the same version: from the checkpoint;
- another version whose stage names begin with the completed ones, in order: by name;
- else the job's own version, if this revision still registers it (``previous``);
- else, if the job was stamped by a newer revision than this one: not ours to run
  (rollout skew: handed back for a revision that knows it);
- else it ends, failed, retryable from the start: ``PIPELINE_CHANGED``.

The runner (shared.claim.runner) does the I/O; this module only decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from shared.jobs import JobRecord

ResumeKind = Literal["first", "legacy", "same", "by name", "own version", "skew", "end"]

PIPELINE_CHANGED = "PipelineChanged"
"""The error type of a job ended because its pipeline changed beyond resuming."""
PIPELINE_UNAVAILABLE = "PipelineUnavailable"
"""The error type of a job whose code no revision offered within the skew bound."""

_REVISION_NUMBER = re.compile(r"-(\d{5})-[a-z0-9]{3}$")


@dataclass(frozen=True)
class Resume:
    """What to run: `version` from stage index `next_stage`; `reason` when it cannot."""

    kind: ResumeKind
    version: str | None
    next_stage: int
    reason: str = ""

    @property
    def runs(self) -> bool:
        return self.kind not in ("skew", "end")


@dataclass(frozen=True)
class Stamp:
    """What the record says of the code that ran it: read by `stamp_of`."""

    version: str | None
    revision: str | None
    next_stage: int
    completed: tuple[str, ...] | None


def stamp_of(job: JobRecord) -> Stamp:
    """The job's version (its checkpoint's, else its claim's), the revision that stamped
    it, where it resumes and the stage names completed (None when not recorded)."""
    checkpoint = job.get("checkpoint")
    cp = checkpoint if isinstance(checkpoint, dict) else {}
    next_stage = cp.get("next_stage")
    if type(next_stage) is not int or next_stage < 0:
        next_stage = 0
    version = cp.get("version") if next_stage else None
    if not isinstance(version, str):
        version = job.get("pipeline_version")
    revision = job.get("pipeline_revision")
    done = cp.get("completed") if next_stage else []
    completed = None
    if isinstance(done, list) and all(isinstance(n, str) for n in done):
        completed = tuple(done) if len(done) == next_stage else None
    return Stamp(
        version if isinstance(version, str) else None,
        revision if isinstance(revision, str) else None,
        next_stage,
        completed,
    )


def revision_number(name: str | None) -> int | None:
    """The sequence number of a Cloud Run revision name (`claim-00003-xyz` -> 3), which
    grows with every deploy (https://cloud.google.com/run/docs/managing/revisions)."""
    match = _REVISION_NUMBER.search(name or "")
    return int(match.group(1)) if match else None


def newer_than_me(job_revision: str | None, mine: str | None) -> bool:
    """True unless the job's stamp is provably from this revision or an older one: an
    unknown order is treated as skew (handed back, bounded), never as a reason to end."""
    theirs, own = revision_number(job_revision), revision_number(mine)
    if theirs is None or own is None:
        return job_revision != mine
    return theirs > own


def decide(
    stamp: Stamp,
    current: str,
    registered: Mapping[str, Sequence[str]],
    *,
    revision: str | None,
    pipeline: str = "",
) -> Resume:
    """Where the job resumes. `current` is this revision's version for the job,
    `registered` every version it still registers -> its stage names (current included),
    `revision` this instance's revision (K_REVISION)."""
    names = list(registered.get(current, ()))
    if stamp.version is None:
        if stamp.next_stage == 0:
            return Resume("first", current, 0)
        return Resume("legacy", current, min(stamp.next_stage, len(names)))
    if stamp.version == current:
        return Resume("same", current, min(stamp.next_stage, len(names)))
    done = stamp.completed
    if done is None and stamp.version in registered:
        done = tuple(registered[stamp.version][: stamp.next_stage])
    if done is not None and list(done) == names[: len(done)]:
        return Resume("by name", current, len(done))
    if stamp.version in registered:
        own = registered[stamp.version]
        return Resume("own version", stamp.version, min(stamp.next_stage, len(own)))
    shown = ", ".join(done) if done is not None else f"{stamp.next_stage} stage(s)"
    if newer_than_me(stamp.revision, revision):
        return Resume(
            "skew",
            None,
            stamp.next_stage,
            f"pipeline {pipeline!r} version {stamp.version} (stamped by revision "
            f"{stamp.revision}) is not known to revision {revision}",
        )
    return Resume(
        "end",
        None,
        0,
        f"pipeline {pipeline!r} changed under this job: its completed stages ({shown}) of "
        f"version {stamp.version} are not the first stages of version {current} "
        f"({', '.join(names)}), and this revision no longer registers {stamp.version}; "
        "retry the job to run it from the start",
    )
