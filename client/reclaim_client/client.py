"""The client: one object per reclaim deployment (its submit function's URL, and for the
operator calls its admin function's: docs/api.md, "Operator routes").

On GCP each request carries a Google ID token for the function's URL (its audience),
minted by google-auth from the environment's credentials
(https://cloud.google.com/run/docs/authenticating/service-to-service); a local URL gets
none. A request whose connection dropped is sent again, a few times with backoff, when
sending it twice is harmless: reads, and submits, whose every job carries an id (the
client chooses one when the caller did not), so a repeat finds the same job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from reclaim_client.errors import NoAdminUrl, Unavailable, WaitTimeout, from_answer
from reclaim_client.models import BatchProgress, BulkCount, BulkDone, Job, Submitted

WAIT_PER_REQUEST_S = 50.0
"""Each waiting read asks the server for at most this long (its maximum is 60 s)."""
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


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
            "id": id or _new_id(),
            **fields,
        }
        answer = self._call("POST", "/jobs", body=body, safe=True)
        return Job.from_json(answer)

    def submit_batch(
        self, jobs: list[Mapping[str, Any]], *, batch_id: str | None = None
    ) -> Submitted:
        """Submit jobs as one batch, all or none (each without an id gets one)."""
        listed = [{**job, "id": job.get("id") or _new_id()} for job in jobs]
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
        return Job.from_json(self._call("GET", f"/jobs/{_segment(job_id)}", safe=True))

    def changes(self, job_id: str, *, timeout: float | None = None) -> Iterator[Job]:
        """The job, then again at each change of its record (status, stage, progress),
        until it ends or `timeout` seconds pass; no polling loop of yours."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self.get(job_id)
        yield job
        while not job.ended:
            left = WAIT_PER_REQUEST_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return
            params = {"wait": f"{min(left, WAIT_PER_REQUEST_S):.2f}", "after": str(job.generation)}
            path = f"/jobs/{_segment(job_id)}"
            changed = Job.from_json(self._call("GET", path, params=params, safe=True))
            if changed.generation != job.generation:
                yield changed
            job = changed

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Block until the job is done, failed or cancelled; WaitTimeout after `timeout`.

        Asks for the end only (`until=ended`): the server polls the status from the
        record's metadata, so a running job's heartbeats cost neither an answer nor a read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        path = f"/jobs/{_segment(job_id)}"
        job: Job | None = None
        while job is None or not job.ended:
            left = WAIT_PER_REQUEST_S if deadline is None else deadline - time.monotonic()
            if job is not None and left <= 0:
                raise WaitTimeout(
                    0, "wait timeout", f"job {job_id} still {job.status} after {timeout}s"
                )
            params = {"wait": f"{max(0.0, min(left, WAIT_PER_REQUEST_S)):.2f}", "until": "ended"}
            job = Job.from_json(self._call("GET", path, params=params, safe=True))
        return job

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
        path = f"/batches/{_segment(batch_id)}/progress"
        return BatchProgress.from_json(self._call("GET", path, safe=True))

    # --- a person's actions (operator routes: the admin function's)

    def cancel(self, job_id: str, reason: str | None = None) -> Job:
        """queued, running or waiting → cancelled; NotAllowed once it ended."""
        body = {"reason": reason} if reason else {}
        path = f"/jobs/{_segment(job_id)}/cancel"
        return Job.from_json(self._call("POST", path, body=body, admin=True))

    def retry(self, job_id: str) -> Job:
        """failed or cancelled → queued with a fresh attempt budget; NotAllowed otherwise."""
        path = f"/jobs/{_segment(job_id)}/retry"
        return Job.from_json(self._call("POST", path, body={}, admin=True))

    def count(self, action: str, **selection: str) -> BulkCount:
        """How many jobs `action` ("cancel" or "retry") would move: batch, status,
        pipeline, since; nothing changes."""
        path = f"/bulk/{_segment(action)}"
        body = self._call("POST", path, body=selection, safe=True, admin=True)
        return BulkCount(body["action"], body["matching"], body["jobs"], body["confirm"])

    def confirm(self, count: BulkCount, **selection: str) -> BulkDone:
        """Act on the selection a count was made of (at most 100 jobs per call)."""
        body = self._call(
            "POST",
            f"/bulk/{_segment(count.action)}",
            body={**selection, "confirm": count.confirm},
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
        path = f"/waitpoints/{_segment(waitpoint)}"
        return self._call("POST", path, body=data, admin=True)

    def complete_job(self, job_id: str, data: Any = None) -> dict[str, Any]:
        """Complete the waitpoint a job is parked on (an operator's approval); NotAllowed
        when it waits for none."""
        path = f"/jobs/{_segment(job_id)}/complete"
        return self._call("POST", path, body={"data": data}, admin=True)

    # --- the wire

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
        """One request (to the admin function when `admin`); a dropped connection or a 503
        is sent again when `safe`."""
        base, session = self.url, self._session
        if admin:
            if self.admin_url is None or self._admin_session is None:
                raise NoAdminUrl(
                    0,
                    "no admin url",
                    f"{method} {path} is an operator route, served by the admin function: "
                    "make the Client with admin_url= (terraform output admin_url)",
                )
            base, session = self.admin_url, self._admin_session
        tries = self.attempts if safe else 1
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
                if attempt == tries:
                    raise Unavailable(0, "unavailable", f"{method} {path}: {exc}") from exc
            else:
                if response.status_code == 503 and attempt < tries:
                    pass  # an outage the server says is worth retrying
                elif response.status_code >= 400:
                    raise from_answer(response.status_code, _json(response))
                else:
                    return dict(_json(response))
            time.sleep(min(0.25 * 2 ** (attempt - 1), 4.0))
        raise Unavailable(503, "unavailable", f"{method} {path}: still unavailable")


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


def _segment(text: str) -> str:
    return quote(text, safe="")


def _new_id() -> str:
    return f"c-{uuid.uuid4().hex}"
