"""The running cloud a command talks to: the project's `reclaim dev`, and its submit function.

Run in a project whose `reclaim dev` is up, the CLI needs no exported variables: `reclaim
dev` writes its endpoints and a client's environment to the project's .reclaim/dev.json
(removed when it stops), and a command run in the project takes them when the
environment and the flags name no queue of their own (--local takes them too).

`reclaim submit` goes through the running cloud's own submit function (POST /jobs) when
it knows its URL (RECLAIM_SUBMIT_URL; dev.json sets it): the functions validate the job
against the pipelines they serve, so a pipeline the running cloud does not know is
refused with the same 400 {"error", "reason"} curl gets, never queued to sit deferred.
Without a URL the CLI writes the job itself, checked against the pipelines it imports.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from reclaim.cli.context import EXIT_UNAVAILABLE, EXIT_USAGE, CliError

DEV_FILE = Path(".reclaim") / "dev.json"
SUBMIT_URL_ENV = "RECLAIM_SUBMIT_URL"
"""The submit function's URL (terraform output submit_url; dev.json's endpoint)."""
QUEUE_ENV = ("STORAGE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "RECLAIM_RECORDS_BUCKET")
"""Variables that point a command at a queue: any of them set, dev.json is not read."""
SUBMIT_TIMEOUT_S = 60.0


def running_dev(root: Path) -> dict[str, Any] | None:
    """The project's dev.json while the `reclaim dev` that wrote it is alive, else None."""
    path = root / DEV_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        pid = int(doc["pid"])
        client_env = dict(doc["client_env"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a SIGKILLed `reclaim dev` left it behind
    except PermissionError:
        pass  # alive, another user's
    return {"client_env": {str(k): str(v) for k, v in client_env.items()}, "path": path}


def use_running_dev(
    root: Path, env: MutableMapping[str, str], *, local: bool, flags: bool
) -> Path | None:
    """Point this process at the project's running `reclaim dev` when nothing else is named
    (or --local asks for the local cloud); the dev.json used, or None."""
    if flags or (not local and any(env.get(name) for name in QUEUE_ENV)):
        return None
    found = running_dev(root)
    if found is None:
        return None
    env.update(found["client_env"])
    return Path(found["path"])


def submit_url(env: MutableMapping[str, str]) -> str | None:
    url = env.get(SUBMIT_URL_ENV, "").strip().rstrip("/")
    return url or None


def submit_over_http(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /jobs to the running cloud's submit function: its answer, or CliError with its
    refusal ("<error>: <reason>", exit 2 for a 4xx, 3 when it cannot be reached)."""
    request = urllib.request.Request(
        f"{url}/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **_auth(url)},
    )
    try:
        with urllib.request.urlopen(request, timeout=SUBMIT_TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        refusal = _refusal(exc)
        code = EXIT_USAGE if 400 <= exc.code < 500 else EXIT_UNAVAILABLE
        raise CliError(
            f"{refusal.get('error', exc.reason)}: {refusal.get('reason', '')} "
            f"(HTTP {exc.code} from {url}/jobs)".replace(":  (", " ("),
            code,
        ) from None
    except (OSError, ValueError) as exc:
        raise CliError(
            f"cannot reach the submit function at {url} ({SUBMIT_URL_ENV}): {exc}",
            EXIT_UNAVAILABLE,
        ) from None


def _refusal(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        body = json.loads(exc.read())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _auth(url: str) -> dict[str, str]:
    """An ID token for a Cloud Run URL (https); none for the local cloud (http)."""
    if not url.startswith("https://"):
        return {}
    import google.auth.transport.requests
    from google.oauth2 import id_token

    token = id_token.fetch_id_token(google.auth.transport.requests.Request(), url)
    return {"Authorization": f"Bearer {token}"}
