"""The reclaim CLI's commands: each reads its arguments, calls the library, prints.

The dead-letter command lives in reclaim.cli.dlq; shared setup in reclaim.cli.context.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from reclaim.cli import flow as cli_flow
from reclaim.cli import render as cli_render
from reclaim.cli.context import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, CliError, Context
from shared.jobs import MEMBER_UNREADABLE, JobStatus

# ----------------------------------------------------------------------- submit


def _read_payloads(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The payload(s) to submit: --payload, each line of --from, or {}."""
    if args.from_file is None:
        return [_json_object(args.payload, "--payload")] if args.payload else [{}]
    if args.job_id:
        raise CliError("--id names one job; it cannot be used with --from")
    try:
        if args.from_file == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args.from_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
    except OSError as exc:
        raise CliError(f"cannot read {args.from_file}: {exc.strerror or exc}") from None
    payloads = [
        _json_object(line, f"{args.from_file} line {n}")
        for n, line in enumerate(lines, 1)
        if line.strip()
    ]
    if not payloads:
        raise CliError(f"{args.from_file} holds no jobs (one JSON object per line)")
    return payloads


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError(f"{where} must be a JSON object, not {type(value).__name__}")
    return value


def submission_body(args: argparse.Namespace, payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The POST /jobs body these arguments mean: one job, or a batch for --from."""
    job: dict[str, Any] = {"pipeline": args.pipeline}
    if args.max_attempts is not None:
        job["max_attempts"] = args.max_attempts
    if getattr(args, "tags", None):
        job["tags"] = list(args.tags)
    for key, value in _time_fields(args).items():  # time
        job[key] = value
    if args.from_file is None:
        body = {**job, "payload": payloads[0]}
        if args.job_id:
            body["id"] = args.job_id
        if args.batch:
            body["batch_id"] = args.batch
        return body
    batch: dict[str, Any] = {"jobs": [{**job, "payload": p} for p in payloads]}
    if args.batch:
        batch["batch_id"] = args.batch
    return batch


def _time_fields(args: argparse.Namespace) -> dict[str, Any]:
    """--at/--in/--ttl/--timeout/--unique-key as POST /jobs fields (validated by submit)."""
    pairs = {
        "run_at": getattr(args, "at", None),
        "delay_seconds": getattr(args, "delay", None),
        "ttl_seconds": getattr(args, "ttl", None),
        "timeout_seconds": getattr(args, "timeout", None),
        "unique_key": getattr(args, "unique_key", None),
    }
    return {k: v for k, v in pairs.items() if v is not None}


def cmd_schedules(args: argparse.Namespace) -> int:
    """The declared schedules, each with its last run and next tick (docs/time.md)."""
    from shared.cron import schedule_view
    from shared.errors import InvalidInput

    ctx = Context(args)
    queue = ctx.queue()
    try:
        view = schedule_view.overview(queue.store, queue.clock())
    except InvalidInput as exc:
        raise CliError(f"the schedules file is invalid: {exc.reason}") from None
    lines = []
    for s in view["schedules"]:
        last = s["last_run"]
        shown = f"{last['tick']} {last['job_id']} ({last['status']})" if last else "never"
        lines.append(
            f"{s['name']}  {s['cron']} {s['time_zone']}  {s['pipeline']}  overlap={s['overlap']}"
            f"\n  last: {shown}\n  next: {s['next_run']}"
        )
    ctx.emit(view, "\n".join(lines) or "no schedules declared")
    bad = schedule_view.problems()  # left out above (and by submit's ticks): say so
    if bad:
        raise CliError(f"the schedules file is invalid: {'; '.join(bad.values())}")
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    """Create the job(s) exactly as POST /jobs does: through the running cloud's submit
    function when its URL is known (reclaim.cli.running), else through the queue."""
    from reclaim.cli import running
    from shared.queue import parse_submission

    if args.wait_timeout is not None and not args.wait:
        raise CliError("--wait-timeout needs --wait")
    ctx = Context(args)
    body = submission_body(args, _read_payloads(args))
    url = running.submit_url(os.environ)
    if url is not None:
        answer = running.submit_over_http(url, body)
    else:
        parsed = parse_submission(body, ctx.settings)  # a bad request fails before any call
        answer = ctx.queue().submit(parsed).to_json()
    jobs = answer.get("jobs", [answer])
    lines = [
        f"{j['id']}  {j['status']}{'' if j.get('created') else '  (already existed)'}" for j in jobs
    ]
    if "jobs" in answer:
        lines.append(
            f"batch {answer['batch_id']}: {answer['created']} created, "
            f"{answer['existing']} already existed"
        )
    elif answer.get("batch_id"):
        lines.append(f"batch {answer['batch_id']}")
    if not args.wait:
        ctx.emit(answer, "\n".join(lines))
        return EXIT_OK
    if not ctx.as_json:
        print("\n".join(lines), flush=True)
    return _wait_for_ends(ctx, [str(j["id"]) for j in jobs], args.wait_timeout)


def _wait_for_ends(ctx: Context, job_ids: list[str], timeout: float | None) -> int:
    """submit --wait: each job's end (polling its record's metadata, as GET ?until=ended
    does), then its result or error; 0 all done, 1 one failed or cancelled, 4 timed out."""
    from shared.http.waiting import wait_for_end

    deadline = None if timeout is None else time.monotonic() + timeout
    queue = ctx.queue(ring=False)
    ended: list[dict[str, Any]] = []
    for job_id in job_ids:
        while True:
            left = WAIT_STEP_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise CliError(
                    f"gave up after {timeout:g}s: {len(ended)}/{len(job_ids)} jobs ended "
                    f"({job_id} had not; it goes on: reclaim watch {job_id})",
                    EXIT_TIMEOUT,
                )
            if wait_for_end(queue.store, job_id, min(left, WAIT_STEP_S)).ended:
                break
        record = queue.get(job_id).to_json()
        ended.append(record)
        if not ctx.as_json:
            print(cli_render.ended_text(record), flush=True)
    if ctx.as_json:
        ctx.emit(ended[0] if len(ended) == 1 else {"jobs": ended}, "")
    return EXIT_OK if all(r.get("status") == JobStatus.DONE for r in ended) else EXIT_FAILED


WAIT_STEP_S = 30.0
"""submit --wait and watch of one job poll in waits of at most this long."""


# ----------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    """One job as GET /jobs/<id> shows it, read as stored: the CLI runs no watchdog (its
    stale time is its environment's, not the deployment's)."""
    ctx = Context(args)
    queue = ctx.queue(ring=False)
    record = queue.get(args.job).to_json()
    text = cli_render.job_text(record, ctx.settings.max_attempts)
    quiet = cli_render.quiet_for(record, queue.clock(), ctx.settings.stale_seconds)
    if quiet is not None:
        text += (
            f"\n\n(its record has not moved for {quiet}; this read changes nothing: if its "
            "owner is gone, the deployment's sweep or GET /jobs/<id> requeues it by the "
            "deployment's stale time)"
        )
    ctx.emit(record, text)
    return EXIT_OK


# ----------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    """Jobs by status, batch and/or a feature's filter; unreadable members are reported,
    not hidden."""
    ctx = Context(args)
    status = JobStatus(args.status) if args.status else None
    where = {n: v for n in args.where_names if (v := getattr(args, f"where_{n}")) is not None}
    listing = ctx.queue(ring=False).list_jobs(
        status=status, batch=args.batch, limit=args.limit, where=where
    )
    for job_id, reason in listing.corrupt.items():
        ctx.warn(f"record {job_id} is unreadable ({reason}); left for a person")
    rows = [cli_render.job_row(r, ctx.settings.max_attempts) for r in listing.records]
    data = {"jobs": rows, "unreadable": listing.corrupt, "missing": listing.missing}
    text = cli_render.table(rows, cli_render.LIST_COLUMNS) if rows else "no matching jobs"
    ctx.emit(data, text)
    return EXIT_OK


# ----------------------------------------------------------------------- cancel / retry


def cmd_cancel(args: argparse.Namespace) -> int:
    """queued|running -> cancelled, by a CAS that outlasts the owner's heartbeats."""
    if cli_flow.is_bulk(args):  # flow control: several jobs, by filters
        return cli_flow.cmd_bulk(args, "cancel")
    args.job = args.job[0]
    ctx = Context(args)
    record = ctx.queue(ring=False).cancel(args.job, by=ctx.by(), reason=args.reason)
    was_running = bool(record.get("owner"))
    note = " (its owner stops at its next heartbeat or stage boundary)" if was_running else ""
    ctx.emit(record, f"cancelled {args.job}{note}")
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    """failed|cancelled -> queued with a fresh budget, then ring the doorbell."""
    if cli_flow.is_bulk(args):  # flow control: several jobs, by filters
        return cli_flow.cmd_bulk(args, "retry")
    args.job = args.job[0]
    ctx = Context(args)
    retried = ctx.queue().retry(args.job, by=ctx.by())  # the doorbell is checked first
    if not retried.rung:
        ctx.warn(f"{retried.ring_error}; the job is queued and the sweep will ring it")
    record = retried.record
    ctx.emit(
        {**record, "rung": retried.rung},
        f"requeued {args.job}: attempts used {record.get('attempts')}, allowed now "
        f"{record.get('max_attempts')}; doorbell {'rung' if retried.rung else 'NOT rung'}",
    )
    return EXIT_OK


# ----------------------------------------------------------------------- complete


def cmd_complete(args: argparse.Namespace) -> int:
    """Complete a waitpoint (docs/waiting.md): the one a job waits for, or a token's."""
    ctx = Context(args)
    try:
        data = json.loads(args.data) if args.data is not None else None
    except ValueError as exc:
        raise CliError(f"--data is not JSON: {exc}", EXIT_USAGE) from None
    if args.approve or args.reject:
        data = {"approved": bool(args.approve), **(data if isinstance(data, dict) else {})}
    queue = ctx.queue()
    if args.token:
        done = queue.complete_waitpoint(args.token, data, by=ctx.by())
    elif args.job:
        done = queue.complete_job(args.job, data, by=ctx.by())
    else:
        raise CliError("name a job, or --token TOKEN", EXIT_USAGE)
    answer = done.to_json()
    if not done.won:
        ctx.emit(answer, f"not completed: {done.detail}")
        return EXIT_USAGE
    ctx.emit(answer, f"completed the waitpoint of {done.job_id}: {done.detail}")
    return EXIT_OK


# ----------------------------------------------------------------------- sweep


def cmd_sweep(args: argparse.Namespace) -> int:
    """One sweeper pass, the same as Cloud Scheduler's POST /sweep."""
    ctx = Context(args)
    result = ctx.queue().sweep_once()
    data = result.to_json()
    shown = {**data, "corrupt": ", ".join(result.corrupt) or 0}
    ctx.emit(data, "one sweep pass:\n" + cli_render.counts_text(shown))
    return EXIT_OK


# ----------------------------------------------------------------------- watch


def cmd_watch(args: argparse.Namespace) -> int:
    """Poll a batch until every job is settled; exit 1 if any failed or is unreadable. An
    id that names no batch (or --job) is a job's: follow it until it ends."""
    ctx = Context(args)
    if args.job or not _names_a_batch(ctx, args.batch):
        return _watch_job(ctx, args.batch, args.timeout)
    tty = sys.stdout.isatty() and not ctx.as_json
    started = time.monotonic()
    first_finished: int | None = None
    shown: dict[str, int] | None = None
    while True:
        snapshot = _batch_snapshot(ctx, args.batch)
        counts = cli_render.count_statuses(snapshot.values())
        finished = cli_render.terminal_count(counts)
        first_finished = finished if first_finished is None else first_finished
        elapsed = time.monotonic() - started
        rate, eta = cli_render.rate_and_eta(
            elapsed, finished - first_finished, len(snapshot) - finished
        )
        verdict = cli_render.watch_verdict(counts)
        timed_out = args.timeout is not None and elapsed >= args.timeout
        final = verdict is not None or timed_out
        if tty or final or counts != shown:  # a log or a pipe gets a line per change
            _show_progress(ctx, tty, counts, rate, eta, final)
            shown = counts
        if verdict is not None:
            return _finish_watch(ctx, snapshot, verdict)
        if timed_out:
            raise CliError(
                f"gave up after {args.timeout:g}s: {finished}/{len(snapshot)} jobs finished",
                EXIT_TIMEOUT,
            )
        time.sleep(args.interval)


def _names_a_batch(ctx: Context, name: str) -> bool:
    """Whether a batch has members under this id (one listing of its markers)."""
    from shared.errors import InvalidInput

    try:
        return bool(ctx.store.list_batch(name, limit=1))
    except InvalidInput:  # not a valid batch id: it can only be a job's
        return False


def _watch_job(ctx: Context, job_id: str, timeout: float | None) -> int:
    """A line per change of one job (GET ?wait= polls: the record's generation), until it
    ends: 0 done, 1 failed or cancelled, 4 when `timeout` passes first."""
    from shared.errors import JobNotFound
    from shared.http.waiting import wait_for_change

    queue = ctx.queue(ring=False)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        view = queue.get(job_id)
    except JobNotFound:
        raise CliError(f"no batch or job {job_id!r}") from None
    while True:
        record = view.to_json()
        ctx.emit(record, cli_render.change_line(record))
        if record.get("status") in _ENDED:
            return EXIT_OK if record.get("status") == JobStatus.DONE else EXIT_FAILED
        generation = view.generation
        while view.generation == generation:
            left = WAIT_STEP_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise CliError(
                    f"gave up after {timeout:g}s: {job_id} is {record.get('status')}",
                    EXIT_TIMEOUT,
                )
            wait_for_change(queue.store, job_id, min(left, WAIT_STEP_S), after=generation)
            view = queue.get(job_id)


_ENDED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


def _show_progress(
    ctx: Context,
    tty: bool,
    counts: dict[str, int],
    rate: float | None,
    eta: float | None,
    final: bool,
) -> None:
    """A redrawn line on a terminal, else one line (or JSON object) per change."""
    if ctx.as_json:
        progress = {
            "counts": counts,
            "total": sum(counts.values()),
            "rate_per_s": rate,
            "eta_s": eta,
            "running_progress": ctx.watched_running,
            "final": final,
        }
        print(cli_render.to_json(progress), flush=True)
        return
    line = cli_render.progress_line(counts, rate, eta, running=ctx.watched_running)
    if tty:
        sys.stdout.write("\r\x1b[2K" + line + ("\n" if final else ""))
        sys.stdout.flush()
    else:
        print(line, flush=True)


def _finish_watch(ctx: Context, snapshot: dict[str, str], verdict: str) -> int:
    """Name the jobs that need a person, then the exit code."""
    _show_callback(ctx)
    if verdict == "ok":
        return EXIT_OK
    for status in (JobStatus.FAILED, MEMBER_UNREADABLE):
        ids = sorted(i for i, s in snapshot.items() if s == status)
        if ids and not ctx.as_json:
            shown = ", ".join(ids[:10]) + (f" (+{len(ids) - 10} more)" if len(ids) > 10 else "")
            print(f"{status}: {shown}  (see `reclaim status ID`)", file=sys.stderr)
    return EXIT_FAILED


CALLBACK_WAIT_S = 10.0
"""How long `watch` waits for a settled batch's callback (the last member's end creates it)."""


def _show_callback(ctx: Context) -> None:
    """Workflows: the batch's on_complete callback, once the batch has settled."""
    on_complete = ctx.watched_callback
    deadline = time.monotonic() + CALLBACK_WAIT_S
    while on_complete and on_complete.get("id") is None and time.monotonic() < deadline:
        time.sleep(0.5)
        on_complete = ctx.queue(ring=False).get_batch(ctx.args.batch).on_complete
    if on_complete and not ctx.as_json:
        shown = on_complete.get("id") or "not created yet (the sweep repairs it)"
        print(f"on_complete: {shown} {on_complete.get('status') or ''}".rstrip(), file=sys.stderr)


def _batch_snapshot(ctx: Context, batch: str) -> dict[str, str]:
    """job id -> status of every member, through the queue's batch read (O(batch))."""
    view = ctx.queue(ring=False).get_batch(batch)
    ctx.watched_callback = view.on_complete
    ctx.watched_running = cli_render.running_progress(view.members)
    return {str(job["id"]): str(job.get("status")) for job in view.members}
