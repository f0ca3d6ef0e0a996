"""reclaim: the operators' CLI (submit, status, watch, list, cancel, retry, sweep, dlq).

It talks to Cloud Storage and Pub/Sub through the same seam, doorbell, submission
code and policy transitions as the functions; this module only parses arguments,
maps errors to exit codes and prints. The commands live in reclaim.cli.commands
and reclaim.cli.dlq; what they share (exit codes, settings, clients) in reclaim.cli.context.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reclaim.cli.context import (
    DEFAULT_DEAD_LETTER_SUBSCRIPTION,
    EXIT_CLOSED_PIPE,
    EXIT_INTERRUPTED,
    LOCAL_PUBSUB_EMULATOR_HOST,
    LOCAL_STORAGE_EMULATOR_HOST,
    CliError,
)
from shared.jobs import JobStatus

_DESCRIPTION = """\
Operate a reclaim job queue from a terminal.

The job records in the records bucket ARE the queue; this tool reads and changes
them through the same storage seam, doorbell and policy as the functions.

Where it points:
  local cloud  set STORAGE_EMULATOR_HOST / PUBSUB_EMULATOR_HOST, or pass --local
               (the `make dev` defaults 127.0.0.1:4443 and 127.0.0.1:8085)
  GCP          --project/--bucket/--topic (or RECLAIM_PROJECT, RECLAIM_RECORDS_BUCKET,
               RECLAIM_JOBS_TOPIC) with Application Default Credentials
               (gcloud auth application-default login)
"""

_EPILOG = """\
exit codes:
  0  ok
  1  watch, submit --wait: a job failed or was cancelled (a batch: at least one failed)
  2  usage error, unknown job or pipeline, illegal transition, unreadable record;
     a bulk action without --yes and without a terminal to confirm on
  3  missing credentials, bucket or subscription; service unreachable
  4  watch, submit --wait: --timeout passed before every job finished
  141  stdout was closed early (`reclaim list | head`): the command stopped quietly

examples:
  reclaim init acme-jobs && cd acme-jobs && reclaim dev
  reclaim --local submit demo --payload '{"n": 3}'
  reclaim --local submit demo --batch catalog-0726 --from pieces.jsonl
  reclaim --local watch catalog-0726
  reclaim --local retry JOB_ID
  reclaim --local retry --batch catalog-0726 --status failed --dry-run
  reclaim --local pause demo && reclaim --local resume demo
  reclaim --local complete JOB_ID --approve
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _key(text: str) -> str:
    """A key argument, checked by the one encoder of keys (bytes that are not UTF-8 arrive
    as lone surrogates: a message, not a traceback)."""
    from shared.timing import encode_key

    try:
        encode_key(text, "the key")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _common_options() -> argparse.ArgumentParser:
    """Options accepted before or after the subcommand (`reclaim status X --json`)."""
    common = argparse.ArgumentParser(add_help=False)
    opts = common.add_argument_group("where and how (before or after the command)")
    s = argparse.SUPPRESS
    opts.add_argument(
        "--project",
        default=s,
        metavar="P",
        help="GCP project of the topics (default: $RECLAIM_PROJECT or reclaim-local)",
    )
    opts.add_argument(
        "--bucket",
        default=s,
        metavar="B",
        help="records bucket (default: $RECLAIM_RECORDS_BUCKET or reclaim-records)",
    )
    opts.add_argument(
        "--topic",
        default=s,
        metavar="T",
        help="doorbell topic id (default: $RECLAIM_JOBS_TOPIC or reclaim-jobs)",
    )
    opts.add_argument(
        "--dead-letter-subscription",
        default=s,
        metavar="S",
        help=f"pull subscription holding dead letters "
        f"(default: {DEFAULT_DEAD_LETTER_SUBSCRIPTION})",
    )
    opts.add_argument(
        "--local",
        action="store_true",
        default=s,
        help="use the `make dev` emulators (127.0.0.1:4443 storage, 127.0.0.1:8085 Pub/Sub)",
    )
    opts.add_argument(
        "--json",
        action="store_true",
        default=s,
        help="machine-readable JSON on stdout (errors as JSON on stderr)",
    )
    opts.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=s,
        help="the library's log lines on stderr (-vv: debug too); quiet without it",
    )
    return common


_Add = Callable[[str, Callable[..., int], str, str], Any]
"""Adds one subcommand (name, handler, summary, details) and returns its parser."""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one configure_*_parser per command; each subcommand's
    handler is in `func`."""
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="reclaim",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reclaim {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, func: Callable[..., int], summary: str, details: str) -> Any:
        p = sub.add_parser(
            name,
            help=summary,
            description=f"{summary}\n\n{details}",
            parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func, command_parser=p)
        return p

    for configure in (
        configure_submit_parser,
        configure_status_parser,
        configure_watch_parser,
        configure_list_parser,
        configure_cancel_parser,
        configure_retry_parser,
        configure_complete_parser,
        configure_pause_resume_parser,
        configure_schedules_parser,
        configure_sweep_parser,
        configure_dlq_parser,
        configure_outputs_parser,
        configure_project_parsers,
    ):
        configure(add)
    return parser


def configure_submit_parser(add: _Add) -> None:
    """`reclaim submit`: one job, or a batch from a JSONL file (time options: docs/time.md)."""
    from reclaim.cli import commands as c

    p = add(
        "submit",
        c.cmd_submit,
        "create a job, or a batch of jobs from a JSONL file",
        "Goes through the same submission code as POST /jobs: pending marker, record,\n"
        "batch marker, then the doorbell. Prints the job id(s). With RECLAIM_SUBMIT_URL\n"
        "(set by a running `reclaim dev` for the CLI run in its project) it POSTs to that\n"
        "submit function instead, so the running cloud's pipelines are the ones checked.",
    )
    p.add_argument("pipeline", help="registered pipeline name (e.g. demo)")
    p.add_argument("--batch", metavar="B", help="batch id to group the jobs under (for watch)")
    p.add_argument(
        "--id",
        dest="job_id",
        metavar="ID",
        help="job id to use (default: a random one), the idempotency key: the same id with "
        "the same request prints the existing job; with any field different (payload, times, "
        "keys, ...) it is refused and the message names the fields",
    )
    p.add_argument(
        "--max-attempts",
        type=_positive_int,
        metavar="N",
        help="claims this job may take before it fails (default: the deployment's)",
    )
    when = p.add_mutually_exclusive_group()  # time: docs/time.md
    when.add_argument(
        "--at", metavar="TIME", help="start at this RFC 3339 time, with a zone (run_at)"
    )
    when.add_argument(
        "--in", dest="delay", type=float, metavar="S", help="start in S seconds (delay_seconds)"
    )
    p.add_argument("--ttl", type=float, metavar="S", help="expire if not started within S seconds")
    p.add_argument("--timeout", type=float, metavar="S", help="an attempt's time limit")
    p.add_argument(
        "--unique-key", type=_key, metavar="KEY", help="at most one job with this key at a time"
    )
    p.add_argument(
        "--tag",
        dest="tags",
        action="append",
        metavar="TAG",
        help="a label for the job (repeat for more; `reclaim list --tag TAG` finds it)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="then follow the job(s) until they end and print the result: exit 0 when "
        "every one is done, 1 when one failed or was cancelled",
    )
    p.add_argument(
        "--wait-timeout",
        type=_positive_float,
        metavar="S",
        help="with --wait: give up after S seconds (exit 4; the jobs go on)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--payload", metavar="JSON", help="the job's payload, a JSON object")
    src.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE.jsonl",
        help="one JSON object per line, each a job's payload ('-' reads stdin)",
    )


def configure_status_parser(add: _Add) -> None:
    """`reclaim status JOB`."""
    from reclaim.cli import commands as c

    p = add(
        "status",
        c.cmd_status,
        "show a job: its record, its error (with the stage's traceback) and history",
        "The record as stored: this read changes nothing. The read-path watchdog (a\n"
        "silent owner's job requeued or failed) is the deployment's to run, by its own\n"
        "stale time: GET /jobs/<id> and the sweep do; the CLI's environment may not know\n"
        "that stale time, so `status` only says how long a running job has been quiet.",
    )
    p.add_argument("job", help="job id")


def configure_watch_parser(add: _Add) -> None:
    """`reclaim watch BATCH|JOB`."""
    from reclaim.cli import commands as c

    p = add(
        "watch",
        c.cmd_watch,
        "follow a batch until every job is terminal, or one job until it ends",
        "A batch: a live progress bar with counts by status, rate and ETA. Exits 0 when\n"
        "all jobs are terminal and none failed (cancelled is not a failure), 1 if any\n"
        "failed or has an unreadable record, 4 on --timeout. A job (an id that names no\n"
        "batch, or --job): a line per change (status, stage, attempt, progress, event)\n"
        "until it ends; 0 when done, 1 when failed or cancelled, 4 on --timeout.",
    )
    p.add_argument("batch", metavar="ID", help="a batch id, or a job id")
    p.add_argument("--job", action="store_true", help="ID is a job's, even if a batch has it")
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=2.0,
        metavar="S",
        help="seconds between polls of a batch (default: 2)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="S",
        help="give up after this many seconds (exit 4)",
    )


def configure_list_parser(add: _Add) -> None:
    """`reclaim list`."""
    from reclaim.cli import commands as c

    p = add(
        "list",
        c.cmd_list,
        "list jobs by status and/or batch (without --batch it walks the history)",
        "With --batch it reads only that batch's members (O(batch)); with --status\n"
        "queued or running it walks the pending index (O(pending)); otherwise it\n"
        "walks every record under jobs/, i.e. the whole history (costly on big buckets).",
    )
    p.add_argument(
        "--status",
        choices=[status.value for status in JobStatus],
        help="only jobs in this status",
    )
    p.add_argument("--batch", metavar="B", help="only this batch's jobs")
    _add_feature_filters(p)
    p.add_argument(
        "--limit",
        type=_positive_int,
        default=50,
        metavar="N",
        help="show at most N jobs (default: 50)",
    )


def _add_feature_filters(p: argparse.ArgumentParser) -> None:
    """One `--<name> VALUE` per listing filter of the feature table (Feature.filters),
    each read from that feature's index, not from every record."""
    from shared.queue import list_filters

    filters = list_filters()
    for name, text in filters.items():
        p.add_argument(f"--{name}", dest=f"where_{name}", metavar=name.upper(), help=text)
    p.set_defaults(where_names=tuple(filters))


def configure_cancel_parser(add: _Add) -> None:
    """`reclaim cancel`: by id, or in bulk (flow control)."""
    from reclaim.cli import commands as c
    from reclaim.cli import flow as cli_flow

    p = add(
        "cancel",
        c.cmd_cancel,
        "cancel a queued or running job (terminal)",
        "A compare-and-swap on the record; a running owner notices at its next\n"
        "heartbeat or stage boundary (its write fails) and stops without committing.\n"
        "Done, failed and cancelled jobs cannot be cancelled (exit 2).",
    )
    p.add_argument("job", nargs="*", help="job id(s)")
    p.add_argument("--reason", metavar="TEXT", help="why, kept in the job's history")
    p.add_argument("--by", metavar="NAME", help="who, kept in the history (default: cli:$USER)")
    cli_flow.add_bulk_options(p, "cancel")  # flow control


def configure_complete_parser(add: _Add) -> None:
    """`reclaim complete`: a waitpoint, by the job it parks or by its token (waits)."""
    from reclaim.cli import commands as c

    p = add(
        "complete",
        c.cmd_complete,
        "complete a waitpoint: the one a job waits for, or a token's",
        "The job resumes at its next stage, which reads the data (docs/waiting.md). The\n"
        "first completion wins: a waitpoint completed already, timed out or whose job\n"
        "ended is refused (exit 2), and nothing changes.",
    )
    p.add_argument("job", nargs="?", help="the id of a job parked on a waitpoint")
    p.add_argument("--token", metavar="TOKEN", help="a waitpoint's token instead of a job")
    p.add_argument("--data", metavar="JSON", help="what the waiting stage reads (any JSON)")
    verdict = p.add_mutually_exclusive_group()
    verdict.add_argument("--approve", action="store_true", help='data {"approved": true}')
    verdict.add_argument("--reject", action="store_true", help='data {"approved": false}')
    p.add_argument("--by", metavar="NAME", help="who, kept in the job (default: cli:$USER)")


def configure_retry_parser(add: _Add) -> None:
    """`reclaim retry`: by id, or in bulk (flow control)."""
    from reclaim.cli import commands as c
    from reclaim.cli import flow as cli_flow

    p = add(
        "retry",
        c.cmd_retry,
        "requeue a failed or cancelled job with a fresh attempt budget",
        "Adds an audit entry to the job's history, re-adds its pending marker before\n"
        "the record write, then rings the doorbell. Queued, running and done jobs\n"
        "cannot be retried (exit 2).",
    )
    p.add_argument("job", nargs="*", help="job id(s)")
    p.add_argument("--by", metavar="NAME", help="who, kept in the history (default: cli:$USER)")
    cli_flow.add_bulk_options(p, "retry")  # flow control


def configure_pause_resume_parser(add: _Add) -> None:
    """`reclaim pause|resume PIPELINE` (flow control)."""
    from reclaim.cli import flow as cli_flow

    for name, func, summary in (  # flow control
        ("pause", cli_flow.cmd_pause, "pause a pipeline: none of its jobs starts"),
        ("resume", cli_flow.cmd_resume, "resume a pipeline and ring its parked jobs"),
    ):
        p = add(name, func, summary, "See docs/flow-control.md. Running jobs finish.")
        p.add_argument("pipeline", help="registered pipeline name")
        p.add_argument("--by", metavar="NAME", help="who (default: cli:$USER)")


def configure_schedules_parser(add: _Add) -> None:
    """`reclaim schedules`."""
    from reclaim.cli import commands as c

    add(
        "schedules",
        c.cmd_schedules,
        "list the cron schedules with their last and next runs",
        "The schedules are declared in pipelines/schedules.json (or $RECLAIM_SCHEDULES_FILE);\n"
        "terraform makes one Cloud Scheduler job per schedule. See docs/time.md.",
    )


def configure_sweep_parser(add: _Add) -> None:
    """`reclaim sweep`."""
    from reclaim.cli import commands as c

    add(
        "sweep",
        c.cmd_sweep,
        "run one sweep pass now and print its counts",
        "The same pass Cloud Scheduler triggers: requeue (and re-ring) jobs whose owner\n"
        "went silent, fail those out of attempts, repair leftover pending markers.",
    )


def configure_dlq_parser(add: _Add) -> None:
    """`reclaim dlq`."""
    from reclaim.cli import dlq as cli_dlq

    p = add(
        "dlq",
        cli_dlq.cmd_dlq,
        "show (and optionally re-ring) what the dead-letter subscription holds",
        "Pulls from the dead-letter pull subscription until a pull comes back empty and\n"
        "shows each message (once, by message id) with its job id,\n"
        "delivery count and source. Without --requeue nothing is acknowledged: the\n"
        "messages go straight back (nothing is lost). With --requeue a job that still\n"
        "owes work is re-rung and its message acked; a terminal job's message is acked;\n"
        "a message naming no readable job is left for a person.",
    )
    p.add_argument("--requeue", action="store_true", help="re-ring pending jobs and ack")
    p.add_argument(
        "--max",
        dest="max_messages",
        type=_positive_int,
        default=100,
        metavar="N",
        help="pull at most N messages (default: 100)",
    )


def configure_outputs_parser(add: _Add) -> None:
    """`reclaim outputs` (reclaim.cli.outputs)."""
    from reclaim.cli import outputs

    outputs.configure_outputs_parser(add)


def configure_project_parsers(add: _Add) -> None:
    """`reclaim init`, `reclaim dev`, `reclaim tf-module` (reclaim.cli.project)."""
    from reclaim.cli import project

    project.configure_project_parsers(add)


def _use_local_cloud() -> None:
    os.environ["STORAGE_EMULATOR_HOST"] = LOCAL_STORAGE_EMULATOR_HOST
    os.environ["PUBSUB_EMULATOR_HOST"] = LOCAL_PUBSUB_EMULATOR_HOST


def _version() -> str:
    from reclaim import __version__

    return __version__


def _report(message: str, code: int, as_json: bool) -> int:
    from reclaim.cli.render import to_json

    text = to_json({"error": message, "exit_code": code}) if as_json else f"reclaim: {message}"
    print(text, file=sys.stderr)
    return code


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; a flag no command knows is refused with that subcommand's usage (and
    the nearest flag it does know), not the top-level one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        known = [o for a in command._actions for o in a.option_strings]
        hints = [
            f"{word} (did you mean {close[0]}?)"
            if (close := difflib.get_close_matches(word.split("=")[0], known, n=1))
            else word
            for word in extra
        ]
        command.error(f"unrecognized arguments: {' '.join(hints)}")
    return args


def _quiet_logs(verbosity: int) -> None:
    """The library's log lines (and metric lines, which ignore the level) go to stderr only
    with -v: stdout is the command's, and stderr its own messages."""
    import logging

    from shared import logs

    logs.configure("DEBUG" if verbosity > 1 else "INFO", stderr=True)
    if not verbosity:
        for handler in logging.getLogger(logs.ROOT).handlers:
            handler.setLevel(logging.CRITICAL + 1)


def _closed_pipe() -> int:
    """stdout's reader went away (`reclaim list | head`): stop quietly, as a Unix tool
    stopped by SIGPIPE does (exit 141), without a traceback at exit's flush."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CLOSED_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    args = parse(build_parser(), argv)
    as_json = bool(getattr(args, "json", False))
    _quiet_logs(int(getattr(args, "verbose", 0) or 0))
    try:
        return _run(args, as_json)
    except BrokenPipeError:
        return _closed_pipe()


def _run(args: argparse.Namespace, as_json: bool) -> int:
    from reclaim.cli.context import explain

    try:
        if getattr(args, "in_project", True):  # your pipelines, from the project you are in
            from reclaim.cli.project import use_current
            from reclaim.cli.running import use_running_dev

            use_current(os.environ, sys.path)
            flags = any(hasattr(args, f) for f in ("project", "bucket", "topic"))
            local = bool(getattr(args, "local", False))
            found = use_running_dev(Path.cwd(), os.environ, local=local, flags=flags)
            if found is None and local:
                _use_local_cloud()
        elif getattr(args, "local", False):
            _use_local_cloud()
        return int(args.func(args))
    except CliError as exc:
        return _report(str(exc), exc.code, as_json)
    except KeyboardInterrupt:
        return _report("interrupted", EXIT_INTERRUPTED, as_json)
    except BrokenPipeError:
        raise
    except Exception as exc:  # the entry point: an error the user can act on (ours or a
        # cloud client's) becomes a message and an exit code; anything else a traceback
        known = explain(exc)
        if known is None:
            raise
        return _report(known[0], known[1], as_json)
