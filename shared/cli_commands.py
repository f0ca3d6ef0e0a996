"""The reclaim CLI's commands: each reads its arguments, calls the library, prints.

Cloud clients are created lazily and only for the commands that need them, after
a quick check that the configured emulator (if any) answers and the bucket
exists, so a mistake is reported in a second with exit code 3, not after a
minute of client retries.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from shared import cli_ops, cli_render
from shared.cli import (
    DEFAULT_DEAD_LETTER_SUBSCRIPTION,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
)
from shared.config import Settings

_REACH_TIMEOUT_S = 2.0
_PULL_TIMEOUT_S = 5.0


class Context:
    """Settings and lazily created clients of one CLI run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.as_json = bool(getattr(args, "json", False))
        env = dict(os.environ)
        for flag, var in (
            ("project", "RECLAIM_PROJECT"),
            ("bucket", "RECLAIM_RECORDS_BUCKET"),
            ("topic", "RECLAIM_JOBS_TOPIC"),
        ):
            value = getattr(args, flag, None)
            if value is not None:
                env[var] = value
        self.settings = Settings.from_env(env)  # ConfigError names the bad value
        self.dead_letter_subscription = getattr(
            args, "dead_letter_subscription", DEFAULT_DEAD_LETTER_SUBSCRIPTION
        )

    @cached_property
    def store(self) -> Any:
        from google.api_core import exceptions as gexc

        from shared import storage

        _check_reachable("STORAGE_EMULATOR_HOST", "storage emulator")
        store = storage.get_store(self.settings)
        try:
            store.list_pending(limit=1)  # one cheap call: credentials and bucket exist
        except (gexc.NotFound, storage.NotFound):  # a listing only 404s for a missing bucket
            raise CliError(
                f"records bucket {self.settings.records_bucket!r} does not exist "
                "(set --bucket or RECLAIM_RECORDS_BUCKET; `make dev` creates reclaim-records)",
                EXIT_UNAVAILABLE,
            ) from None
        return store

    @cached_property
    def doorbell(self) -> Any:
        from shared.doorbell import get_doorbell

        _check_reachable("PUBSUB_EMULATOR_HOST", "Pub/Sub emulator")
        return get_doorbell(self.settings)

    def watchdog_doorbell(self) -> Any:
        """The doorbell for a read's watchdog: best effort, so not checked up front."""
        from shared.doorbell import get_doorbell

        return get_doorbell(self.settings)

    def by(self) -> str:
        """Who to name in a history entry."""
        given = getattr(self.args, "by", None)
        if given:
            return str(given)
        try:
            return f"cli:{getpass.getuser()}"
        except (OSError, KeyError):
            return "cli"

    def emit(self, data: Any, text: str) -> None:
        """Print the JSON form with --json, else the text form."""
        print(cli_render.to_json(data) if self.as_json else text, flush=True)

    def warn(self, message: str) -> None:
        print(f"reclaim: warning: {message}", file=sys.stderr, flush=True)


def _check_reachable(var: str, what: str) -> None:
    """With an emulator configured, fail fast (exit 3) if nothing listens there."""
    value = os.environ.get(var)
    if not value:
        return
    parts = urlsplit(value if "://" in value else f"//{value}")
    host, port = parts.hostname or "127.0.0.1", parts.port
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    try:
        with socket.create_connection((host, port), timeout=_REACH_TIMEOUT_S):
            return
    except OSError as exc:
        raise CliError(
            f"cannot reach the {what} at {value} ({var}): {exc.strerror or exc}; "
            "is the local cloud running (`make dev`)?",
            EXIT_UNAVAILABLE,
        ) from None


# ----------------------------------------------------------------------- errors


def explain(exc: BaseException) -> tuple[str, int] | None:
    """A clear message and exit code for an error the user can act on, else None."""
    return _explain_queue(exc) or _explain_cloud(exc)


def _explain_queue(exc: BaseException) -> tuple[str, int] | None:
    from shared import job_queue, records, storage
    from shared.config import ConfigError
    from shared.pipelines import UnknownPipeline, pipeline_names

    if isinstance(exc, job_queue.IllegalTransition):
        return f"illegal transition: {exc}", EXIT_USAGE
    if isinstance(exc, records.InvalidInput):
        return exc.reason, EXIT_USAGE
    if isinstance(exc, UnknownPipeline):
        name = exc.args[0] if exc.args else ""
        return f"unknown pipeline {name!r} (known: {', '.join(pipeline_names())})", EXIT_USAGE
    if isinstance(exc, storage.CorruptRecord):
        return f"{exc} (left untouched for a person to inspect)", EXIT_USAGE
    if isinstance(exc, storage.NotFound):
        return f"unknown job: {exc}", EXIT_USAGE
    if isinstance(exc, storage.LostRace):
        return str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, storage.Unavailable):
        return f"Cloud Storage unavailable: {exc}", EXIT_UNAVAILABLE
    if isinstance(exc, ConfigError):
        return str(exc), EXIT_USAGE
    return None


def _explain_cloud(exc: BaseException) -> tuple[str, int] | None:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from requests import exceptions as req_exc

    from shared.doorbell import DoorbellError

    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return (
            "no Google credentials found: run `gcloud auth application-default login` "
            "(or set GOOGLE_APPLICATION_CREDENTIALS), or use the local cloud with --local "
            "or STORAGE_EMULATOR_HOST/PUBSUB_EMULATOR_HOST"
        ), EXIT_UNAVAILABLE
    if isinstance(exc, auth_exc.GoogleAuthError):
        return f"Google credentials were refused: {exc}", EXIT_UNAVAILABLE
    if isinstance(exc, DoorbellError):
        return f"{exc} (is the topic there and Pub/Sub reachable?)", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.NotFound):
        return f"not found: {exc.message}", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied | gexc.Unauthorized):
        return f"permission denied: {exc.message}", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.GoogleAPIError | req_exc.ConnectionError | req_exc.Timeout):
        return f"service unavailable: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE
    return None


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


def cmd_submit(args: argparse.Namespace) -> int:
    """Create the job(s) through shared.submission, exactly as POST /jobs does."""
    from shared import submission

    ctx = Context(args)
    body = submission_body(args, _read_payloads(args))
    try:
        parsed = submission.parse_submission(body, ctx.settings)
        result = submission.submit(ctx.store, ctx.doorbell, parsed, cli_ops.utcnow())
    except submission.SubmitError as exc:
        problems = "".join(f"\n  - {p}" for p in exc.problems) if len(exc.problems) > 1 else ""
        raise CliError(f"{exc.error}: {exc.reason}{problems}") from None
    answer = result.body
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
    ctx.emit(answer, "\n".join(lines))
    return EXIT_OK


# ----------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    """One job, through the status view (with its read-path watchdog), as GET /jobs/<id>."""
    from shared import status

    ctx = Context(args)
    view = status.job_view(
        ctx.store, ctx.watchdog_doorbell(), ctx.settings, args.job, cli_ops.utcnow()
    )
    _refuse_view(view.status, view.body, "job")
    record = view.body
    text = cli_render.job_text(record, ctx.settings.max_attempts)
    if record.get("watchdog"):
        text += f"\n\n(this read applied the watchdog: {record['watchdog']})"
    ctx.emit(record, text)
    return EXIT_OK


def _refuse_view(code: int, body: dict[str, Any], what: str) -> None:
    """A status view's 4xx as a CLI error (404 unknown, 409 unreadable, 400 bad id)."""
    if code < 400:
        return
    reason = str(body.get("reason") or body.get("error") or code)
    if code == 404:
        reason = f"unknown {what} ({reason})"
    raise CliError(reason, EXIT_USAGE)


# ----------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    """Jobs by status and/or batch; unreadable members are reported, not hidden."""
    ctx = Context(args)
    listing = cli_ops.list_jobs(ctx.store, status=args.status, batch=args.batch, limit=args.limit)
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
    ctx = Context(args)
    stored = cli_ops.cancel_job(ctx.store, args.job, by=ctx.by(), reason=args.reason)
    was_running = bool(stored.record.get("owner"))
    note = " (its owner stops at its next heartbeat or stage boundary)" if was_running else ""
    ctx.emit(stored.record, f"cancelled {args.job}{note}")
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    """failed|cancelled -> queued with a fresh budget, then ring the doorbell."""
    from shared.doorbell import DoorbellError

    ctx = Context(args)
    doorbell = ctx.doorbell  # reachable before anything is written
    stored = cli_ops.retry_job(
        ctx.store, args.job, by=ctx.by(), default_max_attempts=ctx.settings.max_attempts
    )
    rung = True
    try:
        doorbell.ring(args.job)
    except DoorbellError as exc:
        rung = False
        ctx.warn(f"{exc}; the job is queued and the sweep will ring it")
    record = stored.record
    ctx.emit(
        {**record, "rung": rung},
        f"requeued {args.job}: attempts used {record.get('attempts')}, allowed now "
        f"{record.get('max_attempts')}; doorbell {'rung' if rung else 'NOT rung'}",
    )
    return EXIT_OK


# ----------------------------------------------------------------------- sweep


def cmd_sweep(args: argparse.Namespace) -> int:
    """One sweeper pass, the same as Cloud Scheduler's POST /sweep."""
    from shared import sweeper

    ctx = Context(args)
    result = sweeper.run_once(ctx.store, ctx.doorbell, ctx.settings, cli_ops.utcnow())
    data = result.to_json()
    shown = {**data, "corrupt": ", ".join(result.corrupt) or 0}
    ctx.emit(data, "one sweep pass:\n" + cli_render.counts_text(shown))
    return EXIT_OK


# ----------------------------------------------------------------------- dlq


def _pull(subscriber: Any, path: str, most: int) -> Iterator[Any]:
    """Synchronous pulls until `most` messages, or an answer short of what was asked
    (the backlog is drained, or Pub/Sub has no more to give right now)."""
    from google.api_core import exceptions as gexc

    got = 0
    while got < most:
        asked = min(most - got, 1000)
        try:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": asked}, timeout=_PULL_TIMEOUT_S
            )
        except gexc.DeadlineExceeded:
            return  # nothing arrived within the timeout: the subscription is empty
        for received in response.received_messages:
            got += 1
            yield received
        if len(response.received_messages) < asked:
            return


def _dead_letter(received: Any) -> cli_ops.DeadLetter:
    msg = received.message
    published = msg.publish_time.isoformat() if msg.publish_time else None
    return cli_ops.decode_dead_letter(
        received.ack_id,
        msg.message_id,
        bytes(msg.data),
        dict(msg.attributes),
        int(received.delivery_attempt or 0),
        published,
    )


def cmd_dlq(args: argparse.Namespace) -> int:
    """Show the dead letters; with --requeue re-ring pending jobs and ack their messages."""
    from google.cloud import pubsub_v1

    ctx = Context(args)
    _check_reachable("PUBSUB_EMULATOR_HOST", "Pub/Sub emulator")
    store = ctx.store if args.requeue else None
    doorbell = ctx.doorbell if args.requeue else None
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(ctx.settings.project, ctx.dead_letter_subscription)
    rows: list[dict[str, Any]] = []
    try:
        letters = [_dead_letter(r) for r in _pull(subscriber, path, args.max_messages)]
        ack, back = _decide_letters(letters, store, doorbell, rows)
        if ack:
            subscriber.acknowledge(request={"subscription": path, "ack_ids": ack})
        if back:  # deadline 0: redelivered at once, nothing lost
            subscriber.modify_ack_deadline(
                request={"subscription": path, "ack_ids": back, "ack_deadline_seconds": 0}
            )
    finally:
        subscriber.close()
    columns = ("job_id", "delivery_count", "source_subscription", "published", "action")
    text = cli_render.table(rows, columns) if rows else f"no dead letters in {path}"
    if rows and not args.requeue:
        text += f"\n{len(rows)} message(s) left in place; --requeue re-rings pending jobs"
    ctx.emit({"subscription": path, "messages": rows}, text)
    return EXIT_OK


def _decide_letters(
    letters: list[cli_ops.DeadLetter], store: Any, doorbell: Any, rows: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """Which ack ids to ack and which to hand back; fills one display row per letter."""
    from shared.doorbell import DoorbellError

    ack: list[str] = []
    back: list[str] = []
    for letter in letters:
        row = {
            "job_id": letter.job_id,
            "delivery_count": letter.delivery_count,
            "source_subscription": letter.source_subscription,
            "published": letter.published,
            "message_id": letter.message_id,
            "attributes": letter.attributes,
        }
        action = "left"
        if store is not None:
            decision, status = cli_ops.requeue_decision(store, letter.job_id)
            row["status"] = status
            if decision == "ring":
                try:
                    doorbell.ring(letter.job_id)
                    action = "re-rung"
                except DoorbellError:
                    decision, action = "keep", "left (ring failed)"
            elif decision == "drop":
                action = f"acked ({status})"
            else:
                action = "left (no readable job)"
            if decision in ("ring", "drop"):
                ack.append(letter.ack_id)
            else:
                back.append(letter.ack_id)
        else:
            back.append(letter.ack_id)
        row["action"] = action
        rows.append(row)
    return ack, back


# ----------------------------------------------------------------------- watch


def cmd_watch(args: argparse.Namespace) -> int:
    """Poll a batch until every job is settled; exit 1 if any failed or is unreadable."""
    ctx = Context(args)
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
            "final": final,
        }
        print(cli_render.to_json(progress), flush=True)
        return
    line = cli_render.progress_line(counts, rate, eta)
    if tty:
        sys.stdout.write("\r\x1b[2K" + line + ("\n" if final else ""))
        sys.stdout.flush()
    else:
        print(line, flush=True)


def _finish_watch(ctx: Context, snapshot: dict[str, str], verdict: str) -> int:
    """Name the jobs that need a person, then the exit code."""
    if verdict == "ok":
        return EXIT_OK
    for status in ("failed", "unreadable"):
        ids = sorted(i for i, s in snapshot.items() if s == status)
        if ids and not ctx.as_json:
            shown = ", ".join(ids[:10]) + (f" (+{len(ids) - 10} more)" if len(ids) > 10 else "")
            print(f"{status}: {shown}  (see `reclaim status ID`)", file=sys.stderr)
    return EXIT_FAILED


def _batch_snapshot(ctx: Context, batch: str) -> dict[str, str]:
    """job id -> status of every member, through the status view's batch read (O(batch))."""
    from shared import status

    view = status.batch_view(
        ctx.store, ctx.watchdog_doorbell(), ctx.settings, batch, cli_ops.utcnow()
    )
    _refuse_view(view.status, view.body, "batch")
    return {str(job["id"]): str(job.get("status")) for job in view.body["jobs"]}
