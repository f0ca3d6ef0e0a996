"""What every reclaim CLI command shares: exit codes, settings and lazily made
clients, the fail-fast checks, and the mapping of errors to messages and codes.

Cloud clients are created only for the commands that need them, after a quick
check that the configured emulator (if any) answers and the bucket exists, so a
mistake is reported in a second with exit code 3, not after a minute of retries.
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from reclaim.cli import render as cli_render
from shared.config import Settings
from shared.errors import ReclaimError
from shared.pipelines import load_modules

if TYPE_CHECKING:
    from shared.doorbell import Doorbell
    from shared.queue import Queue
    from shared.storage import Store

# Exit codes (also listed in --help).
EXIT_OK = 0
EXIT_FAILED = 1  # watch: at least one job of the batch failed
EXIT_USAGE = 2  # bad arguments, unknown job/pipeline, illegal transition, unreadable record
EXIT_UNAVAILABLE = 3  # missing credentials, bucket or subscription; unreachable service
EXIT_TIMEOUT = 4  # watch, submit --wait: --timeout passed before every job finished
EXIT_INTERRUPTED = 130
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader left

# `make dev` listens here (reclaim/local/cloud.py); --local points the official clients at it.
LOCAL_STORAGE_EMULATOR_HOST = "http://127.0.0.1:4443"
LOCAL_PUBSUB_EMULATOR_HOST = "127.0.0.1:8085"
# The pull subscription on the dead-letter topic (same name in terraform and
# reclaim/local/wiring.py).
DEFAULT_DEAD_LETTER_SUBSCRIPTION = "reclaim-dead-letter-hold"


class CliError(ReclaimError):
    """A failure the user can act on: printed as is, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


_REACH_TIMEOUT_S = 2.0


class Context:
    """Settings, and the queue over lazily created clients, of one CLI run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.as_json = bool(getattr(args, "json", False))
        self.watched_callback: dict[str, Any] | None = None  # workflows: `watch`'s on_complete
        self.watched_running: float | None = None  # `watch`: how far running jobs say they are
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
        load_modules(self.settings.pipeline_modules)  # so submit knows the deployment's
        self.dead_letter_subscription = getattr(
            args, "dead_letter_subscription", DEFAULT_DEAD_LETTER_SUBSCRIPTION
        )

    @cached_property
    def store(self) -> Store:
        from google.api_core import exceptions as gexc

        from shared.errors import NotFound
        from shared.stores import factory as storage

        check_reachable("STORAGE_EMULATOR_HOST", "storage emulator")
        store = storage.get_store(self.settings)
        try:
            store.list_pending(limit=1)  # one cheap call: credentials and bucket exist
        except (gexc.NotFound, NotFound):  # a listing only 404s for a missing bucket
            raise CliError(
                f"a records bucket of {list(self.settings.records_buckets)} does not exist "
                "(set --bucket or RECLAIM_RECORDS_BUCKET; `make dev` creates reclaim-records)",
                EXIT_UNAVAILABLE,
            ) from None
        return store

    @cached_property
    def doorbell(self) -> Doorbell:
        from shared.doorbell import get_doorbell

        check_reachable("PUBSUB_EMULATOR_HOST", "Pub/Sub emulator")
        return get_doorbell(self.settings)

    def queue(self, *, ring: bool = True) -> Queue:
        """The queue over this run's store and doorbell. With ring, the doorbell must be
        reachable before anything is written (submit, retry, sweep ring it); without,
        it is only the best-effort ring of a read's watchdog, not checked up front."""
        from shared.doorbell import get_doorbell
        from shared.queue import Queue

        doorbell = self.doorbell if ring else get_doorbell(self.settings)
        # its reads never run the watchdog: the CLI's stale time is its environment's, not
        # the deployment's (a job a pool heartbeats every 400 s is not stale after 120 s)
        return Queue(self.store, doorbell, self.settings, watchdog=False)

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


def check_reachable(var: str, what: str) -> None:
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
    from shared import errors
    from shared.pipelines import pipeline_names

    if isinstance(exc, errors.IllegalTransition):
        return f"illegal transition: {exc}", EXIT_USAGE
    if isinstance(exc, errors.InvalidInput):
        return exc.reason, EXIT_USAGE
    if isinstance(exc, errors.SubmitError):
        problems = "".join(f"\n  - {p}" for p in exc.problems) if len(exc.problems) > 1 else ""
        kind = "conflict" if isinstance(exc, errors.Conflict) else "invalid request"
        return f"{kind}: {exc.reason}{problems}", EXIT_USAGE
    if isinstance(exc, errors.UnknownPipeline):
        known = ", ".join(pipeline_names())
        return f"unknown pipeline {exc.name!r} (known: {known})", EXIT_USAGE
    if isinstance(exc, errors.CorruptRecord):
        return f"{exc} (left untouched for a person to inspect)", EXIT_USAGE
    if isinstance(exc, errors.JobNotFound | errors.BatchNotFound):
        what = "job" if isinstance(exc, errors.JobNotFound) else "batch"
        return f"unknown {what} ({exc})", EXIT_USAGE
    if isinstance(exc, errors.NotFound):
        return f"not found: {exc}", EXIT_UNAVAILABLE
    if isinstance(exc, errors.LostRace):
        return str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, errors.Unavailable):
        return f"Cloud Storage unavailable: {exc}", EXIT_UNAVAILABLE
    if isinstance(exc, errors.DoorbellError):
        return f"{exc} (is the topic there and Pub/Sub reachable?)", EXIT_UNAVAILABLE
    if isinstance(exc, errors.ConfigError | errors.PipelineModuleError):
        return str(exc), EXIT_USAGE
    return None


def _explain_cloud(exc: BaseException) -> tuple[str, int] | None:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from requests import exceptions as req_exc

    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return (
            "no Google credentials found: run `gcloud auth application-default login` "
            "(or set GOOGLE_APPLICATION_CREDENTIALS), or use the local cloud with --local "
            "or STORAGE_EMULATOR_HOST/PUBSUB_EMULATOR_HOST"
        ), EXIT_UNAVAILABLE
    if isinstance(exc, auth_exc.GoogleAuthError):
        return f"Google credentials were refused: {exc}", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.NotFound):
        return f"not found: {exc.message}", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied | gexc.Unauthorized):
        return f"permission denied: {exc.message}", EXIT_UNAVAILABLE
    if isinstance(exc, gexc.GoogleAPIError | req_exc.ConnectionError | req_exc.Timeout):
        return f"service unavailable: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE
    return None
