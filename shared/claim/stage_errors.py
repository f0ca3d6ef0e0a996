"""What a stage's exception leaves behind: its traceback, the stage's own frames first and
trimmed to a bounded size, and where in the pipeline's code it was raised.

The record keeps the traceback in its error (`error.traceback`, `error.where`), so GET
/jobs/<id>, `reclaim status`, the client's Job and the dashboard show it, and the runner
logs one line whose Cloud Logging source location is that place in the pipeline's code
(`logging.googleapis.com/sourceLocation`, with the traceback as `stack_trace`, the field
Error Reporting reads: https://cloud.google.com/logging/docs/structured-logging,
https://cloud.google.com/error-reporting/docs/formatting-error-messages).

How it is cut to size (TRACEBACK_LIMIT characters, so a record stays far below its size
limit whatever a stage raises):
- the frames above the stage (reclaim's runner, which called it) are left out: the first
  frame is the stage function;
- a stage's frames come first in the budget: when the text is too long, runs of frames in
  libraries (the standard library, site-packages, reclaim's own machinery) are folded
  into one line each; then, if it is still too long, the stage's middle frames, keeping
  the outermost (the stage) and the innermost (nearest the raise); then the exception's
  message is cut;
- a chained exception (`raise ... from`, or raised while handling another) adds its
  type and message on one line, not its frames.
"""

from __future__ import annotations

import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path

TRACEBACK_LIMIT = 8000
"""Characters of traceback a record keeps (error.traceback; docs/pipelines.md)."""
MESSAGE_LIMIT = 1000
"""Characters of the exception's own line kept when the frames alone fill the budget."""

_SHARED = Path(__file__).resolve().parents[1]  # reclaim's shared/
_USER_DIRS = (_SHARED / "pipelines",)  # the built-in pipelines are pipeline code too
_PYTHON_DIRS = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
_LIBRARY_DIRS = (*(Path(p).resolve() for p in _PYTHON_DIRS), _SHARED, _SHARED.parent / "reclaim")
_RUNNER_DIRS = (_SHARED / "claim",)
_LIBRARY_FILES = (_SHARED / "pipelines" / "base.py",)


@dataclass(frozen=True)
class StageTrace:
    """A stage's exception as the record and the log keep it."""

    text: str
    """The traceback, trimmed to TRACEBACK_LIMIT."""
    where: dict[str, object] | None
    """{"file", "line", "function"} of the innermost frame in pipeline code (else the
    innermost frame): Cloud Logging's sourceLocation."""


def describe(exc: BaseException) -> StageTrace:
    """The traceback of a stage's exception (see the module doc for how it is cut)."""
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    frames = list(te.stack)
    while frames and _under(frames[0].filename, _RUNNER_DIRS):
        frames.pop(0)  # reclaim's runner, which called the stage
    user = [not _library(f.filename) for f in frames]
    mine = [f for f, u in zip(frames, user, strict=True) if u]
    innermost = mine[-1] if mine else (frames[-1] if frames else None)
    where: dict[str, object] | None = (
        None
        if innermost is None
        else {"file": innermost.filename, "line": innermost.lineno, "function": innermost.name}
    )
    tail = "".join(te.format_exception_only())
    chained = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if chained is not None:
        first = "".join(traceback.format_exception_only(chained)).strip()
        tail += f"(raised from {first[:MESSAGE_LIMIT]})\n"
    return StageTrace(_fit(frames, user, tail), where)


def _fit(frames: list[traceback.FrameSummary], user: list[bool], tail: str) -> str:
    head = "Traceback (most recent call last):\n"
    blocks = ["".join(traceback.StackSummary.from_list([f]).format()) for f in frames]
    text = head + "".join(blocks) + tail
    if len(text) <= TRACEBACK_LIMIT:
        return text
    shown = _fold_libraries(blocks, user)
    text = head + "".join(shown) + tail
    if len(text) > TRACEBACK_LIMIT:
        tail = tail if len(tail) <= MESSAGE_LIMIT else tail[:MESSAGE_LIMIT] + "...\n"
        shown = _keep_ends(shown, TRACEBACK_LIMIT - len(head) - len(tail))
        text = head + "".join(shown) + tail
    return text[:TRACEBACK_LIMIT]


def _fold_libraries(blocks: list[str], user: list[bool]) -> list[str]:
    """Each run of library frames as one line."""
    out: list[str] = []
    run = 0
    for block, mine in zip(blocks, user, strict=True):
        if mine:
            if run:
                out.append(_folded(run))
                run = 0
            out.append(block)
        else:
            run += 1
    if run:
        out.append(_folded(run))
    return out


def _keep_ends(blocks: list[str], budget: int) -> list[str]:
    """The outermost block and as many innermost ones as fit, the middle folded."""
    if not blocks:
        return blocks
    first, rest = blocks[0], blocks[1:]
    kept: list[str] = []
    used = len(first) + 60  # the fold line
    for block in reversed(rest):
        if used + len(block) > budget:
            break
        kept.insert(0, block)
        used += len(block)
    left = len(rest) - len(kept)
    middle = [f"  ... {left} more frame(s) left out ...\n"] if left else []
    return [first[: max(budget - 60, 0)], *middle, *kept]


def _folded(count: int) -> str:
    return f"  ... {count} frame(s) in libraries ...\n"


def _library(filename: str) -> bool:
    path = _resolved(filename)
    if path is None:
        return True  # <frozen ...>, <string>: not a file of the pipeline's
    if path in _LIBRARY_FILES:
        return True
    if any(path.is_relative_to(d) for d in _USER_DIRS):
        return False
    return any(path.is_relative_to(d) for d in _LIBRARY_DIRS)


def _under(filename: str, dirs: tuple[Path, ...]) -> bool:
    path = _resolved(filename)
    return path is not None and any(path.is_relative_to(d) for d in dirs)


def _resolved(filename: str) -> Path | None:
    if filename.startswith("<"):
        return None
    try:
        return Path(filename).resolve()
    except (OSError, RuntimeError):
        return None
