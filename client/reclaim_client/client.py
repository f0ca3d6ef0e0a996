"""The client: one object per reclaim deployment (its submit function's URL, and for the
operator calls its admin function's: docs/api.md, "Operator routes").

On GCP each request carries a Google ID token for the function's URL (its audience),
minted by google-auth from the environment's credentials
(https://cloud.google.com/run/docs/authenticating/service-to-service); a local URL gets
none. A request whose connection dropped is sent again, a few times with backoff, when
sending it twice is harmless: reads, and submits, whose every job carries an id (the
client chooses one when the caller did not), so a repeat finds the same job. A 429 (Cloud
Run found no free instance in time, so the request never ran:
https://cloud.google.com/run/docs/about-instance-autoscaling) is sent again for every
call, after the answer's Retry-After when it has one, else with backoff and jitter; so
is a 503 for the calls safe to repeat.

Ids are checked here before anything is sent (the API's rule: letters, digits, `.`, `_`,
`-`, starting with a letter or digit, at most 128, never `..`): a path segment `.` or
`..` would otherwise be folded away by the URL's dot-segment rules and ask another route.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from reclaim_client.errors import (
    InvalidRequest,
    NoAdminUrl,
    Unavailable,
    WaitTimeout,
    from_answer,
)
from reclaim_client.models import BatchProgress, BulkCount, BulkDone, Job, Output, Submitted

WAIT_PER_REQUEST_S = 50.0
"""Each waiting read asks the server for at most this long (its maximum is 60 s)."""
RETRY_AFTER_MAX_S = 60.0
"""The longest pause a Retry-After may ask of one retry."""
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
_ID = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ACTIONS = ("cancel", "retry")
DOWNLOAD_PIECE_BYTES = 1024 * 1024


class Client:
    """Submit, follow, cancel, retry and list the jobs of one reclaim deployment.

    `url` is the submit function's; `admin_url` the admin function's, which alone serves
    the operator calls (cancel, retry, count, confirm) to its invokers (the operators):
    without it those calls raise NoAdminUrl, before any request."""

    def __init__(
        self,
        url: str,
        *,
        admin_url: str | None = None,
        audience: str | None = None,
        session: requests.Session | None = None,
        timeout: float = 30.0,
        attempts: int = 4,
    ) -> None:
        self.url = url.rstrip("/")
        self.admin_url = admin_url.rstrip("/") if admin_url else None
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self._session = session if session is not None else _session_for(self.url, audience)
        self._admin_session: requests.Session | None = session
        if session is None and self.admin_url is not None:  # a token for its own audience
            self._admin_session = _session_for(self.admin_url, None)

    # --- submitting

    def submit(
        self,
        pipeline: str,
        payload: Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        **fields: Any,
    ) -> Job:
        """Submit one job (idempotent: the same id and content answer the same job)."""
        body = {
            "pipeline": pipeline,
            "payload": dict(payload or {}),
            "id": _checked(id, "job id") if id is not None else _new_id(),
            **fields,
        }
        answer = self._call("POST", "/jobs", body=body, safe=True)
        return Job.from_json(answer)

    def submit_batch(
        self, jobs: list[Mapping[str, Any]], *, batch_id: str | None = None
    ) -> Submitted:
        """Submit jobs as one batch, all or none (each without an id gets one)."""
        listed = [{**job, "id": _checked(job.get("id") or _new_id(), "job id")} for job in jobs]
        if batch_id is not None:
            _checked(batch_id, "batch id")
        body: dict[str, Any] = {"jobs": listed, **({"batch_id": batch_id} if batch_id else {})}
        answer = self._call("POST", "/jobs", body=body, safe=True)
        return Submitted(
            jobs=[Job.from_json(j) for j in answer.get("jobs", [])],
            batch_id=answer.get("batch_id"),
            created=int(answer.get("created") or 0),
            raw=answer,
        )

    # --- following

    def get(self, job_id: str) -> Job:
        """The job now (the read is also the queue's watchdog)."""
        return Job.from_json(self._call("GET", f"/jobs/{_segment(job_id, 'job id')}", safe=True))

    def changes(self, job_id: str, *, timeout: float | None = None) -> Iterator[Job]:
        """The job, then again at each change of its record (status, stage, progress),
        until it ends or `timeout` seconds pass; no polling loop of yours."""
        deadline = None if timeout is None else time.monotonic() + timeout
        path = f"/jobs/{_segment(job_id, 'job id')}"
        job = self.get(job_id)
        yield job
        while not job.ended:
            left = WAIT_PER_REQUEST_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return
            params = {"wait": f"{min(left, WAIT_PER_REQUEST_S):.2f}", "after": str(job.generation)}
            answer = self._send("GET", path, params=params, safe=True)
            changed = Job.from_json(_body(answer))
            if changed.generation != job.generation:
                yield changed
            elif not changed.ended:
                _pause_as_asked(answer, deadline)  # the server could not hold the wait
            job = changed

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Block until the job is done, failed or cancelled; WaitTimeout after `timeout`.

        Asks for the end only (`until=ended`): the server polls the status from the
        record's metadata, so a running job's heartbeats cost neither an answer nor a read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        path = f"/jobs/{_segment(job_id, 'job id')}"
        job: Job | None = None
        while job is None or not job.ended:
            left = WAIT_PER_REQUEST_S if deadline is None else deadline - time.monotonic()
            if job is not None and left <= 0:
                raise WaitTimeout(
                    0, "wait timeout", f"job {job_id} still {job.status} after {timeout}s"
                )
            params = {"wait": f"{max(0.0, min(left, WAIT_PER_REQUEST_S)):.2f}", "until": "ended"}
            answer = self._send("GET", path, params=params, safe=True)
            job = Job.from_json(_body(answer))
            if not job.ended:
                _pause_as_asked(answer, deadline)  # the server could not hold the wait
        return job

    def outputs(self, job_id: str) -> list[Output]:
        """The job's committed outputs: name, attempt, size, type (never what a lost
        attempt wrote)."""
        body = self._call("GET", f"/jobs/{_segment(job_id, 'job id')}/outputs", safe=True)
        return [Output.from_json(o) for o in body.get("outputs", [])]

    def download(
        self,
        job_id: str,
        name: str,
        dest: str | Path | None = None,
        *,
        attempt: int | None = None,
    ) -> bytes | Path:
        """One committed output: its bytes, or with `dest` written there (a folder: under
        its name) in pieces, whatever its size, and the path returned. On GCP the API
        answers a redirect to a signed URL and the bytes come from Cloud Storage (the ID
        token is not sent there: requests drops it on a redirect to another host)."""
        path = f"/jobs/{_segment(job_id, 'job id')}/outputs/{quote(name)}"
        params = {"attempt": str(attempt)} if attempt is not None else None
        response = self._get_stream(path, params)
        with response:
            if dest is None:
                return response.content
            target = Path(dest)
            if target.is_dir():
                target = target / name.rsplit("/", 1)[-1]
            partial = target.with_name(target.name + ".part")
            with partial.open("wb") as out:
                for piece in response.iter_content(DOWNLOAD_PIECE_BYTES):
                    out.write(piece)
            partial.replace(target)
            return target

    def list(
        self,
        *,
        batch: str | None = None,
        status: str | None = None,
        pipeline: str | None = None,
        tag: str | None = None,
        page_size: int = 50,
    ) -> Iterator[Job]:
        """Every matching job, page after page (the server reads its indexes)."""
        if batch is not None:
            _checked(batch, "batch id")
        params = {
            "batch": batch,
            "status": status,
            "pipeline": pipeline,
            "tag": tag,
            "page_size": str(page_size),
        }
        token: str | None = None
        while True:
            asked = {k: v for k, v in {**params, "page_token": token}.items() if v}
            page = self._call("GET", "/jobs", params=asked, safe=True)
            for summary in page.get("jobs", []):
                yield Job.from_json(summary)
            token = page.get("next_page_token")
            if not token:
                return

    def batch(self, batch_id: str) -> BatchProgress:
        """A batch's progress, counted by the server from its markers."""
        path = f"/batches/{_segment(batch_id, 'batch id')}/progress"
        return BatchProgress.from_json(self._call("GET", path, safe=True))

    # --- a person's actions (operator routes: the admin function's)

    def cancel(self, job_id: str, reason: str | None = None) -> Job:
        """queued, running or waiting → cancelled; NotAllowed once it ended."""
        body = {"reason": reason} if reason else {}
        path = f"/jobs/{_segment(job_id, 'job id')}/cancel"
        return Job.from_json(self._call("POST", path, body=body, admin=True))

    def retry(self, job_id: str) -> Job:
        """failed or cancelled → queued with a fresh attempt budget; NotAllowed otherwise."""
        path = f"/jobs/{_segment(job_id, 'job id')}/retry"
        return Job.from_json(self._call("POST", path, body={}, admin=True))

    def count(self, action: str, **selection: str) -> BulkCount:
        """How many jobs `action` ("cancel" or "retry") would move: batch, status,
        pipeline, since; nothing changes."""
        path = f"/bulk/{_action(action)}"
        body = self._call("POST", path, body=selection, safe=True, admin=True)
        counted = (body["action"], body["matching"], body["jobs"], body["confirm"])
        return BulkCount(*counted, selection=dict(selection))

    def confirm(self, count: BulkCount, **selection: str) -> BulkDone:
        """Act on the jobs a count showed (at most 100 per call; the rest: count again).
        The selection is the count's own unless given (it must be the same)."""
        body = self._call(
            "POST",
            f"/bulk/{_action(count.action)}",
            body={**(selection or count.selection), "confirm": count.confirm},
            admin=True,
        )
        return BulkDone(
            body["action"],
            body["matching"],
            body["acted"],
            body["skipped"],
            body["errors"],
            body["remaining"],
        )

    # --- waits (docs/waiting.md): the first completion wins

    def complete(self, waitpoint: str, data: Any = None) -> dict[str, Any]:
        """Complete a waitpoint: its URL (a plain POST, as a provider sends it: the signed
        token is the proof), or its token (through the admin function, as an operator).
        The answer says "resumed" or "recorded"; NotAllowed once another completion or the
        timeout came first, Gone once its job ended, NotFound for a token not ours."""
        if waitpoint.startswith(("https://", "http://")):
            response = requests.post(waitpoint, json=data, timeout=self.timeout)
            if response.status_code >= 400:
                raise from_answer(response.status_code, _json(response))
            return dict(_json(response))
        path = f"/waitpoints/{_segment(waitpoint, 'waitpoint token')}"
        return self._call("POST", path, body=data, admin=True)

    def complete_job(self, job_id: str, data: Any = None) -> dict[str, Any]:
        """Complete the waitpoint a job is parked on (an operator's approval); NotAllowed
        when it waits for none."""
        path = f"/jobs/{_segment(job_id, 'job id')}/complete"
        return self._call("POST", path, body={"data": data}, admin=True)

    # --- the wire

    def _get_stream(self, path: str, params: Mapping[str, str] | None) -> requests.Response:
        """A GET whose body is read as a stream (a download), sent again as _send sends a
        read: after a dropped connection, a 429 or a 503, each pause the answer's
        Retry-After, else a backoff with jitter."""
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._session.get(
                    self.url + path, params=params, timeout=self.timeout, stream=True
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt == self.attempts:
                    raise Unavailable(0, "unavailable", f"GET {path}: {exc}") from exc
                time.sleep(_backoff(attempt))
                continue
            if response.status_code < 400:
                return response
            if response.status_code not in (429, 503) or attempt == self.attempts:
                with response:
                    raise from_answer(response.status_code, _json(response))
            response.close()
            time.sleep(_retry_after(response) or _backoff(attempt))
        raise Unavailable(503, "unavailable", f"GET {path}: still unavailable")

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        safe: bool = False,
        admin: bool = False,
    ) -> dict[str, Any]:
        """One call's JSON answer (see _send)."""
        return _body(self._send(method, path, body=body, params=params, safe=safe, admin=admin))

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        safe: bool = False,
        admin: bool = False,
    ) -> requests.Response:
        """One request (to the admin function when `admin`), answered 2xx; a refusal
        raises. Sent again, up to `attempts` times: after a 429 (never served), and when
        `safe` after a dropped connection or a 503; each pause the answer's Retry-After,
        else a backoff with jitter."""
        base, session = self._base(method, path, admin)
        tries = self.attempts
        for attempt in range(1, tries + 1):
            try:
                response = session.request(
                    method,
                    base + path,
                    json=body,
                    params=params,
                    timeout=self.timeout + float((params or {}).get("wait", 0)),
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                if not safe or attempt == tries:
                    raise Unavailable(0, "unavailable", f"{method} {path}: {exc}") from exc
                time.sleep(_backoff(attempt))
                continue
            again = response.status_code == 429 or (safe and response.status_code == 503)
            if again and attempt < tries:
                time.sleep(_retry_after(response) or _backoff(attempt))
            elif response.status_code >= 400:
                raise from_answer(response.status_code, _json(response))
            else:
                return response
        raise Unavailable(503, "unavailable", f"{method} {path}: still unavailable")

    def _base(self, method: str, path: str, admin: bool) -> tuple[str, requests.Session]:
        if not admin:
            return self.url, self._session
        if self.admin_url is None or self._admin_session is None:
            raise NoAdminUrl(
                0,
                "no admin url",
                f"{method} {path} is an operator route, served by the admin function: "
                "make the Client with admin_url= (terraform output admin_url)",
            )
        return self.admin_url, self._admin_session


def _session_for(url: str, audience: str | None) -> requests.Session:
    """A plain session for a local URL; else one that adds an ID token for `audience`
    (the URL by default), minted from Application Default Credentials."""
    if urlsplit(url).hostname in _LOCAL_HOSTS and audience is None:
        return requests.Session()
    from google.auth.transport.requests import AuthorizedSession, Request
    from google.oauth2 import id_token

    credentials = id_token.fetch_id_token_credentials(audience or url, request=Request())
    return AuthorizedSession(credentials)


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"error": "not json", "reason": response.text[:200]}


def _body(response: requests.Response) -> dict[str, Any]:
    found = _json(response)
    return dict(found) if isinstance(found, dict) else {}


def _checked(text: object, what: str) -> str:
    """An id the API can take, else InvalidRequest before anything is sent."""
    if not isinstance(text, str) or not _ID.fullmatch(text):
        raise InvalidRequest(
            0,
            f"invalid {what}",
            f"{what} {str(text)[:40]!r} is invalid: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 128, never '..' (nothing was sent)",
        )
    return text


def _segment(text: str, what: str) -> str:
    return quote(_checked(text, what), safe="")


def _action(action: str) -> str:
    if action not in _ACTIONS:
        raise InvalidRequest(
            0, "invalid action", f"action must be cancel or retry, not {str(action)[:40]!r}"
        )
    return action


def _backoff(attempt: int) -> float:
    """0.25 s doubling to at most 4 s, with full jitter over its upper half."""
    step = min(0.25 * 2 ** (attempt - 1), 4.0)
    return step * random.uniform(0.5, 1.0)


def _retry_after(response: requests.Response) -> float | None:
    """The answer's Retry-After in seconds (delay-seconds or an HTTP date), at most
    RETRY_AFTER_MAX_S, with up to a quarter more of jitter so that the callers told
    the same do not come back at once; None without one."""
    raw = (response.headers.get("Retry-After") or "").strip()
    if not raw:
        return None
    if raw.isascii() and raw.isdigit():
        seconds = float(raw[:6])
    else:
        try:
            at = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        seconds = (at - datetime.now(UTC)).total_seconds()
    seconds = min(max(seconds, 0.0), RETRY_AFTER_MAX_S)
    return seconds * random.uniform(1.0, 1.25)


def _pause_as_asked(response: requests.Response, deadline: float | None) -> None:
    """A waiting read answered early (no room on its instance): pause as its Retry-After
    asks (never past the caller's deadline) before asking again."""
    pause = _retry_after(response)
    if pause is None:
        return
    if deadline is not None:
        pause = min(pause, max(0.0, deadline - time.monotonic()))
    time.sleep(pause)


def _new_id() -> str:
    return f"c-{uuid.uuid4().hex}"
