"""The job lifecycle over HTTP on the local cloud: cancel and retry one job, bulk cancel
and retry with a count first, GET /jobs paging from the indexes, a waiting status read
and a batch's progress from markers. Every refusal is {"error", "reason"}."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from shared.http import routes as api_routes
from tests.integration.cloud_support import fast_cloud, job
from tests.polling import wait_for


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(max_instances=2, concurrency=4) as c:
        yield c


def call(
    cloud: LocalCloud, method: str, path: str, body: Any = None, **kw: Any
) -> requests.Response:
    """To submit, or to the admin function for an operator route (docs/api.md)."""
    served_by = "admin" if api_routes.operator_route(path) or path == "/health" else "submit"
    url = cloud.endpoints[served_by] + path
    if body is None and method == "POST" and served_by == "admin" and "data" not in kw:
        body = {}  # the operator routes take JSON only (docs/api.md, "Operator routes")
    return requests.request(method, url, json=body, timeout=90, **kw)


def _as_ops(cloud: LocalCloud) -> dict[str, str]:
    """The headers of a caller the platform verified (the local IAM check's token): the
    history names it, whatever a header says (docs/api.md, "Who did it")."""
    token = cloud.platform.identity_token("admin", "ops@example.com")
    return {"Authorization": f"Bearer {token}", "X-Reclaim-By": "someone-else"}


def new_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def submit(cloud: LocalCloud, jobs: list[dict[str, Any]], batch_id: str | None = None) -> list[str]:
    body: dict[str, Any] = {"jobs": jobs, **({"batch_id": batch_id} if batch_id else {})}
    resp = call(cloud, "POST", "/jobs", body)
    assert resp.status_code == 202, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


def refused(resp: requests.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = dict(resp.json())
    assert set(body) >= {"error", "reason"}, body
    return body


def test_cancel_a_running_job_then_retry_it_to_done(cloud: LocalCloud) -> None:
    job_id = new_id("c")
    # the admin function up first (it scales from zero), so the cancel meets the job running
    wait_for("the admin function up", lambda: call(cloud, "GET", "/health").ok)
    submit(cloud, [{"pipeline": "demo", "id": job_id, "payload": {"stages": 2, "sleep_s": 3}}])
    wait_for("the job running", lambda: job(cloud, job_id)["status"] == "running")
    resp = call(
        cloud,
        "POST",
        f"/jobs/{job_id}/cancel",
        {"reason": "wrong input"},
        headers=_as_ops(cloud),
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    cancelled = [h for h in resp.json()["history"] if h["event"] == "cancelled"]
    assert cancelled and cancelled[-1].get("by") == "http:ops@example.com"
    again = refused(call(cloud, "POST", f"/jobs/{job_id}/cancel"), 409)
    assert again["error"] == "not allowed"
    resp = call(cloud, "POST", f"/jobs/{job_id}/retry")
    assert resp.status_code == 200, resp.text
    assert resp.json()["history"][-1]["event"] in ("retried", "claimed")  # claims are quick
    wait_for("the retried job done", lambda: job(cloud, job_id)["status"] == "done")


def test_one_job_refusals(cloud: LocalCloud) -> None:
    refused(call(cloud, "POST", "/jobs/no-such-job/cancel"), 404)
    refused(call(cloud, "POST", "/jobs/bad..id/retry"), 400)
    refused(call(cloud, "POST", "/jobs/x/explode"), 405)  # a read's path: GET only
    refused(call(cloud, "GET", "/jobs/x/cancel"), 405)
    refused(
        call(
            cloud,
            "POST",
            "/jobs/x/cancel",
            data=b"[1]",
            headers={"Content-Type": "application/json"},
        ),
        400,
    )


def test_the_operator_routes_are_the_admin_functions_alone(cloud: LocalCloud) -> None:
    """Submit answers each operator route 404 naming the admin function, and changes
    nothing; the admin function serves nothing else."""
    job_id = new_id("o")
    submit(cloud, [{"pipeline": "demo", "id": job_id, "payload": {"stages": 1, "sleep_s": 5}}])
    for path, body in (
        (f"/jobs/{job_id}/cancel", {}),
        (f"/jobs/{job_id}/retry", {}),
        ("/bulk/cancel", {"batch": "b"}),
        ("/bulk/retry", {"batch": "b"}),
        ("/pipelines/demo/pause", None),
        ("/pipelines/demo/resume", None),
    ):
        url = cloud.endpoints["submit"] + path
        answer = refused(requests.post(url, json=body, timeout=30), 404)
        assert answer["error"] == "operator route" and "admin function" in answer["reason"]
    assert job(cloud, job_id)["status"] != "cancelled"
    for method, path in (("POST", "/jobs"), ("GET", f"/jobs/{job_id}"), ("GET", "/jobs")):
        url = cloud.endpoints["admin"] + path
        answer = refused(requests.request(method, url, json={}, timeout=30), 404)
        assert "operator routes" in answer["reason"] and "submit" in answer["reason"]
    assert requests.get(cloud.endpoints["admin"] + "/health", timeout=30).json() == {"ok": True}


def test_a_waiting_read_answers_when_the_record_changes(cloud: LocalCloud) -> None:
    job_id = new_id("w")
    submit(cloud, [{"pipeline": "demo", "id": job_id, "payload": {"stages": 2, "sleep_s": 0.5}}])
    seen: list[str] = []
    view = job(cloud, job_id)
    while view["status"] not in ("done", "failed", "cancelled"):
        resp = call(cloud, "GET", f"/jobs/{job_id}?wait=30&after={view['generation']}")
        assert resp.status_code == 200, resp.text
        assert resp.json()["generation"] != view["generation"]  # it answered on a change
        view = resp.json()
        seen.append(view["status"])
    assert seen[-1] == "done"
    # a finished job answers at once, and a bounded wait on nothing new answers unchanged
    assert call(cloud, "GET", f"/jobs/{job_id}?wait=30").json()["generation"] == view["generation"]
    quiet = call(cloud, "GET", f"/jobs/{job_id}?wait=0.5&after={view['generation']}")
    assert quiet.json()["generation"] == view["generation"]
    for bad in ("wait=-1", "wait=61", "wait=nan", "after=0", "after=x", "sleep=1"):
        refused(call(cloud, "GET", f"/jobs/{job_id}?{bad}"), 400)


def test_bulk_retry_counts_first_and_acts_on_the_confirmed_selection(cloud: LocalCloud) -> None:
    batch_id = new_id("b")
    failing = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "permanent": True}}
    ids = submit(cloud, [{**failing, "id": new_id("f")} for _ in range(3)], batch_id)
    wait_for("all failed", lambda: all(job(cloud, i)["status"] == "failed" for i in ids))
    selection = {"batch": batch_id, "status": "failed"}
    count = call(cloud, "POST", "/bulk/retry", selection)
    assert count.status_code == 200, count.text
    assert count.json()["matching"] == 3 and sorted(count.json()["jobs"]) == sorted(ids)
    assert all(job(cloud, i)["status"] == "failed" for i in ids)  # a count changes nothing
    wrong = refused(call(cloud, "POST", "/bulk/retry", {**selection, "confirm": "3-0000"}), 400)
    assert "count again" in wrong["reason"]
    other = {"batch": batch_id, "confirm": count.json()["confirm"]}  # another selection
    refused(call(cloud, "POST", "/bulk/retry", other), 400)
    done = call(
        cloud,
        "POST",
        "/bulk/retry",
        {**selection, "confirm": count.json()["confirm"]},
        headers=_as_ops(cloud),
    )
    assert done.status_code == 200, done.text
    assert sorted(done.json()["acted"]) == sorted(ids) and done.json()["remaining"] == 0
    for i in ids:
        retried = [h for h in job(cloud, i)["history"] if h["event"] == "retried"]
        assert retried and retried[-1].get("by") == "http:ops@example.com"
    refused(call(cloud, "POST", "/bulk/retry", {"status": "running"}), 400)
    refused(call(cloud, "POST", "/bulk/retry", {}), 400)
    refused(call(cloud, "POST", "/bulk/retry", {"batch": batch_id, "color": "red"}), 400)
    refused(call(cloud, "POST", "/bulk/explode", {"batch": batch_id}), 404)


def test_bulk_cancel_refuses_a_selection_that_grew(cloud: LocalCloud) -> None:
    batch_id = new_id("g")
    slow = {"pipeline": "demo", "payload": {"stages": 1}, "delay_seconds": 3600}
    submit(cloud, [{**slow, "id": new_id("s")}], batch_id)
    count = call(cloud, "POST", "/bulk/cancel", {"batch": batch_id}).json()
    assert count["matching"] == 1
    submit(cloud, [{**slow, "id": new_id("s")}], batch_id)
    grew = refused(
        call(cloud, "POST", "/bulk/cancel", {"batch": batch_id, "confirm": count["confirm"]}), 409
    )
    assert grew["error"] == "selection grew"
    recount = call(cloud, "POST", "/bulk/cancel", {"batch": batch_id}).json()
    done = call(cloud, "POST", "/bulk/cancel", {"batch": batch_id, "confirm": recount["confirm"]})
    assert len(done.json()["acted"]) == 2, done.text


def test_list_pages_through_a_batch_and_the_pending_index(cloud: LocalCloud) -> None:
    batch_id = new_id("p")
    later = {"pipeline": "demo", "payload": {"stages": 1}, "delay_seconds": 3600}
    ids = submit(cloud, [{**later, "id": f"{batch_id}-{n:02d}"} for n in range(7)], batch_id)
    listed: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        params = {"batch": batch_id, "page_size": "3", **({"page_token": token} if token else {})}
        resp = call(cloud, "GET", "/jobs", params=params)
        assert resp.status_code == 200, resp.text
        pages += 1
        listed += [j["id"] for j in resp.json()["jobs"]]
        token = resp.json()["next_page_token"]
        if token is None:
            break
    assert listed == sorted(ids) and pages == 3
    queued = call(
        cloud, "GET", "/jobs", params={"status": "queued", "pipeline": "demo", "page_size": "200"}
    )
    assert set(ids) <= {j["id"] for j in queued.json()["jobs"]}  # delayed: scheduled/ index
    refused(call(cloud, "GET", "/jobs", params={"status": "done"}), 400)
    refused(call(cloud, "GET", "/jobs", params={"status": "bogus"}), 400)
    refused(call(cloud, "GET", "/jobs", params={"page_size": "0"}), 400)
    refused(call(cloud, "GET", "/jobs", params={"batch": batch_id, "page_token": "garbage"}), 400)
    call(cloud, "POST", "/bulk/cancel", {"batch": batch_id})  # leave nothing delayed behind
    recount = call(cloud, "POST", "/bulk/cancel", {"batch": batch_id}).json()
    call(cloud, "POST", "/bulk/cancel", {"batch": batch_id, "confirm": recount["confirm"]})


def test_batch_progress_from_markers(cloud: LocalCloud) -> None:
    batch_id = new_id("m")
    quick = {"pipeline": "demo", "payload": {"stages": 1}}
    failing = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "permanent": True}}
    later = {**quick, "delay_seconds": 3600}
    jobs = [{**quick, "id": new_id("q")} for _ in range(3)]
    jobs += [{**failing, "id": new_id("f")}, {**later, "id": new_id("l")}]
    ids = submit(cloud, jobs, batch_id)
    call(cloud, "POST", f"/jobs/{ids[-1]}/cancel")

    def settled() -> dict[str, Any] | None:
        body = dict(call(cloud, "GET", f"/batches/{batch_id}/progress").json())
        return body if body["pending"] == 0 else None

    progress = wait_for("the batch finished", settled)
    assert progress["total"] == 5 and progress["finished"] is True
    assert (progress["done"], progress["failed"], progress["cancelled"]) == (3, 1, 1)
    full = call(cloud, "GET", f"/batches/{batch_id}").json()["counts"]
    assert full == {"cancelled": 1, "done": 3, "failed": 1}
    refused(call(cloud, "GET", "/batches/nothing-here/progress"), 404)
