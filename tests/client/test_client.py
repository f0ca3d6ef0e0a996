"""The Python client against the local cloud over HTTP: submit and wait for done,
follow progress, cancel a running job, retry a failed one, page through a list, a
batch's progress, the refusals as exceptions, and a submit whose answer was lost on the
way back sent again safely."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from reclaim_client import Client, InvalidRequest, Job, NotAllowed, NotFound, WaitTimeout

from reclaim.local.cloud import LocalCloud
from tests.integration.cloud_support import fast_cloud
from tests.polling import wait_for


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(max_instances=2, concurrency=4) as c:
        yield c


@pytest.fixture(scope="module")
def client(cloud: LocalCloud) -> Client:
    return Client(cloud.endpoints["submit"], admin_url=cloud.endpoints["admin"])


def new_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def test_submit_then_wait_for_done_following_progress(client: Client) -> None:
    job = client.submit("demo", {"stages": 3, "sleep_s": 0.6})
    assert job.status == "queued" and job.id.startswith("c-")  # the client chose an id
    seen = list(client.changes(job.id, timeout=120))
    assert seen[-1].status == "done"
    reports = [j.progress for j in seen if j.progress is not None]
    assert reports, [j.status for j in seen]
    assert reports[-1].done == 3 and reports[-1].total == 3 and reports[-1].fraction == 1.0
    assert [r.done for r in reports] == sorted(r.done for r in reports)  # never backwards
    done = client.wait(job.id, timeout=30)
    assert done.ended and done.result is not None and done.result["stages"] == 3


def test_wait_blocks_on_a_running_job_until_it_ends_and_times_out_when_asked(
    client: Client,
) -> None:
    job = client.submit("demo", {"stages": 3, "sleep_s": 1.0}, id=new_id("waits"))
    wait_for("running", lambda: client.get(job.id).status == "running")
    with pytest.raises(WaitTimeout):  # a wait shorter than the job
        client.wait(job.id, timeout=0.3)
    done = client.wait(job.id, timeout=120)  # one request per 50 s, until=ended
    assert done.status == "done" and done.result is not None and done.result["stages"] == 3


def test_cancel_a_running_job(client: Client) -> None:
    # long enough that the cancel lands while it runs (a stage checks for it as it sleeps)
    job = client.submit("demo", {"stages": 2, "sleep_s": 30}, id=new_id("cancel"))
    wait_for("running", lambda: client.get(job.id).status == "running")
    cancelled = client.cancel(job.id, reason="not needed")
    assert cancelled.status == "cancelled"
    with pytest.raises(NotAllowed) as refused:
        client.cancel(job.id)
    assert refused.value.status == 409 and refused.value.reason
    assert client.wait(job.id, timeout=30).status == "cancelled"


def test_retry_a_failed_job(client: Client) -> None:
    payload = {"stages": 1, "fail_at": 0, "fail_attempts": 1, "permanent": True}
    job = client.submit("demo", payload)
    assert client.wait(job.id, timeout=120).status == "failed"
    client.retry(job.id)
    done = client.wait(job.id, timeout=120)
    assert done.status == "done" and done.attempts == 2


def test_page_through_a_list_and_follow_a_batch(client: Client) -> None:
    batch_id = new_id("list")
    jobs = [{"pipeline": "demo", "id": f"{batch_id}-{n:02d}"} for n in range(7)]
    submitted = client.submit_batch(jobs, batch_id=batch_id)
    assert submitted.created == 7 and submitted.batch_id == batch_id
    listed = [j.id for j in client.list(batch=batch_id, page_size=3)]
    assert listed == sorted(j["id"] for j in jobs)
    progress = wait_for("the batch finished", lambda: (p := client.batch(batch_id)).finished and p)
    assert (progress.total, progress.done, progress.pending) == (7, 7, 0)
    assert [j.status for j in client.list(batch=batch_id, status="done")] == ["done"] * 7


def test_list_by_tag_pages_through_the_tagged_jobs_only(client: Client) -> None:
    tag = new_id("t")
    tagged = sorted(client.submit("demo", id=new_id("tagged"), tags=[tag]).id for _ in range(4))
    client.submit("demo", id=new_id("untagged"), tags=[new_id("other")])
    assert [j.id for j in client.list(tag=tag, page_size=3)] == tagged
    assert all(tag in j.tags for j in client.list(tag=tag))


def test_refusals_are_exceptions(client: Client) -> None:
    with pytest.raises(NotFound):
        client.get("no-such-job")
    with pytest.raises(InvalidRequest) as bad:
        client.submit("no-such-pipeline")
    assert bad.value.error == "invalid request" and "pipeline" in bad.value.reason
    with pytest.raises(InvalidRequest):
        list(client.list(status="done"))  # done jobs are listed by batch


def test_bulk_retry_with_a_count_first(client: Client) -> None:
    batch_id = new_id("bulk")
    failing = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "permanent": True}}
    client.submit_batch([failing, failing], batch_id=batch_id)
    wait_for("both failed", lambda: client.batch(batch_id).failed == 2)
    count = client.count("retry", batch=batch_id, since="24h")  # a relative since (issue 41, 2)
    assert count.matching == 2
    done = client.confirm(count)  # the count's own selection
    assert len(done.acted) == 2 and done.remaining == 0
    with pytest.raises(InvalidRequest, match="used already"):  # a token acts once
        client.confirm(count)


class _LoseFirstAnswer(BaseHTTPRequestHandler):
    """Forwards every request; the first POST's answer is dropped (connection closed)."""

    upstream = ""
    lost: list[str] = []
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        got = requests.request(
            self.command, self.upstream + self.path, data=body, headers=headers, timeout=60
        )
        with self.lock:
            drop = self.command == "POST" and not self.lost
            if drop:
                self.lost.append(self.path)
        if drop:  # the job was written; its answer never reaches the client
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.send_response(got.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(got.content)))
        self.end_headers()
        self.wfile.write(got.content)


def test_a_submit_whose_answer_was_lost_is_sent_again_safely(cloud: LocalCloud) -> None:
    _LoseFirstAnswer.upstream = cloud.endpoints["submit"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LoseFirstAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        via = Client(f"http://127.0.0.1:{server.server_address[1]}")
        job = via.submit("demo", {"stages": 1})
        assert _LoseFirstAnswer.lost == ["/jobs"]  # the first answer was lost
        assert isinstance(job, Job) and job.status in ("queued", "running", "done")
        assert job.raw["created"] is False  # the second send found the job the first made
        assert via.wait(job.id, timeout=60).status == "done"
    finally:
        server.shutdown()


def test_operator_calls_go_to_the_admin_function_and_need_its_url(cloud: LocalCloud) -> None:
    """Submit no longer serves cancel, retry or bulk (the admin function does, to its
    invokers): a Client without admin_url refuses them before sending anything, and
    submit itself answers 404 naming the admin function."""
    from reclaim_client import NoAdminUrl, NotFound

    plain = Client(cloud.endpoints["submit"])
    job = plain.submit("demo", {"stages": 1, "sleep_s": 5}, id=new_id("no-admin"))
    with pytest.raises(NoAdminUrl, match="admin_url"):
        plain.cancel(job.id)
    with pytest.raises(NoAdminUrl):
        plain.count("retry", batch="anything")
    on_submit = Client(cloud.endpoints["submit"], admin_url=cloud.endpoints["submit"])
    with pytest.raises(NotFound) as refused:
        on_submit.cancel(job.id)
    assert refused.value.error == "operator route" and "admin function" in refused.value.reason
    assert plain.get(job.id).status != "cancelled"


class _Counting(BaseHTTPRequestHandler):
    """Forwards every request to `upstream` and counts them; the first `refuse` answers
    are Cloud Run's 429 (no instance free in time) with a Retry-After, never forwarded."""

    upstream = ""
    seen: list[str] = []
    refuse = 0
    retry_after = "1"
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            self.seen.append(f"{self.command} {self.path}")
            refused = len(self.seen) <= self.refuse
        if refused:
            text = b"The request was aborted because there was no available instance."
            self.send_response(429)
            self.send_header("Retry-After", self.retry_after)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        got = requests.request(
            self.command, self.upstream + self.path, data=body, headers=headers, timeout=90
        )
        self.send_response(got.status_code)
        for key in ("Content-Type", "Retry-After"):
            if key in got.headers:
                self.send_header(key, got.headers[key])
        self.send_header("Content-Length", str(len(got.content)))
        self.end_headers()
        self.wfile.write(got.content)


@pytest.fixture
def counting(cloud: LocalCloud) -> Iterator[tuple[type[_Counting], str]]:
    """The proxy in front of submit, and its URL."""
    _Counting.seen, _Counting.refuse, _Counting.retry_after = [], 0, "1"
    _Counting.upstream = cloud.endpoints["submit"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield _Counting, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize("bad", [".", "..", "a..b", "", "-lead", "a/b", "x" * 129])
def test_an_invalid_id_is_refused_before_any_request(
    counting: tuple[type[_Counting], str], bad: str
) -> None:
    """Issue 41, 7: `.` and `..` are dot segments a URL folds away (GET /jobs/. became GET
    /jobs/, a listing made into Job(id='None')); the client now refuses every id the API
    would, and sends nothing."""
    proxy, url = counting
    client = Client(url, admin_url=url)
    calls = [
        lambda: client.get(bad),
        lambda: client.wait(bad, timeout=1),
        lambda: next(client.changes(bad, timeout=1)),
        lambda: client.batch(bad),
        lambda: client.cancel(bad),
        lambda: client.retry(bad),
        lambda: client.submit("demo", id=bad),
        lambda: client.submit_batch([{"pipeline": "demo"}], batch_id=bad),
        lambda: list(client.list(batch=bad)),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as refused:
            call()
        assert refused.value.status == 0 and "nothing was sent" in refused.value.reason
    assert proxy.seen == []


class _Sleeps:
    """The client's clock, recording each pause it takes (and taking it)."""

    def __init__(self) -> None:
        import time

        self.time = time
        self.paused: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.paused.append(seconds)
        self.time.sleep(seconds)

    def monotonic(self) -> float:
        return self.time.monotonic()


def test_a_429_is_sent_again_after_its_retry_after(
    counting: tuple[type[_Counting], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, 7: Cloud Run's 429 (the request never ran) is sent again, for a submit
    and for an operator call alike, after the pause the answer's Retry-After asks."""
    import reclaim_client.client as wire

    clock = _Sleeps()
    monkeypatch.setattr(wire, "time", clock)
    proxy, url = counting
    proxy.refuse, proxy.retry_after = 2, "1"
    job = Client(url, attempts=4).submit("demo", {"stages": 1}, id=new_id("busy"))
    assert job.status in ("queued", "running", "done") and job.raw["created"] is True
    assert [s.split(" ")[0] for s in proxy.seen] == ["POST"] * 3
    assert len(clock.paused) == 2 and all(1.0 <= p <= 1.25 for p in clock.paused)
    proxy.seen, proxy.refuse, proxy.retry_after = [], 1, "2"
    with pytest.raises(NotFound):  # not safe to repeat, yet a 429 never ran: sent again
        Client(url, admin_url=url).retry("no-such-job-anywhere")
    assert len(proxy.seen) == 2 and 2.0 <= clock.paused[-1] <= 2.5
    proxy.seen, proxy.refuse = [], 5
    with pytest.raises(Exception) as gave_up:  # attempts spent: the last answer's refusal
        Client(url, attempts=2).get(job.id)
    assert getattr(gave_up.value, "status", None) == 429 and len(proxy.seen) == 2
