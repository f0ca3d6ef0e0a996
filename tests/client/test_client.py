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
    count = client.count("retry", batch=batch_id)
    assert count.matching == 2
    done = client.confirm(count, batch=batch_id)
    assert len(done.acted) == 2 and done.remaining == 0


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
