"""The fourth hardening pass (issue 41) over HTTP on the local cloud: what an outside
attack on waits, bulk confirm, listings, numbers, operator routes, uploads and the view
found, each refused (4xx, nothing written) or served as docs/api.md says.

1. `concurrency x max_instances` waiters never starve POST /jobs, GET /health or a cron
   tick (the latency is bench/waiters.py's row; here, by state, that they answer 2xx
   while the waiters stay parked and waiting).
2-3. A bulk token binds what was counted: a relative `since` confirms (API and
   dashboard), a used token is refused, one for another count or other jobs too.
4. Unicode digits are a 400, never a 500. 5. A lone surrogate in a reason is a 400.
6. Another listing's page token is a 400. 8. upload-digest never reads a records bucket.
9. The operator routes refuse a browser's cross-site "simple" request.
11. The view shows `handbacks`. Also seen: a token header sent twice; `tags` replayed.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from reclaim_client import Client

from reclaim.local.cloud import DEFAULT_SIZING, LocalCloud, Sizing
from tests.integration.cloud_support import bucket_state, cloud_store, job
from tests.polling import wait_for

CONCURRENCY, INSTANCES = 4, 2
"""Submit's sizing here: 8 waiters take every slot of the service without the fix."""
PARKED = INSTANCES * (CONCURRENCY - 1)
"""Waits that park: all but one slot of each instance (shared.http.capacity.reserve_for(4)
is 1; written out so that this module also runs on the code before the fix)."""
HOUR = 3600
SCHEDULES = {
    "schedules": [{"name": "minutely", "cron": "* * * * *", "time_zone": "UTC", "pipeline": "demo"}]
}
FAILING = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "permanent": True}}
LATER = {"pipeline": "demo", "payload": {"stages": 1}, "delay_seconds": HOUR}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    schedules = tmp_path_factory.mktemp("fourth") / "schedules.json"
    schedules.write_text(json.dumps(SCHEDULES))
    submit = Sizing(concurrency=CONCURRENCY, max_instances=INSTANCES, timeout_seconds=180)
    with LocalCloud.for_tests(
        max_instances=1,
        concurrency=4,
        sweep_interval_seconds=0,  # no sweep between a request and a bucket comparison
        sizing={**DEFAULT_SIZING, "submit": submit},
        function_env={
            "RECLAIM_SCHEDULES_FILE": str(schedules),
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
        },
    ) as c:
        yield c


def new_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def submit(cloud: LocalCloud, jobs: list[dict[str, Any]], batch_id: str) -> list[str]:
    resp = requests.post(
        cloud.endpoints["jobs"], json={"batch_id": batch_id, "jobs": jobs}, timeout=60
    )
    assert resp.status_code == 202, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


def admin(cloud: LocalCloud, path: str, body: Any = None, **kw: Any) -> requests.Response:
    """An operator route on the admin function, as a client sends it (JSON)."""
    kw.setdefault("json", {} if body is None else body)
    return requests.post(cloud.endpoints["admin"] + path, timeout=90, **kw)


def get(cloud: LocalCloud, path: str, **kw: Any) -> requests.Response:
    return requests.get(cloud.endpoints["submit"] + path, timeout=90, **kw)


def refused(resp: requests.Response, status: int, words: str = "") -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = dict(resp.json())
    assert body.get("error") and words in body.get("reason", ""), body
    return body


def failed_batch(cloud: LocalCloud, n: int) -> tuple[str, list[str]]:
    batch_id = new_id("b")
    ids = submit(cloud, [{**FAILING, "id": new_id("f")} for _ in range(n)], batch_id)
    wait_for("the batch failed", lambda: all(job(cloud, i)["status"] == "failed" for i in ids))
    # what follows the terminal write (its pending marker's removal, the ended/ index) is
    # done once no claim request is in flight: only then is the bucket still
    wait_for("the claims done", lambda: cloud.service("claim").stats()["in_flight"] == 0)
    return batch_id, ids


# ------------------------------------------------------------------ 1. waits and submits


def _parked(cloud: LocalCloud, at_least: int) -> bool:
    """The submit service has every instance up and at least that many requests in
    flight on them: the waiters' waits, parked (what the local Cloud Run counts)."""
    stats = cloud.service("submit").stats()
    serving = [i for i in stats["instance_list"] if i["state"] == "serving" and i["routed"]]
    return len(serving) == INSTANCES and sum(i["in_flight"] for i in serving) >= at_least


def test_every_slots_worth_of_waiters_never_starves_submit_health_or_a_cron_tick(
    cloud: LocalCloud,
) -> None:
    """Issue 41, 1: `concurrency x max_instances` clients in Client.wait() on a job that
    does not change; while they are parked, POST /jobs, GET /health and a cron tick each
    answer 2xx (before the fix: 429 after the platform's 10 s pending time), and the
    waiters are still waiting; then the job's end reaches every one of them."""
    target = requests.post(cloud.endpoints["jobs"], json={**LATER, "id": new_id("w")}, timeout=60)
    assert target.status_code == 202, target.text
    job_id = target.json()["id"]
    client = Client(cloud.endpoints["submit"])
    seen: dict[int, str] = {}

    def waiter(n: int) -> None:
        seen[n] = client.wait(job_id, timeout=600).status

    threads = [threading.Thread(target=waiter, args=(n,)) for n in range(CONCURRENCY * INSTANCES)]
    for t in threads:
        t.start()
    try:
        wait_for("the waiters parked", lambda: _parked(cloud, PARKED), timeout=120)
        made = requests.post(cloud.endpoints["jobs"], json={**LATER, "id": new_id("s")}, timeout=60)
        assert made.status_code == 202, made.text
        health = get(cloud, "/health")
        assert health.status_code == 200, health.text
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:00Z")
        tick = requests.post(
            f"{cloud.endpoints['submit']}/schedules/minutely/tick",
            headers={"X-CloudScheduler-ScheduleTime": now},
            timeout=60,
        )
        assert tick.status_code in (200, 202), tick.text
        assert all(t.is_alive() for t in threads) and not seen  # still waiting
        wait_for("the waiters parked again", lambda: _parked(cloud, PARKED), timeout=60)
        assert all(t.is_alive() for t in threads) and not seen
    finally:
        admin(cloud, f"/jobs/{job_id}/cancel")
        for t in threads:
            t.join(timeout=120)
    assert seen == dict.fromkeys(range(CONCURRENCY * INSTANCES), "cancelled")


# ------------------------------------------------------------------ 2-3. bulk tokens


def test_a_count_with_a_relative_since_can_be_confirmed(cloud: LocalCloud) -> None:
    """Issue 41, 2: the token keeps the time `since` resolved to at the count (before
    the fix every confirm of `since: 1h` was 400 `invalid confirm`)."""
    batch_id, ids = failed_batch(cloud, 2)
    selection = {"batch": batch_id, "since": "1h"}
    count = admin(cloud, "/bulk/retry", selection)
    assert count.status_code == 200 and count.json()["matching"] == 2, count.text
    done = admin(cloud, "/bulk/retry", {**selection, "confirm": count.json()["confirm"]})
    assert done.status_code == 200, done.text
    assert sorted(done.json()["acted"]) == sorted(ids)


def test_the_dashboards_confirm_form_confirms_a_relative_since(cloud: LocalCloud) -> None:
    """Issue 41, 2, through the dashboard's own Count and Confirm (CSRF cookie and form)."""
    batch_id, ids = failed_batch(cloud, 1)
    web = requests.Session()
    base = cloud.endpoints["dashboard"]
    page = web.get(f"{base}/bulk", params={"action": "retry", "batch": batch_id, "since": "24h"})
    assert page.status_code == 200, page.text
    form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
    assert form.get("confirm") and form.get("since") == "24h", form
    done = web.post(f"{base}/bulk/retry", data=form, allow_redirects=False, timeout=90)
    assert done.status_code == 303, done.text
    note = parse_qs(urlsplit(done.headers["Location"]).query)["done"][0]
    assert note.startswith("retry: 1 of 1"), note
    assert any(h["event"] == "retried" for h in job(cloud, ids[0])["history"])


def test_a_confirm_token_acts_once(cloud: LocalCloud) -> None:
    """Issue 41, 3: a used token is refused, even when the same count matches again
    (before the fix it retried the jobs a second time)."""
    batch_id, ids = failed_batch(cloud, 1)
    selection = {"batch": batch_id, "status": "failed"}
    token = admin(cloud, "/bulk/retry", selection).json()["confirm"]
    first = admin(cloud, "/bulk/retry", {**selection, "confirm": token})
    assert first.status_code == 200 and first.json()["acted"] == ids, first.text
    wait_for(
        "the job failed again",
        lambda: job(cloud, ids[0])["status"] == "failed" and job(cloud, ids[0])["attempts"] == 2,
    )
    before = bucket_state(cloud)
    refused(admin(cloud, "/bulk/retry", {**selection, "confirm": token}), 400, "used already")
    assert bucket_state(cloud) == before


def _public_token(action: str, batch: str, count: int) -> str:
    """The token as the code before the fix made it: a digest anyone can compute."""
    shown = [action, batch, None, None, None, count]
    return f"{count}-{hashlib.sha256(json.dumps(shown).encode()).hexdigest()[:16]}"


def test_a_token_is_bound_to_the_counted_jobs(cloud: LocalCloud) -> None:
    """Issue 41, 3: a token made up for a larger count is refused, and so is a token
    whose count still matches but over other jobs (one retried, another cancelled
    since): before the fix both acted on jobs no count showed."""
    batch_id, _ids = failed_batch(cloud, 1)
    before = bucket_state(cloud)
    made_up = {"batch": batch_id, "confirm": _public_token("retry", batch_id, 5)}
    refused(admin(cloud, "/bulk/retry", made_up), 400, "count again")
    assert bucket_state(cloud) == before

    other = new_id("c")
    first, second = submit(cloud, [{**LATER, "id": new_id("c")} for _ in range(2)], other)
    for job_id in (first, second):
        assert admin(cloud, f"/jobs/{job_id}/cancel").status_code == 200
    selection = {"batch": other, "status": "cancelled"}
    count = admin(cloud, "/bulk/retry", selection).json()
    assert count["matching"] == 2
    assert admin(cloud, f"/jobs/{second}/retry").status_code == 200  # no longer cancelled
    (third,) = submit(cloud, [{**LATER, "id": new_id("c")}], other)
    assert admin(cloud, f"/jobs/{third}/cancel").status_code == 200  # two match again
    before = bucket_state(cloud)
    answer = admin(cloud, "/bulk/retry", {**selection, "confirm": count["confirm"]})
    assert refused(answer, 409)["error"] == "selection changed"
    assert bucket_state(cloud) == before and job(cloud, third)["status"] == "cancelled"


# ------------------------------------------------------------------ 4-6. numbers, text, pages


def test_unicode_digits_and_huge_numbers_are_a_400(cloud: LocalCloud) -> None:
    """Issue 41, 4: `²` passes str.isdigit() and int() refuses it (before the fix: 500)."""
    (job_id,) = submit(cloud, [{**LATER, "id": new_id("u")}], new_id("u"))
    refused(get(cloud, "/jobs", params={"page_size": "²"}), 400, "page_size")
    refused(get(cloud, f"/jobs/{job_id}", params={"wait": "1", "after": "²"}), 400, "after")
    refused(get(cloud, f"/jobs/{job_id}", params={"wait": "٣"}), 400, "wait")
    refused(get(cloud, f"/jobs/{job_id}", params={"wait": "1", "after": "9" * 40}), 400, "after")
    batch_id, _ids = failed_batch(cloud, 1)
    before = bucket_state(cloud)
    token = "²-" + "0" * 16
    refused(admin(cloud, "/bulk/retry", {"batch": batch_id, "confirm": token}), 400, "confirm")
    assert bucket_state(cloud) == before


def test_a_lone_surrogate_in_a_reason_is_a_400_and_writes_nothing(cloud: LocalCloud) -> None:
    """Issue 41, 5: before the fix the record could not be encoded: 500."""
    batch_id = new_id("r")
    (job_id,) = submit(cloud, [{**LATER, "id": new_id("r")}], batch_id)
    raw = {"data": b'{"reason": "x\\ud800y"}', "headers": {"Content-Type": "application/json"}}
    before = bucket_state(cloud)
    refused(admin(cloud, f"/jobs/{job_id}/cancel", json=None, **raw), 400, "Unicode")
    token = admin(cloud, "/bulk/cancel", {"batch": batch_id}).json()["confirm"]
    bulk = json.dumps({"batch": batch_id, "confirm": token})[:-1] + ', "reason": "\\udfff"}'
    raw["data"] = bulk.encode()
    refused(admin(cloud, "/bulk/cancel", json=None, **raw), 400, "Unicode")
    assert bucket_state(cloud) == before and job(cloud, job_id)["status"] == "queued"


def test_a_page_token_of_another_listing_is_a_400(cloud: LocalCloud) -> None:
    """Issue 41, 6: docs/api.md promised a 400; before the fix another batch's token
    was taken and the listing started after its key."""
    one, two = new_id("p"), new_id("p")
    for batch_id in (one, two):
        submit(cloud, [{**LATER, "id": f"{batch_id}-{n}"} for n in range(3)], batch_id)
    first = get(cloud, "/jobs", params={"batch": one, "page_size": "1"}).json()
    token = first["next_page_token"]
    assert token
    refused(get(cloud, "/jobs", params={"batch": two, "page_token": token}), 400, "page_token")
    pending = get(cloud, "/jobs", params={"status": "queued", "page_size": "1"}).json()
    running = {"status": "running", "page_token": pending["next_page_token"]}
    refused(get(cloud, "/jobs", params=running), 400, "page_token")
    rest = get(cloud, "/jobs", params={"batch": one, "page_token": token}).json()
    assert [j["id"] for j in rest["jobs"]] == [f"{one}-1", f"{one}-2"]  # its own goes on


# ------------------------------------------------------------------ 8, 9, 11


def test_upload_digest_never_reads_a_records_bucket(cloud: LocalCloud) -> None:
    """Issue 41, 8: before the fix any submit caller learned a record's size and sha256."""
    (victim,) = submit(cloud, [{**LATER, "id": new_id("v")}], new_id("v"))
    before = bucket_state(cloud)
    for bucket in cloud.topology.records_buckets:  # the home bucket and every shard
        payload = {"bucket": bucket, "name": f"jobs/{victim}.json"}
        body = {"pipeline": "upload-digest", "payload": payload}
        resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=60)
        refused(resp, 400, "records bucket")
    assert bucket_state(cloud) == before


def test_the_operator_routes_refuse_a_browsers_cross_site_requests(cloud: LocalCloud) -> None:
    """Issue 41, 9: text/plain, a form, no body and no type, a foreign Origin or
    Sec-Fetch-Site: each refused and nothing paused (before the fix: 200, paused)."""
    url = cloud.endpoints["admin"] + "/pipelines/demo/pause"
    own = urlsplit(cloud.endpoints["admin"]).netloc
    attempts = [
        (415, {"data": "x", "headers": {"Content-Type": "text/plain"}}),
        (415, {"data": {"a": "b"}}),  # application/x-www-form-urlencoded
        (415, {}),  # no body, no type
        (403, {"json": {}, "headers": {"Origin": "https://evil.example"}}),
        (403, {"json": {}, "headers": {"Sec-Fetch-Site": "cross-site"}}),
        (403, {"json": {}, "headers": {"Origin": "null"}}),
    ]
    before = bucket_state(cloud)
    for status, kw in attempts:
        refused(requests.post(url, timeout=60, **kw), status)
    assert bucket_state(cloud) == before
    same = {"Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"}
    try:
        assert requests.post(url, json={}, headers=same, timeout=60).json()["paused"] is True
    finally:
        assert admin(cloud, "/pipelines/demo/resume").status_code == 200


def test_the_view_shows_handbacks(cloud: LocalCloud) -> None:
    """Issue 41, 11: docs/api.md lists `handbacks`; the view left it out."""
    (job_id,) = submit(cloud, [{**LATER, "id": new_id("h")}], new_id("h"))
    assert job(cloud, job_id)["handbacks"] == 0  # never handed back: no field written
    store = cloud_store(cloud)
    stored = store.read(job_id)
    store.update({**stored.record, "handbacks": 2}, stored.generation)  # as two SIGTERMs did
    assert job(cloud, job_id)["handbacks"] == 2


# ------------------------------------------------------------------ also seen


def test_a_token_header_sent_twice_is_refused_by_the_front(cloud: LocalCloud) -> None:
    """A verified caller's token and a case variant of its header: before the fix the
    front checked one, passed the other on with its signature, and the author was the
    anonymous "http"; now the front refuses the request (which copy counts is a guess)."""
    token = cloud.platform.identity_token("admin", "ops@example.com")
    where = urlsplit(cloud.endpoints["admin"])
    before = bucket_state(cloud)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    try:
        conn.putrequest("POST", "/pipelines/demo/pause")
        conn.putheader("Authorization", f"Bearer {token}")
        conn.putheader("authorization", f"Bearer {token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", "2")
        conn.endheaders(b"{}")
        status = conn.getresponse().status
    finally:
        conn.close()
    assert status == 401
    assert bucket_state(cloud) == before


def test_a_replay_with_other_tags_names_them_as_the_docs_say(cloud: LocalCloud) -> None:
    job_id = new_id("t")
    url = cloud.endpoints["jobs"]
    first = requests.post(url, json={**LATER, "id": job_id, "tags": ["a"]}, timeout=60)
    assert first.status_code == 202, first.text
    again = requests.post(url, json={**LATER, "id": job_id, "tags": ["b"]}, timeout=60)
    assert "tags" in refused(again, 409)["reason"]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    compared = doc[doc.index("a request that differs in any field") :].split(") is a 409")[0]
    assert "`tags`" in compared, compared
