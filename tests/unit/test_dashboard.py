"""The dashboard in process on MemoryStore: every page renders, buttons call the facade,
forged posts are refused, charts read the figures the metric lines give."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import flask
import pytest

from shared import job_queue, records
from shared.dashboard import app as dashboard_app
from shared.dashboard import charts, csrf, figures, views
from shared.http.edge import Refusal
from shared.queue import Queue
from shared.stores.memory import MemoryStore
from tests.unit.test_identity import cloud_run_token
from tests.unit.unit_support import Bell, Clock, settings


class Letter:
    job_id = "gone-1"
    delivery_count = 20
    source_subscription = "projects/p/subscriptions/reclaim-claim"
    published = "2026-07-26T12:00:00+00:00"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    clock = Clock()
    store, bell = MemoryStore(), Bell()
    queue = Queue(store, bell, settings(), clock=clock)
    source = figures.LogFiles(tmp_path)
    web = flask.Flask(__name__, static_folder=None)

    @web.route("/", defaults={"path": ""}, methods=["GET", "POST", "HEAD", "PUT"])
    @web.route("/<path:path>", methods=["GET", "POST", "HEAD", "PUT"])
    def any_path(path: str) -> flask.Response:
        return dashboard_app.handle(
            flask.request, queue, source, clock=clock, peek=lambda p, s: [Letter()]
        )

    yield {
        "client": web.test_client(),
        "store": store,
        "queue": queue,
        "clock": clock,
        "logs": tmp_path,
        "bell": bell,
    }


def add(store: MemoryStore, job_id: str, clock: Clock, **fields: Any) -> None:
    store.add_pending(job_id)
    store.add_to_batch("b1", job_id)
    store.create({**records.new_record(job_id, "demo", {}, clock(), batch_id="b1"), **fields})


def failed(store: MemoryStore, job_id: str, clock: Clock) -> None:
    stored = store.read(job_id)
    claimed = store.update(
        {**stored.record, **job_queue.claim_fields(stored.record, "o", clock())}, stored.generation
    )
    error = job_queue.error_info(
        ValueError("the input is bad"), stage="parse", attempt=1, now=clock(), retryable=False
    )
    store.update(
        {**claimed.record, **job_queue.fail_fields(claimed.record, clock(), error)},
        claimed.generation,
    )
    store.remove_pending(job_id)


def test_the_overview_shows_gauges_and_charts_from_the_log_lines(world: dict[str, Any]) -> None:
    store, clock = world["store"], world["clock"]
    add(store, "q1", clock)
    clock.advance(42)
    line = {
        "time": (clock() - timedelta(minutes=1)).isoformat(),
        "metric": "finished",
        "pipeline": "demo",
        "outcome": "done",
        "run_s": 1.5,
    }
    (world["logs"] / "claim-0.log").write_text(json.dumps(line) + "\n")
    page = world["client"].get("/")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "<svg" in html and "jobs done per minute" in html
    row = re.search(r'<tr data-pipeline="demo">(.*?)</tr>', html, re.S)
    assert row is not None and "42.0 s" in row.group(1) and "/jobs/q1" in row.group(1)
    assert "b1" in html  # an active batch
    body = world["client"].get("/metrics").get_json()
    assert body["gauges"]["demo"]["queued"] == 1 and body["gauges"]["demo"]["oldest_job_id"] == "q1"
    assert body["last_hour"]["jobs_finished"] == {"done": 1}


def test_a_batch_shows_its_progress_and_a_failed_jobs_error(world: dict[str, Any]) -> None:
    store, clock = world["store"], world["clock"]
    add(store, "a", clock)
    add(store, "b", clock)
    failed(store, "b", clock)
    html = world["client"].get("/batches/b1").get_data(as_text=True)
    assert 'data-finished="1" data-total="2"' in html and "the input is bad" in html
    listing = world["client"].get("/batches").get_data(as_text=True)
    assert 'data-batch="b1"' in listing
    job = world["client"].get("/jobs/b").get_data(as_text=True)
    assert "ValueError" in job and "the input is bad" in job and 'id="retry"' in job


def test_retry_needs_the_token_and_calls_the_facade(world: dict[str, Any]) -> None:
    store, clock, client = world["store"], world["clock"], world["client"]
    add(store, "f", clock)
    failed(store, "f", clock)
    page = client.get("/jobs/f")
    token = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    refused = client.post("/jobs/f/retry", data={"csrf": "forged"})
    assert refused.status_code == 403 and store.read("f").record["status"] == "failed"
    cross = client.post(
        "/jobs/f/retry", data={"csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    other = client.post(
        "/jobs/f/retry", data={"csrf": token}, headers={"Origin": "https://evil.example"}
    )
    assert other.status_code == 403
    done = client.post(
        "/jobs/f/retry", data={"csrf": token}, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert done.status_code == 303 and done.headers["Location"].startswith("/jobs/f?done=retried")
    record = store.read("f").record
    assert record["status"] == "queued" and record["history"][-1]["by"] == "dashboard"
    assert world["bell"].rung == ["f"]
    cancel = client.post("/jobs/f/cancel", data={"csrf": token})
    assert cancel.status_code == 303 and store.read("f").record["status"] == "cancelled"


def test_errors_are_pages_with_their_status(world: dict[str, Any]) -> None:
    client = world["client"]
    assert client.get("/jobs/nope").status_code == 404
    assert client.get("/jobs/..").status_code == 400
    assert client.get("/nowhere").status_code == 404
    put = client.put("/")
    assert put.status_code == 405 and put.headers["Allow"] == "GET, HEAD"
    letters = client.get("/dead-letters").get_data(as_text=True)
    assert "gone-1" in letters
    assert client.get("/assets/dashboard.js").status_code == 200


def test_a_button_on_a_page_the_job_has_moved_past_is_a_409_page(world: dict[str, Any]) -> None:
    """Retry on a job another operator already requeued: a conflict with the job's
    state (the page is stale), not a server error."""
    store, clock, client = world["store"], world["clock"], world["client"]
    add(store, "q", clock)
    page = client.get("/jobs/q")
    token = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    stale = client.post("/jobs/q/retry", data={"csrf": token})
    assert stale.status_code == 409 and stale.mimetype == "text/html"
    assert "<h1>409 illegal transition</h1>" in stale.get_data(as_text=True)
    assert store.read("q").record["status"] == "queued"


def test_a_refusal_is_a_page_for_a_browser_and_json_for_a_json_client() -> None:
    """refusal_page answers what the entry point and functions-framework refuse."""
    refusal = Refusal(404, "not found", "no route /x")
    with flask.Flask(__name__).test_request_context("/x", headers={"Accept": "text/html,*/*"}):
        page = dashboard_app.refusal_page(flask.request, refusal)
    assert (page.status_code, page.mimetype) == (404, "text/html")
    html = page.get_data(as_text=True)
    assert "<h1>404 not found</h1>" in html and "no route /x" in html
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    for path, accept in (("/x", "application/json"), ("/metrics", "*/*")):
        with flask.Flask(__name__).test_request_context(path, headers={"Accept": accept}):
            body = dashboard_app.refusal_page(flask.request, refusal)
        assert body.mimetype == "application/json" and body.status_code == 404
        assert body.get_json() == {"error": "not found", "reason": "no route /x"}


def test_csrf_rules() -> None:
    key, me = csrf.new_key(), "dashboard:ops@example.com"
    token = csrf.new_token(key, me)
    ok = {csrf.COOKIE: token}

    def why(headers: dict[str, str], cookies: dict[str, str] = ok, sent: str = token) -> Any:
        return csrf.problem(headers, cookies, {"csrf": sent}, key=key, who=me, host="x.run.app")

    assert why({}) is None
    assert why({"Origin": "http://localhost:8080"}) is None  # gcloud run services proxy
    assert why({"Origin": "https://x.run.app"}) is None
    assert why({"Referer": "https://x.run.app/jobs/a"}) is None
    assert "another origin" in why({"Origin": "null"})
    assert "another origin" in why({"Referer": "https://evil.example/x"})
    assert "another site" in why({"Sec-Fetch-Site": "same-site"})
    assert "missing" in why({}, {}, "")
    # a pair the attacker chose (or got issued for themselves) and planted as the cookie
    planted = "attacker-nonce." + "0" * 64
    assert "not issued" in why({}, {csrf.COOKIE: planted}, planted)
    theirs = csrf.new_token(key, "dashboard:mallory@example.com")
    assert "not issued" in why({}, {csrf.COOKIE: theirs}, theirs)
    tampered = token.replace(".", ".0", 1)
    assert "not issued" in why({}, {csrf.COOKIE: tampered}, tampered)


def test_a_loopback_origin_is_refused_when_the_dashboard_itself_is_on_loopback() -> None:
    """Locally another port is another origin: no loopback exemption there."""
    key = csrf.new_key()
    token = csrf.new_token(key, "dashboard")
    form, cookies = {"csrf": token}, {csrf.COOKIE: token}
    args = {"key": key, "who": "dashboard", "host": "127.0.0.1:8084"}
    assert csrf.problem({"Origin": "http://127.0.0.1:8084"}, cookies, form, **args) is None
    for origin in ("http://127.0.0.1:9999", "http://localhost:8084", "http://localhost:1"):
        assert "another origin" in str(csrf.problem({"Origin": origin}, cookies, form, **args))


def test_the_history_names_the_verified_caller_never_a_header_they_chose(
    world: dict[str, Any],
) -> None:
    store, clock, client = world["store"], world["clock"], world["client"]
    add(store, "g", clock, status="failed", attempts=1)
    marker = cloud_run_token({"email": "ops@example.com"})
    verified = {"Authorization": f"Bearer {marker}"}
    page = client.get("/jobs/g", headers=verified)
    token = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    claimed = {"X-Goog-Authenticated-User-Email": "accounts.google.com:boss@example.com"}
    done = client.post(
        "/jobs/g/retry", data={"csrf": token}, headers={**verified, **claimed, "X-Reclaim-By": "x"}
    )
    assert done.status_code == 303
    assert store.read("g").record["history"][-1]["by"] == "dashboard:ops@example.com"
    # the same token from a caller without that identity is not theirs
    add(store, "h", clock, status="failed", attempts=1)
    refused = client.post("/jobs/h/retry", data={"csrf": token}, headers=claimed)
    assert refused.status_code == 403 and store.read("h").record["status"] == "failed"


def test_a_chart_is_escaped_svg_with_a_nice_axis() -> None:
    clock = Clock()
    svg = str(charts.line_chart([clock(), clock()], {"<x>": [0.0, 7.0]}, label="l"))
    assert "<x>" not in svg and "&lt;x&gt;" in svg and ">10<" in svg
    assert "no data yet" in str(charts.line_chart([], {}, label="l"))


def test_monitoring_answers_fold_into_buckets() -> None:
    clock = Clock()
    start = views.window_start(clock())
    metric = figures.metrics.METRICS_BY_NAME["jobs_finished"]
    params = figures.query("reclaim", metric, start, 60, 60, "pipeline", {"outcome": "done"})
    assert params["filter"] == (
        'metric.type="logging.googleapis.com/user/reclaim/jobs_finished" '
        'AND metric.label.outcome="done"'
    )
    assert params["aggregation.groupByFields"] == "metric.label.pipeline"
    body = {
        "timeSeries": [
            {
                "metric": {"labels": {"pipeline": "demo"}},
                "points": [
                    {
                        "interval": {
                            "endTime": job_queue.format_time(start + timedelta(seconds=120))
                        },
                        "value": {"int64Value": "3"},
                    }
                ],
            }
        ]
    }
    out = figures.metrics.Buckets(start, 60, 60)
    figures.add_points(out, body, metric, "pipeline")
    assert out.count["demo"][1] == 3 and sum(out.count["demo"]) == 3


def test_the_csrf_cookie_reaches_a_browser_on_the_proxys_http_localhost(
    world: dict[str, Any],
) -> None:
    """Through `gcloud run services proxy` Cloud Run sees https while the browser is on
    http://localhost: a Secure cookie would be dropped there and every button refused."""
    resp = world["client"].get("/", headers={"X-Forwarded-Proto": "https"})
    cookie = next(c for c in resp.headers.getlist("Set-Cookie") if c.startswith(csrf.COOKIE))
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert "secure" not in flags
    assert {"httponly", "samesite=strict", "path=/"} <= flags
