"""The dashboard's operations in process on MemoryStore: job search paged from the
indexes, pause and resume, bulk retry and cancel with a count first; each a POST behind
the CSRF token bound to the verified caller, each refusal a 4xx that changes nothing."""

from __future__ import annotations

import html
import re
import uuid
from datetime import UTC, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from shared.errors import NotFound
from shared.features import flow, flow_policy
from shared.queue import parse_submission
from tests.unit import test_dashboard
from tests.unit.test_dashboard import add, failed
from tests.unit.test_identity import cloud_run_token

world = test_dashboard.world  # the same fixture: a queue on MemoryStore behind the dashboard

OPS = {"Authorization": "Bearer " + cloud_run_token({"email": "ops@example.com"})}
CLAIMED = {
    "X-Goog-Authenticated-User-Email": "accounts.google.com:boss@example.com",
    "X-Reclaim-By": "boss@example.com",
}


def token_of(page: Any) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True))
    assert found is not None, "the page has no form"
    return found.group(1)


def ids_listed(page: Any) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', page.get_data(as_text=True))


def submit(world: dict[str, Any], body: dict[str, Any]) -> None:
    queue = world["queue"]
    queue.submit(parse_submission(body, queue.settings))


def test_search_pages_by_status_batch_and_tag_from_the_indexes(world: dict[str, Any]) -> None:
    client, store, clock = world["client"], world["store"], world["clock"]
    for i in range(3):
        submit(world, {"pipeline": "demo", "id": f"t{i}", "tags": ["nightly"] if i else []})
    add(store, "f1", clock)
    failed(store, "f1", clock)
    queued = client.get("/jobs?status=queued&pipeline=demo&batch=&tag=")
    assert queued.status_code == 200 and sorted(ids_listed(queued)) == ["t0", "t1", "t2"]
    assert ids_listed(client.get("/jobs?tag=nightly")) == ["t1", "t2"]
    by_batch = client.get("/jobs?batch=b1&status=failed")
    assert ids_listed(by_batch) == ["f1"] and "the input is bad" in by_batch.get_data(as_text=True)
    assert 'id="bulk-retry" ' not in by_batch.get_data(as_text=True)  # a link, by its href
    assert "/bulk?action=retry&amp;batch=b1&amp;status=failed" in by_batch.get_data(as_text=True)
    first = client.get("/jobs?status=queued&page_size=2")
    link = re.search(r'href="([^"]+)" id="next-page"', first.get_data(as_text=True))
    assert link is not None and len(ids_listed(first)) == 2
    second = client.get(html.unescape(link.group(1)))
    assert sorted(ids_listed(first) + ids_listed(second)) == ["t0", "t1", "t2"]
    assert client.get("/jobs?id=t1").headers["Location"] == "/jobs/t1"


def test_bad_search_input_is_a_4xx_page_or_json(world: dict[str, Any]) -> None:
    client = world["client"]
    bad = client.get("/jobs?status=finished")
    assert bad.status_code == 400 and "status must be one of" in bad.get_data(as_text=True)
    as_json = client.get("/jobs?tag=Not%20A%20Tag", headers={"Accept": "application/json"})
    assert as_json.status_code == 400 and as_json.get_json()["error"] == "invalid tag"
    done = client.get("/jobs?status=done")  # no index holds every done job: the page says so
    assert done.status_code == 200 and 'id="needs-batch"' in done.get_data(as_text=True)
    day = client.get("/finished?day=2026-13-01")
    assert day.status_code == 400 and "day must be YYYY-MM-DD" in day.get_data(as_text=True)
    assert client.get("/finished?status=done").status_code == 400  # done: by batch or tag
    assert client.get("/jobs?page_token=forged").status_code == 400
    assert client.get("/jobs?colour=red").status_code == 400


def test_pause_and_resume_record_the_verified_caller(world: dict[str, Any]) -> None:
    client, store = world["client"], world["store"]
    page = client.get("/pipelines", headers=OPS)
    assert re.search(r'data-pipeline="demo" data-paused="no"', page.get_data(as_text=True))
    token = token_of(page)
    forged = client.post("/pipelines/demo/pause", data={"csrf": "forged"}, headers=OPS)
    assert forged.status_code == 403 and not flow.is_paused(store, "demo", cached=False)
    paused = client.post("/pipelines/demo/pause", data={"csrf": token}, headers={**OPS, **CLAIMED})
    assert paused.status_code == 303 and paused.headers["Location"].startswith("/pipelines?done=")
    flag = store.read_blob(flow_policy.paused_name("demo")).data.decode()
    assert '"by": "dashboard:ops@example.com"' in flag and "boss" not in flag
    shown = client.get("/pipelines", headers=OPS).get_data(as_text=True)
    assert 'data-paused="yes"' in shown and "dashboard:ops@example.com" in shown
    resumed = client.post("/pipelines/demo/resume", data={"csrf": token}, headers=OPS)
    assert resumed.status_code == 303 and "resumed" in resumed.headers["Location"]
    try:
        store.read_blob(flow_policy.paused_name("demo"))
        raise AssertionError("the pause flag is still there")
    except NotFound:
        pass
    unknown = client.post("/pipelines/nope/pause", data={"csrf": token}, headers=OPS)
    assert unknown.status_code == 400 and "unknown" in unknown.get_data(as_text=True)
    assert store.list_blobs(flow_policy.PAUSED_PREFIX) == []
    assert client.post("/pipelines/demo/explode", data={"csrf": token}).status_code == 404
    assert client.get("/pipelines/demo/pause").status_code == 405


def test_bulk_retry_counts_first_then_acts_as_the_verified_caller(world: dict[str, Any]) -> None:
    client, store, clock = world["client"], world["store"], world["clock"]
    for job_id in ("a", "b", "c"):
        add(store, job_id, clock)
    for job_id in ("a", "b"):
        failed(store, job_id, clock)
    count = client.get("/bulk?action=retry&batch=b1&status=failed&pipeline=&since=", headers=OPS)
    text = count.get_data(as_text=True)
    assert count.status_code == 200 and '<span id="matching">2</span>' in text
    assert re.findall(r'<li><a href="/jobs/([^"]+)"', text) == ["a", "b"]
    assert store.read("a").record["status"] == "failed"  # a count changes nothing
    confirm = re.search(r'name="confirm" value="([^"]+)"', text)
    assert confirm is not None
    form = {"csrf": token_of(count), "confirm": confirm.group(1), "batch": "b1", "status": "failed"}
    done = client.post("/bulk/retry", data=form, headers={**OPS, **CLAIMED})
    assert done.status_code == 303
    where = urlsplit(done.headers["Location"])
    assert where.path == "/bulk" and "retry: 2 of 2 job(s)" in parse_qs(where.query)["done"][0]
    for job_id in ("a", "b"):
        record = store.read(job_id).record
        assert record["status"] == "queued"
        assert record["history"][-1]["by"] == "dashboard:ops@example.com"
    after = client.get(done.headers["Location"], headers=OPS).get_data(as_text=True)
    assert "retry: 2 of 2" in after and '<span id="matching">0</span>' in after


def test_bulk_refusals_change_nothing(world: dict[str, Any]) -> None:
    client, store, clock = world["client"], world["store"], world["clock"]
    for job_id in ("a", "b"):
        add(store, job_id, clock)
    failed(store, "a", clock)
    count = client.get("/bulk?action=retry&batch=b1", headers=OPS)
    text = count.get_data(as_text=True)
    token, csrf = re.search(r'name="confirm" value="([^"]+)"', text).group(1), token_of(count)  # type: ignore[union-attr]
    form = {"csrf": csrf, "confirm": token, "batch": "b1"}
    failed(store, "b", clock)  # the selection grew since the count
    grew = client.post("/bulk/retry", data=form, headers=OPS)
    assert grew.status_code == 409 and "selection grew" in grew.get_data(as_text=True)
    other = client.post("/bulk/retry", data={**form, "confirm": "1-0000"}, headers=OPS)
    assert other.status_code == 400 and "count again" in other.get_data(as_text=True)
    wider = client.post("/bulk/retry", data={**form, "pipeline": "demo"}, headers=OPS)
    assert wider.status_code == 400  # a token for another selection
    missing = client.post("/bulk/retry", data={"csrf": csrf, "batch": "b1"}, headers=OPS)
    assert missing.status_code == 400 and "count the selection first" in missing.get_data(
        as_text=True
    )
    assert client.post("/bulk/retry", data={**form, "csrf": "x"}, headers=OPS).status_code == 403
    assert client.post("/bulk/explode", data=form, headers=OPS).status_code == 404
    bad = client.get("/bulk?action=retry&status=running", headers={"Accept": "application/json"})
    assert bad.status_code == 400
    assert "retry acts on failed or cancelled" in bad.get_json()["reason"]
    assert client.get("/bulk?action=explode&batch=b1").status_code == 400
    counted_again = client.get(f"/bulk?action=retry&batch=b1&confirm={token}")
    assert counted_again.status_code == 400  # a GET never acts
    assert client.get("/bulk?action=retry&colour=red").status_code == 400
    assert [store.read(i).record["status"] for i in ("a", "b")] == ["failed", "failed"]
    assert client.get("/bulk").status_code == 200  # the form alone


def test_a_job_waiting_on_a_waitpoint_is_approved_or_rejected_from_its_page(
    world: dict[str, Any],
) -> None:
    """waits (docs/waiting.md): the page says what the job waits for and offers Approve and
    Reject, CSRF-checked, the author the verified caller; a second press is a 409."""
    from shared.claim.drain import DrainGate
    from shared.claim.shutdown import Shutdown
    from shared.claim.slots import Slots
    from tests.unit import test_waits  # registers its pipelines

    client, queue = world["client"], world["queue"]
    for job_id in ("wait-yes", "wait-no"):
        submit(world, {"id": job_id, "pipeline": test_waits.WAITER})
        queue.handle_delivery(job_id, slots=Slots(2), gate=DrainGate(), shutdown=Shutdown())
    page = client.get("/jobs/wait-yes", headers=OPS)
    text = page.get_data(as_text=True)
    assert 'id="waiting-for"' in text and "waitpoint" in text
    assert 'id="approve"' in text and 'id="reject"' in text
    token = token_of(page)
    forged = client.post("/jobs/wait-yes/approve", data={"csrf": "forged"}, headers=OPS)
    assert forged.status_code == 403 and queue.read("wait-yes")["status"] == "waiting"
    yes = client.post("/jobs/wait-yes/approve", data={"csrf": token}, headers={**OPS, **CLAIMED})
    assert yes.status_code == 303 and "approved" in yes.headers["Location"]
    no = client.post("/jobs/wait-no/reject", data={"csrf": token}, headers=OPS)
    assert no.status_code == 303
    assert queue.read("wait-yes")["waited"]["data"] == {"approved": True}
    assert queue.read("wait-yes")["waited"]["by"] == "dashboard:ops@example.com"
    assert queue.read("wait-no")["waited"]["data"] == {"approved": False}
    again = client.post("/jobs/wait-yes/approve", data={"csrf": token}, headers=OPS)
    assert again.status_code == 409


def test_batches_are_browsed_by_the_day_they_were_submitted(world: dict[str, Any]) -> None:
    """Issue 40, 8: done jobs have no index of their own, so their batches are listed by
    the UTC day they were submitted, at one create-only marker per batch and day."""
    client, store, clock = world["client"], world["store"], world["clock"]
    day = clock().astimezone(UTC).date()
    batch = f"day-{uuid.uuid4().hex[:10]}"

    def writes(body: dict[str, Any]) -> int:
        before = store.calls.get("write", 0)
        submit(world, body)
        return store.calls["write"] - before

    first = writes({"batch_id": batch, "jobs": [{"pipeline": "demo"}, {"pipeline": "demo"}]})
    late = writes({"batch_id": batch, "jobs": [{"pipeline": "demo", "id": "late-member"}]})
    lone = writes({"pipeline": "demo", "id": "no-batch"})
    assert [b.name for b in store.list_blobs("submitted/")] == [f"submitted/{day}/{batch}"]
    assert first == 2 * late + 1  # the day's marker, once for the batch
    assert late > lone  # a member's own batch marker, and no second day marker
    page = client.get(f"/finished?day={day.isoformat()}")
    shown = page.get_data(as_text=True)
    assert page.status_code == 200 and f'<a href="/batches/{batch}">{batch}</a>' in shown
    before = client.get(f"/finished?day={(day - timedelta(days=1)).isoformat()}")
    assert 'id="no-submitted"' in before.get_data(as_text=True)
