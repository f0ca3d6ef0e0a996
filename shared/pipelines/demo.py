"""The ``demo`` pipeline: N stages with per-stage sleeps and injected failures.

Payload (all optional): ``stages`` (1..50, default 3); ``sleep_s`` (seconds,
one number for every stage or a list per stage); ``fail_at`` (a stage index or
a list, 0-based); ``fail_attempts`` (attempts that fail there: attempt numbers
1..k fail, later ones pass; default: all fail); ``permanent`` (the injected
failure is a PermanentError); ``output`` (each stage writes stage-<i>.json);
``block`` (each sleep is one blocking call that never calls ``ctx.check()``, as
a stage stuck in one long library call: only the heartbeat thread keeps the job).
Sleeps are otherwise taken in small steps with ``ctx.check()`` so a lost job stops fast.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from shared.pipelines.base import PermanentError, Pipeline, Stage, StageContext

MAX_STAGES = 50
MAX_SLEEP_S = 3600.0
_STEP_S = 0.05


def _number(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be between {lo:g} and {hi:g}, got {value!r}")
    return float(value)


def _index_list(value: Any, what: str, n: int) -> set[int]:
    items = value if isinstance(value, list) else [value]
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < n:
            raise ValueError(f"{what} must be stage indexes in 0..{n - 1}, got {item!r}")
        out.add(item)
    return out


def _parse(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The demo's options, validated; ValueError names the bad field."""
    if not isinstance(payload, Mapping):
        raise ValueError("payload must be an object")
    n = int(_number(payload.get("stages", 3), "stages", 1, MAX_STAGES))
    if payload.get("stages", 3) != n:
        raise ValueError("stages must be a whole number")
    sleeps_raw = payload.get("sleep_s", 0)
    if isinstance(sleeps_raw, list):
        if len(sleeps_raw) > n:
            raise ValueError(f"sleep_s lists {len(sleeps_raw)} values for {n} stages")
        sleeps = [_number(s, "sleep_s", 0, MAX_SLEEP_S) for s in sleeps_raw]
        sleeps += [0.0] * (n - len(sleeps))
    else:
        sleeps = [_number(sleeps_raw, "sleep_s", 0, MAX_SLEEP_S)] * n
    fail_at = _index_list(payload["fail_at"], "fail_at", n) if "fail_at" in payload else set()
    fail_attempts = payload.get("fail_attempts")
    if fail_attempts is not None:
        fail_attempts = int(_number(fail_attempts, "fail_attempts", 0, 1000))
    for flag in ("permanent", "output", "block"):
        if not isinstance(payload.get(flag, False), bool):
            raise ValueError(f"{flag} must be true or false")
    return {
        "n": n,
        "sleeps": sleeps,
        "fail_at": fail_at,
        "fail_attempts": fail_attempts,
        "permanent": bool(payload.get("permanent", False)),
        "output": bool(payload.get("output", False)),
        "block": bool(payload.get("block", False)),
    }


def validate(payload: Mapping[str, Any]) -> None:
    """Reject a payload the demo cannot run (submit answers 400 with the reason)."""
    _parse(payload)


def _sleep(ctx: StageContext, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        ctx.check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(_STEP_S, left))


def _stage(index: int, opts: dict[str, Any]) -> Stage:
    def run(ctx: StageContext) -> None:
        if opts["block"]:
            time.sleep(opts["sleeps"][index])  # one long call, no check(): rule 3's case
        else:
            with ctx.span("sleep", seconds=opts["sleeps"][index]):  # a span of its own work
                _sleep(ctx, opts["sleeps"][index])
        limit = opts["fail_attempts"]
        if index in opts["fail_at"] and (limit is None or ctx.attempt <= limit):
            message = f"injected failure at stage {index} (attempt {ctx.attempt})"
            raise PermanentError(message) if opts["permanent"] else RuntimeError(message)
        done = {
            "stage": index,
            "attempt": ctx.attempt,
            **({"blocked": True} if opts["block"] else {}),
        }
        ctx.state.setdefault("completed", []).append(done)
        ctx.progress(index + 1, opts["n"], f"stage {index + 1} of {opts['n']} done")
        if opts["output"]:
            body = {"job_id": ctx.job_id, "stage": index, "attempt": ctx.attempt}
            ctx.state.setdefault("outputs", []).append(
                ctx.outputs.write(f"stage-{index}.json", body)
            )
        if index == opts["n"] - 1:
            ctx.result.update(
                stages=opts["n"],
                attempt=ctx.attempt,
                completed=ctx.state.get("completed", []),
                outputs=ctx.state.get("outputs", []),
            )

    run.__name__ = f"stage_{index}"
    return run


def plan(payload: Mapping[str, Any]) -> Sequence[tuple[str, Stage]]:
    """One stage per requested index; a bad payload at run time is permanent."""
    try:
        opts = _parse(payload)
    except ValueError as exc:
        raise PermanentError(f"bad demo payload: {exc}") from None
    return [(f"stage-{i}", _stage(i, opts)) for i in range(opts["n"])]


PIPELINE = Pipeline(
    name="demo",
    plan=plan,
    validate=validate,
    doc="N sleeping stages with injected failures, for demos and tests.",
)
