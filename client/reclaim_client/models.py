"""What the API answers, typed (each keeps the whole answer in `raw`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENDED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class Progress:
    """A stage's own report: `done` of `total` units, and a message."""

    done: float
    total: float | None
    message: str | None

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


@dataclass(frozen=True)
class Job:
    """A job as GET /jobs/<id> shows it (or its summary in a list)."""

    id: str
    status: str
    pipeline: str | None = None
    stage: str | None = None
    attempts: int = 0
    generation: int | None = None
    error: dict[str, Any] | None = None
    """The error of the attempt the job is at or ended with: `type`, `message`, `kind`
    ("retryable", "out of attempts", "permanent", "expired"), a stage's `traceback` and
    `where` (file, line, function); None when it has none of its own."""
    result: Any = None
    progress: Progress | None = None
    tags: tuple[str, ...] = ()
    previous_error: dict[str, Any] | None = None
    """On a pending job: an earlier attempt's error (a retry is on its way)."""
    paused: bool = False
    """A queued job of a paused pipeline: it waits for the resume."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ended(self) -> bool:
        """done, failed or cancelled: nothing moves it but a retry."""
        return self.status in ENDED

    @property
    def traceback(self) -> str | None:
        """The failing stage's traceback (its own frames first), if its error has one."""
        trace = (self.error or {}).get("traceback")
        return trace if isinstance(trace, str) else None

    # --- waits (docs/waiting.md): a parked job's reason and links, as the server shows them

    @property
    def waiting_for(self) -> str | None:
        """What a parked job waits for ("sleeping until ...", "waiting for its waitpoint
        ...", "waiting for 3 of 10 children"), None when it is not parked."""
        shown = self.raw.get("waiting_for")
        return str(shown) if shown else None

    @property
    def waitpoint_url(self) -> str | None:
        """The completion URL of the waitpoint it is parked on, if any."""
        park = self.raw.get("park")
        return park.get("url") if isinstance(park, dict) and park.get("kind") == "token" else None

    @property
    def parent_id(self) -> str | None:
        """A fan-out's child: its parent's id."""
        parent = self.raw.get("parent_job")
        return str(parent.get("id")) if isinstance(parent, dict) else None

    @property
    def children_url(self) -> str | None:
        """A fan-out's parent: its children, as a batch (GET /batches/<fan-out>)."""
        shown = self.raw.get("children_url")
        return str(shown) if shown else None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        shown = body.get("progress")
        progress = (
            Progress(shown.get("done", 0), shown.get("total"), shown.get("message"))
            if isinstance(shown, dict)
            else None
        )
        return cls(
            id=str(body.get("id")),
            status=str(body.get("status")),
            pipeline=body.get("pipeline"),
            stage=body.get("stage"),
            attempts=int(body.get("attempts") or 0),
            generation=body.get("generation"),
            error=body.get("error"),
            result=body.get("result"),
            progress=progress,
            tags=tuple(str(t) for t in body.get("tags") or ()),
            previous_error=body.get("previous_error"),
            paused=bool(body.get("paused")),
            raw=body,
        )


@dataclass(frozen=True)
class Output:
    """One committed output of a job (GET /jobs/<id>/outputs)."""

    name: str
    attempt: int
    size: int
    content_type: str | None
    url: str
    """Its download path on the API (Client.download fetches it)."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Output:
        return cls(
            name=str(body.get("name")),
            attempt=int(body.get("attempt") or 0),
            size=int(body.get("size") or 0),
            content_type=body.get("content_type"),
            url=str(body.get("url")),
            raw=body,
        )


@dataclass(frozen=True)
class Submitted:
    """What a submit answered: the jobs, and whether any was new."""

    jobs: list[Job]
    batch_id: str | None
    created: int
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class BatchProgress:
    """A batch's counts from its markers (GET /batches/<id>/progress)."""

    batch_id: str
    total: int
    pending: int
    done: int
    failed: int
    cancelled: int
    finished: bool
    fraction: float

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> BatchProgress:
        fields = cls.__dataclass_fields__
        return cls(**{k: body[k] for k in fields})


@dataclass(frozen=True)
class BulkCount:
    """How many jobs a bulk action would move, the token that confirms it (once, within
    15 minutes, for exactly these jobs) and the selection it was counted for."""

    action: str
    matching: int
    jobs: list[str]
    confirm: str
    selection: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BulkDone:
    """What one confirmed bulk request did (`remaining`: count and confirm again)."""

    action: str
    matching: int
    acted: list[str]
    skipped: list[str]
    errors: dict[str, str]
    remaining: int
