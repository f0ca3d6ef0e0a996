"""Workflows on the local cloud, over HTTP and real fake-gcs-server: batch callbacks
exactly once (100 members racing on two instances; a SIGKILL right after the last
terminal write, repaired by the sweep), a diamond DAG in order with D reading B's and C's
results, a failed parent cancelling its child, cycles and unknown parents refused, and
the webhook: signed, retried with backoff on a 500, refused for private addresses."""

from __future__ import annotations

import functools
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import trustme

from reclaim.local.cloud import LocalCloud
from shared.features import workflow_graph as graph
from shared.pipelines import webhook_delivery as wd
from shared.storage import job_object, record_name_id
from tests import polling
from tests.integration.cloud_support import lines_about, record_buckets, records_bucket

SECRET = "s3cret-" + uuid.uuid4().hex
VICTIM = f"victim-{uuid.uuid4().hex[:8]}"


class Receiver:
    """An HTTPS webhook receiver on 127.0.0.1 (a trustme certificate for localhost): it
    records each request, answering from a per-path script of statuses (then 200)."""

    def __init__(self, tmp: Path) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("localhost")
        self.ca_file = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.requests: list[tuple[float, str, dict[str, str], bytes]] = []
        self.script: dict[str, list[int]] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append((time.time(), self.path, dict(self.headers), body))
                statuses = receiver.script.get(self.path, [])
                code = statuses.pop(0) if statuses else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"https://localhost:{self.port}{path}"

    def hits(self, path: str) -> list[tuple[float, str, dict[str, str], bytes]]:
        return [r for r in self.requests if r[1] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    r = Receiver(tmp_path_factory.mktemp("webhook"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def cloud(receiver: Receiver) -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=3.0,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=2.0,
        function_env={
            "RECLAIM_PIPELINE_MODULES": "tests.integration.sample_pipelines",
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "1",
            "RECLAIM_BACKOFF_MAX_SECONDS": "2",
            "RECLAIM_WEBHOOK_ALLOW_LOOPBACK": "1",  # the local cloud's receiver only
            "RECLAIM_WEBHOOK_SECRET_TEST": SECRET,
            "SSL_CERT_FILE": str(receiver.ca_file),  # trust the test receiver's CA
            "RECLAIM_FAULT_KILL": f"after-terminal:{VICTIM}",  # shared.faults, test-only
        },
    ) as c:
        yield c


wait_for = functools.partial(polling.wait_for, timeout=120, interval=0.3)


def post(cloud: LocalCloud, body: dict[str, Any]) -> requests.Response:
    return requests.post(cloud.endpoints["jobs"], json=body, timeout=60)


def get(cloud: LocalCloud, path: str) -> dict[str, Any]:
    resp = requests.get(f"{cloud.endpoints['submit']}{path}", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def callback_records(cloud: LocalCloud, batch_id: str) -> list[dict[str, Any]]:
    """Every record in the bucket that is a callback of this batch (read as stored)."""
    found = []
    blobs = [b for r in record_buckets(cloud) for b in r.list_blobs(prefix="jobs/")]
    blobs = [b for b in blobs if (record_name_id(b.name) or "").startswith("cb-")]
    for blob in blobs:
        record = json.loads(blob.download_as_bytes())
        if record.get("callback_of") == batch_id:
            found.append(record)
    return found


def settled_callback(cloud: LocalCloud, batch_id: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        view = get(cloud, f"/batches/{batch_id}")
        oc = view.get("on_complete") or {}
        return view if oc.get("status") in ("done", "failed") else None

    return dict(wait_for("the callback finished", ready))


def event_time(record: dict[str, Any], event: str) -> float:
    from datetime import datetime

    ats = [e["at"] for e in record["history"] if e["event"] == event]
    assert ats, (event, record["history"])
    return datetime.fromisoformat(ats[-1]).timestamp()


# ------------------------------------------------------------------ callbacks


def test_100_members_racing_to_finish_create_exactly_one_callback(cloud: LocalCloud) -> None:
    """The last members finish at once on every slot of the cloud (a race as wide as its
    slots, whatever the batch's size), and exactly one of them creates the callback."""
    batch_id = f"race-{uuid.uuid4().hex[:8]}"
    body = {
        "batch_id": batch_id,
        "jobs": [{"pipeline": "demo", "payload": {"stages": 1}} for _ in range(100)],
        "on_complete": {"pipeline": "collect", "payload": {"tag": "catalogue"}},
    }
    resp = post(cloud, body)
    assert resp.status_code in (200, 201, 202), resp.text
    view = get(cloud, f"/batches/{batch_id}")
    assert view["on_complete"]["pipeline"] == "collect"
    final = settled_callback(cloud, batch_id)
    assert final["counts"] == {"done": 100}
    assert final["on_complete"]["status"] == "done"
    found = callback_records(cloud, batch_id)
    assert len(found) == 1
    assert found[0]["id"] == final["on_complete"]["id"] == graph.callback_id(batch_id)
    assert found[0]["result"] == {"tag": "catalogue", "parents": {}, "members": 100}
    # every member ended before the callback was created
    assert all(get(cloud, f"/jobs/{m['id']}")["status"] == "done" for m in final["jobs"][:5])


def test_a_sigkill_after_the_last_terminal_write_still_fires_the_callback(
    cloud: LocalCloud,
) -> None:
    batch_id = f"kill-{uuid.uuid4().hex[:8]}"
    body = {
        "batch_id": batch_id,
        "jobs": [
            {"pipeline": "demo", "payload": {"stages": 1}},
            {"id": VICTIM, "pipeline": "demo", "payload": {"stages": 1, "sleep_s": 1.5}},
        ],
        "on_complete": {"pipeline": "collect", "payload": {"tag": "after-kill"}},
    }
    assert post(cloud, body).status_code in (200, 201, 202)
    final = settled_callback(cloud, batch_id)
    assert final["counts"] == {"done": 2}
    assert len(callback_records(cloud, batch_id)) == 1

    # the victim's worker died after its terminal write: the sweep ran what follows it.
    # The sweep logs that after its last hook and the marker's removal, which on a loaded
    # machine can come after the callback it created has already run: wait for the line.
    def repair_logged() -> list[str] | None:
        lines = [x for f in lines_about(cloud.config.log_dir, VICTIM).values() for x in f]
        said = [x["message"] for x in lines]
        return [m for m in said if "finished what follows a terminal write" in m] or None

    assert polling.wait_for("the sweep's repair of the killed finisher", repair_logged, timeout=30)


# ------------------------------------------------------------------ dependencies


def test_a_diamond_runs_in_order_and_d_reads_b_and_c(cloud: LocalCloud) -> None:
    s = uuid.uuid4().hex[:6]
    a, b, c, d = (f"{n}-{s}" for n in "abcd")
    body = {
        "jobs": [
            {"id": d, "pipeline": "collect", "payload": {"tag": "D"}, "depends_on": [b, c]},
            {"id": b, "pipeline": "collect", "payload": {"tag": "B"}, "depends_on": [a]},
            {"id": c, "pipeline": "collect", "payload": {"tag": "C"}, "depends_on": [a]},
            {"id": a, "pipeline": "demo", "payload": {"stages": 1, "sleep_s": 0.5}},
        ]
    }
    resp = post(cloud, body)
    assert resp.status_code in (200, 201, 202), resp.text
    assert get(cloud, f"/jobs/{d}")["status"] == "waiting"
    final = wait_for("D done", lambda: (v := get(cloud, f"/jobs/{d}"))["status"] == "done" and v)
    views = {n: get(cloud, f"/jobs/{n}") for n in (a, b, c)}
    assert final["result"]["parents"] == {b: views[b]["result"], c: views[c]["result"]}
    assert views[b]["result"]["tag"] == "B" and views[c]["result"]["tag"] == "C"
    assert final["depends_on"] == [b, c]
    assert sorted(views[a]["children"]) == sorted([b, c])
    # no child started before its parents were done
    assert event_time(views[b], "claimed") >= event_time(views[a], "done")
    assert event_time(views[c], "claimed") >= event_time(views[a], "done")
    assert event_time(final, "claimed") >= max(
        event_time(views[b], "done"), event_time(views[c], "done")
    )
    assert final["attempts"] == 1


def test_a_failed_parent_cancels_its_child(cloud: LocalCloud) -> None:
    s = uuid.uuid4().hex[:6]
    parent, child = f"p-{s}", f"k-{s}"
    body = {
        "jobs": [
            {"id": parent, "pipeline": "demo", "payload": {"fail_at": 0, "permanent": True}},
            {"id": child, "pipeline": "demo", "depends_on": [parent]},
        ]
    }
    assert post(cloud, body).status_code in (200, 201, 202)
    view = wait_for(
        "the child cancelled",
        lambda: (v := get(cloud, f"/jobs/{child}"))["status"] == "cancelled" and v,
    )
    assert view["parent_failure"] == {"parent": parent, "status": "failed"}
    assert view["attempts"] == 0
    assert get(cloud, f"/jobs/{parent}")["status"] == "failed"


def test_a_cycle_and_an_unknown_parent_are_400_and_write_nothing(cloud: LocalCloud) -> None:
    s = uuid.uuid4().hex[:6]
    cycle = {
        "jobs": [
            {"id": f"x-{s}", "pipeline": "demo", "depends_on": [f"y-{s}"]},
            {"id": f"y-{s}", "pipeline": "demo", "depends_on": [f"x-{s}"]},
        ]
    }
    resp = post(cloud, cycle)
    assert resp.status_code == 400, resp.text
    assert f"x-{s}" in resp.text and f"y-{s}" in resp.text and "cycle" in resp.text
    unknown = {"id": f"z-{s}", "pipeline": "demo", "depends_on": [f"nobody-{s}"]}
    resp = post(cloud, unknown)
    assert resp.status_code == 400 and f"nobody-{s}" in resp.text, resp.text
    for job_id in (f"x-{s}", f"y-{s}", f"z-{s}"):
        status = requests.get(f"{cloud.endpoints['submit']}/jobs/{job_id}", timeout=30)
        assert status.status_code == 404
    assert not list(records_bucket(cloud).list_blobs(prefix=f"workflows/waiting/z-{s}"))


# ------------------------------------------------------------------ webhooks


def test_a_webhook_is_signed_and_a_500_is_retried_with_backoff(
    cloud: LocalCloud, receiver: Receiver
) -> None:
    path = f"/flaky-{uuid.uuid4().hex[:6]}"
    receiver.script[path] = [500, 500]
    job_id = f"hook-{uuid.uuid4().hex[:6]}"
    body = {
        "id": job_id,
        "pipeline": "webhook",
        "payload": {
            "url": receiver.url(path),
            "body": {"hello": "world"},
            "secret_env": "RECLAIM_WEBHOOK_SECRET_TEST",
        },
    }
    assert post(cloud, body).status_code in (200, 201, 202)
    view = wait_for(
        "the webhook delivered",
        lambda: (v := get(cloud, f"/jobs/{job_id}"))["status"] == "done" and v,
    )
    hits = receiver.hits(path)
    assert len(hits) == 3 and view["attempts"] == 3
    # two retries after an error, each with a backoff (re-rings by the sweep have no error)
    requeued = [e for e in view["history"] if e["event"] == "requeued" and e.get("error")]
    assert len(requeued) == 2 and all(e.get("not_before") for e in requeued)
    assert all("500" in e["error"]["message"] for e in requeued)
    for _at, _path, headers, raw in hits:
        signature = headers["Reclaim-Signature"]
        assert wd.verify(SECRET.encode(), raw, signature)
        assert not wd.verify(b"another secret", raw, signature)
        assert headers["Idempotency-Key"] == job_id
    sent = json.loads(hits[-1][3])
    assert sent["body"] == {"hello": "world"} and sent["reclaim"]["job_id"] == job_id


def test_a_webhook_as_on_complete_carries_the_members(
    cloud: LocalCloud, receiver: Receiver
) -> None:
    path = f"/done-{uuid.uuid4().hex[:6]}"
    batch_id = f"hooked-{uuid.uuid4().hex[:8]}"
    body = {
        "batch_id": batch_id,
        "jobs": [{"pipeline": "demo", "payload": {"stages": 1}} for _ in range(3)],
        "on_complete": {"pipeline": "webhook", "payload": {"url": receiver.url(path)}},
    }
    assert post(cloud, body).status_code in (200, 201, 202)
    settled_callback(cloud, batch_id)
    (hit,) = receiver.hits(path)
    members = json.loads(hit[3])["reclaim"]["batch"]
    assert sorted(m["status"] for m in members) == ["done"] * 3
    assert all(m["result_ref"] == job_object(m["id"]) for m in members)


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/computeMetadata/v1/",
        "https://10.1.2.3/hook",
        "https://[::ffff:192.168.0.1]/hook",
        "http://example.com/hook",
    ],
)
def test_a_webhook_to_a_private_address_is_refused_at_submit(cloud: LocalCloud, url: str) -> None:
    resp = post(cloud, {"pipeline": "webhook", "payload": {"url": url}})
    assert resp.status_code == 400, resp.text


@pytest.mark.parametrize(
    ("host", "address"), [("2852039166", "169.254.169.254"), ("0x0a000001", "10.0.0.1")]
)
def test_a_name_that_resolves_to_a_private_address_is_refused_at_delivery(
    cloud: LocalCloud, host: str, address: str
) -> None:
    """A numeric host is no address literal to the submit check, but the resolver reads
    it as one: delivery resolves, vets every address, and fails the job for good."""
    job_id = f"ssrf-{uuid.uuid4().hex[:6]}"
    body = {"id": job_id, "pipeline": "webhook", "payload": {"url": f"https://{host}/x"}}
    resp = post(cloud, body)
    assert resp.status_code in (200, 201, 202), resp.text
    view = wait_for(
        "the webhook refused",
        lambda: (v := get(cloud, f"/jobs/{job_id}"))["status"] == "failed" and v,
    )
    assert view["attempts"] == 1 and address in view["error"]["message"]
