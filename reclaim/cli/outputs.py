"""`reclaim outputs JOB [--get NAME] [-o PATH]`: a job's committed outputs, and one of them.

Read from the records bucket with the CLI's own credentials, as every command reads:
the committed outputs only (shared.outputs.committed: never what a lost attempt wrote),
streamed to a file in pieces, whatever its size.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from reclaim.cli import render as cli_render
from reclaim.cli.context import EXIT_OK, CliError, Context
from shared.errors import NotFound
from shared.outputs import committed

PIECE_BYTES = 1024 * 1024


def configure_outputs_parser(add: Any) -> None:
    """`reclaim outputs`."""
    p = add(
        "outputs",
        cmd_outputs,
        "list a job's outputs, or fetch one (--get NAME)",
        "Lists what the job's committed stages wrote (name, attempt, size, type): an\n"
        "output a stage of a lost attempt wrote is never listed. --get NAME writes one to\n"
        "a file named after it in the current folder (-o PATH elsewhere, -o - to stdout);\n"
        "without --attempt, the latest attempt that committed an output of that name.",
    )
    p.add_argument("job", help="job id")
    p.add_argument("--get", metavar="NAME", help="fetch the output called NAME")
    p.add_argument("--attempt", type=int, metavar="N", help="with --get: attempt N's output")
    p.add_argument(
        "-o", "--output", metavar="PATH", help="with --get: where to write it ('-': stdout)"
    )


def cmd_outputs(args: argparse.Namespace) -> int:
    ctx = Context(args)
    queue = ctx.queue(ring=False)
    record = queue.read(args.job)
    if args.get is None:
        if args.attempt is not None or args.output is not None:
            raise CliError("--attempt and -o go with --get NAME")
        found = committed.committed(queue.store, record)
        rows = [o.to_json() for o in found]
        text = (
            cli_render.table(rows, ("name", "attempt", "size", "content_type", "created"))
            if rows
            else f"job {args.job} has no committed outputs"
        )
        ctx.emit({"job_id": args.job, "outputs": rows}, text)
        return EXIT_OK
    try:
        obj = committed.locate(record, args.get, args.attempt)
        stream, info = queue.store.read_output(args.job, obj)
    except NotFound as exc:
        raise CliError(str(exc)) from None
    with stream:
        if args.output == "-":
            shutil.copyfileobj(stream, sys.stdout.buffer, PIECE_BYTES)
            sys.stdout.buffer.flush()
            return EXIT_OK
        target = Path(args.output) if args.output else Path(args.get.rsplit("/", 1)[-1])
        if target.is_dir():
            target = target / args.get.rsplit("/", 1)[-1]
        with target.open("wb") as out:
            shutil.copyfileobj(stream, out, PIECE_BYTES)
    print(f"wrote {target} ({info.size} bytes, {info.content_type or 'no type'})", file=sys.stderr)
    return EXIT_OK
