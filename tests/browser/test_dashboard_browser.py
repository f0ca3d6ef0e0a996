"""The dashboard in a real browser against the local cloud: a batch's progress bar
advances as its jobs finish, a failed job's error shows, and the Retry button
requeues it (the page then refreshes itself until the job is done); search by tag,
batch and status, pause and resume, and a bulk retry counted first, each acting as the
verified operator whatever identity header the browser also sends.

Screenshots go to $RECLAIM_SCREENSHOT_DIR (default .local-cloud/screenshots, so a test
run leaves the tree clean); `RECLAIM_SCREENSHOT_DIR=docs .venv/bin/python -m pytest
tests/browser` refreshes the ones docs/seeing.md and the README show."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from tests import polling

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / os.environ.get("RECLAIM_SCREENSHOT_DIR", ".local-cloud/screenshots")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cloud(browser: Any) -> Iterator[LocalCloud]:
    DOCS.mkdir(parents=True, exist_ok=True)
    with LocalCloud.for_tests(stale_seconds=20, sweep_interval_seconds=1) as c:
        yield c


def submit(cloud: LocalCloud, body: dict[str, Any]) -> dict[str, Any]:
    answer = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def text_of(browser: Any, css: str) -> str:
    """The text of the first element matching `css`, or "" while there is none: after a
    click the old page may still be shown, and the live refresh swaps elements under us."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""


until = functools.partial(polling.wait_for, timeout=60, interval=0.25)


def click(browser: Any, css: str) -> None:
    """Click the first element matching `css`; again if the live refresh swapped it
    between finding and clicking (a stale element is never clicked)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked() -> bool:
        try:
            browser.find_element(By.CSS_SELECTOR, css).click()
        except StaleElementReferenceException:
            return False
        return True

    until(f"{css} clicked", clicked)


def test_a_batch_progress_bar_advances_as_its_jobs_finish(cloud: LocalCloud, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    jobs = [
        {"pipeline": "demo", "id": f"piece-{i}", "payload": {"stages": 2, "sleep_s": 0.5 + 1.5 * i}}
        for i in range(4)
    ]
    submit(cloud, {"batch_id": "catalog-demo", "jobs": jobs})
    browser.get(cloud.endpoints["dashboard"] + "/batches/catalog-demo")

    def finished() -> int:
        bar = browser.find_element(By.CSS_SELECTOR, "#batch-progress .progress")
        return int(bar.get_attribute("data-finished"))

    seen: list[int] = []
    shot = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # the page refreshes itself; nobody reloads it
        try:
            now = finished()
        except Exception:  # the element is being swapped by the live refresh
            time.sleep(0.1)
            continue
        if not seen or now != seen[-1]:
            seen.append(now)
        if 0 < now < 4 and not shot:
            browser.save_screenshot(str(DOCS / "dashboard-batch.png"))
            shot = True
        if now == 4:
            break
        time.sleep(0.2)
    assert seen[-1] == 4, seen
    assert seen == sorted(seen) and len(seen) >= 3, f"progress did not advance by steps: {seen}"
    (done,) = browser.find_elements(By.CSS_SELECTOR, "#batch-progress .seg.done")
    bar = browser.find_element(By.CSS_SELECTOR, "#batch-progress svg.progress")
    assert done.size["width"] >= 0.95 * bar.size["width"] > 0  # drawn, not only in the DOM


def test_a_failed_jobs_error_shows_and_retry_requeues_it(cloud: LocalCloud, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    payload = {"stages": 2, "fail_at": 1, "fail_attempts": 1, "permanent": True, "sleep_s": 0.2}
    submit(cloud, {"pipeline": "demo", "id": "render-7", "payload": payload})
    url = cloud.endpoints["dashboard"] + "/jobs/render-7"
    browser.get(url)

    def status() -> str:
        return text_of(browser, "#status")

    until("the job failed", lambda: status() == "failed")
    error = until("its error shown", lambda: text_of(browser, "#error .error"))
    assert "PermanentError" in error or "injected" in error.lower()
    browser.save_screenshot(str(DOCS / "dashboard-job-failed.png"))
    click(browser, "#retry")
    # the click returns before the redirected page has loaded: wait for its message
    until("the retry's message", lambda: "retried" in text_of(browser, "#message"), timeout=30)
    record = requests.get(cloud.endpoints["jobs"] + "/render-7", timeout=30).json()
    assert record["history"][-1]["event"] in ("retried", "claimed", "checkpoint", "done")
    assert any(h["event"] == "retried" for h in record["history"])
    until("the second attempt done", lambda: status() == "done")  # by the live refresh
    browser.save_screenshot(str(DOCS / "dashboard-job-retried.png"))
    assert requests.get(cloud.endpoints["jobs"] + "/render-7", timeout=30).json()["attempts"] == 2
    browser.get(cloud.endpoints["dashboard"] + "/")
    charts = "svg.chart polyline"
    until(
        "two charts drawn",
        lambda: len(browser.find_elements(By.CSS_SELECTOR, charts)) >= 2,
        timeout=30,
    )
    browser.save_screenshot(str(DOCS / "dashboard-overview.png"))


def test_a_forged_post_from_another_origin_changes_nothing(cloud: LocalCloud) -> None:
    submit(cloud, {"pipeline": "demo", "id": "keep-1", "payload": {"stages": 1, "sleep_s": 30}})
    answer = requests.post(
        cloud.endpoints["dashboard"] + "/jobs/keep-1/cancel",
        data={"csrf": "guessed"},
        cookies={"reclaim_csrf": "other"},
        headers={"Origin": "https://evil.example"},
        timeout=30,
    )
    assert answer.status_code == 403
    assert (
        requests.get(cloud.endpoints["jobs"] + "/keep-1", timeout=30).json()["status"]
        != "cancelled"
    )


def test_a_jobs_parents_and_children_are_linked(cloud: LocalCloud, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    jobs = [
        {"id": "wf-cover", "pipeline": "demo", "payload": {"stages": 1}},
        {"id": "wf-thumb", "pipeline": "demo", "depends_on": ["wf-cover"], "payload": {}},
    ]
    submit(cloud, {"batch_id": "wf-demo", "jobs": jobs})
    browser.get(cloud.endpoints["dashboard"] + "/jobs/wf-cover")
    until("the child linked", lambda: "wf-thumb" in text_of(browser, "#relations #children"))
    click(browser, "#children a")
    until("the child's page", lambda: "wf-thumb" in text_of(browser, "h1"))
    assert "wf-cover" in text_of(browser, "#relations #parents")
    link = browser.find_element(By.CSS_SELECTOR, "#parents a").get_attribute("href")
    assert link.endswith("/jobs/wf-cover")


def test_a_page_on_another_local_port_planting_a_token_pair_is_refused(
    cloud: LocalCloud, browser: Any
) -> None:
    """The operator's browser carries their verified identity (as behind `gcloud run
    services proxy`); a page on another loopback port plants a cookie+token pair the
    dashboard issued to the attacker and posts the Cancel form: 403, with its reason."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from selenium.webdriver.common.by import By

    submit(cloud, {"pipeline": "demo", "id": "keep-2", "payload": {"stages": 1, "sleep_s": 60}})
    dashboard = cloud.endpoints["dashboard"]
    mallory = {"Authorization": "Bearer " + cloud.platform.identity_token("dashboard", "m@x.io")}
    page = requests.get(f"{dashboard}/jobs/keep-2", headers=mallory, timeout=30).text
    planted = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    html = (
        f"<script>document.cookie = 'reclaim_csrf={planted}; path=/jobs';</script>"
        f'<form id="f" method="post" action="{dashboard}/jobs/keep-2/cancel">'
        f'<input name="csrf" value="{planted}"></form>'
        "<script>document.getElementById('f').submit();</script>"
    ).encode()

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: Any) -> None:
            pass

    # Threading: Chromium also opens idle (preconnect) sockets to the page's server; a
    # one-request-at-a-time server would sit reading one, and shutdown() would wait for
    # Chromium to drop it (a minute).
    server = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ops = "Bearer " + cloud.platform.identity_token("dashboard", "ops@example.com")
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": ops}})
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        until("the refusal", lambda: "403" in text_of(browser, "h1"))
        reason = browser.find_element(By.ID, "reason").text
        assert "another" in reason or "not issued" in reason, reason
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        server.shutdown()
        server.server_close()
    status = requests.get(cloud.endpoints["jobs"] + "/keep-2", timeout=30).json()["status"]
    assert status != "cancelled"


OPS_EMAIL = "ops@example.com"
CLAIMED = {  # what a caller may send to pose as someone else: never believed
    "X-Goog-Authenticated-User-Email": "accounts.google.com:boss@example.com",
    "X-Reclaim-By": "boss@example.com",
}


@contextlib.contextmanager
def as_operator(cloud: LocalCloud, browser: Any) -> Iterator[None]:
    """The browser carries the operator's verified identity (as behind `gcloud run services
    proxy`) and headers claiming another one."""
    token = "Bearer " + cloud.platform.identity_token("dashboard", OPS_EMAIL)
    browser.execute_cdp_cmd("Network.enable", {})
    headers = {"Authorization": token, **CLAIMED}
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})
    try:
        yield
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})


def records(cloud: LocalCloud) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )
    return client.bucket(cloud.endpoints["records_bucket"])


def job_of(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{cloud.endpoints['jobs']}/{job_id}", timeout=30).json())


def listed(browser: Any) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        rows = browser.find_elements(By.CSS_SELECTOR, "#results tr[data-job]")
        return sorted(str(r.get_attribute("data-job")) for r in rows)
    except StaleElementReferenceException:
        return []


def search(browser: Any, **fields: str) -> None:
    """Fill the search form as a person does and press Search."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for name, value in fields.items():
        element = browser.find_element(By.CSS_SELECTOR, f"#search [name={name}]")
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    browser.find_element(By.ID, "search-button").click()


def test_search_finds_jobs_by_tag_batch_and_status(cloud: LocalCloud, browser: Any) -> None:
    jobs = [
        {"pipeline": "demo", "id": f"find-{i}", "payload": {"stages": 1}, "tags": tags}
        for i, tags in enumerate((["nightly"], ["nightly", "team-a"], []))
    ]
    submit(cloud, {"batch_id": "find-demo", "jobs": jobs})
    for i in range(3):
        until(f"find-{i} done", lambda i=i: job_of(cloud, f"find-{i}")["status"] == "done")
    browser.get(cloud.endpoints["dashboard"] + "/jobs")
    search(browser, tag="nightly")
    until("the tagged jobs", lambda: listed(browser) == ["find-0", "find-1"])
    browser.get(cloud.endpoints["dashboard"] + "/jobs")
    search(browser, batch="find-demo", status="done", pipeline="demo")
    until("the batch's done jobs", lambda: listed(browser) == ["find-0", "find-1", "find-2"])
    search(browser, batch="find-demo", status="failed")
    until("none failed", lambda: "No job" in text_of(browser, "#no-results"))
    search(browser, batch="", status="done")  # done jobs have no index of their own
    until("where to find them", lambda: "batch or tag" in text_of(browser, "#needs-batch"))
    assert text_of(browser, "h1") == "Jobs" and listed(browser) == []  # a page, not a 400
    option = 'select[name=status] option[value="done"]'
    assert text_of(browser, option) == "done (with a batch or tag)"


def test_failed_and_cancelled_jobs_are_browsed_by_the_day_they_ended(
    cloud: LocalCloud, browser: Any
) -> None:
    """The Finished page lists one day's failed (or cancelled) jobs from the ended index,
    with their batches; a job's page locally shows where its log lines are, not a
    Cloud Logging link."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    bad = {"stages": 1, "fail_at": 0, "permanent": True}
    jobs = [{"pipeline": "demo", "id": f"day-bad-{i}", "payload": bad} for i in range(2)]
    submit(cloud, {"batch_id": "day-demo", "jobs": jobs})
    submit(
        cloud,
        {
            "pipeline": "demo",
            "id": "day-stop",
            "payload": {"stages": 1},
            "delay_seconds": 86400,
        },
    )
    requests.post(f"{cloud.endpoints['admin']}/jobs/day-stop/cancel", json={}, timeout=30)
    for job in ("day-bad-0", "day-bad-1"):
        until(f"{job} failed", lambda job=job: job_of(cloud, job)["status"] == "failed")
    ended = job_of(cloud, "day-bad-0")["updated_at"][:10]
    browser.get(cloud.endpoints["dashboard"] + "/")
    click(browser, 'nav a[href="/finished"]')
    until("today's failed jobs", lambda: {"day-bad-0", "day-bad-1"} <= set(listed(browser)))
    assert text_of(browser, "h1") == f"Finished: failed on {ended}"
    assert "day-demo (2)" in text_of(browser, "#finished-batches")
    browser.save_screenshot(str(DOCS / "dashboard-finished.png"))
    Select(browser.find_element(By.CSS_SELECTOR, "#finished-form [name=status]")).select_by_value(
        "cancelled"
    )
    click(browser, "#show-day")
    until("the cancelled one", lambda: listed(browser) == ["day-stop"])
    click(browser, "#previous-day")
    until("the day before", lambda: "No job ended cancelled" in text_of(browser, "#no-results"))
    assert text_of(browser, "#next-day").endswith(f"{ended} →")
    browser.get(cloud.endpoints["dashboard"] + "/jobs/day-bad-0")
    until("the job page", lambda: "grep" in text_of(browser, "#trace"))
    assert "Cloud Logging" not in browser.page_source  # no link to a console locally


def test_the_overview_flags_a_paused_pipeline(cloud: LocalCloud, browser: Any) -> None:
    admin = cloud.endpoints["admin"]
    paused = requests.post(f"{admin}/pipelines/upload-digest/pause", json={}, timeout=30)
    assert paused.status_code == 200, paused.text
    try:
        browser.get(cloud.endpoints["dashboard"] + "/")
        until("the banner", lambda: "upload-digest" in text_of(browser, "#paused-banner"))
        assert "none of its jobs starts" in text_of(browser, "#paused-banner")
        browser.save_screenshot(str(DOCS / "dashboard-paused.png"))
    finally:
        resumed = requests.post(f"{admin}/pipelines/upload-digest/resume", json={}, timeout=30)
        assert resumed.status_code == 200, resumed.text
    browser.get(cloud.endpoints["dashboard"] + "/")
    until("no banner", lambda: text_of(browser, "h1") == "Overview")
    assert text_of(browser, "#paused-banner") == ""


def test_pause_and_resume_a_pipeline_as_the_verified_operator(
    cloud: LocalCloud, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    from shared.features import flow

    bucket = records(cloud)
    dashboard = cloud.endpoints["dashboard"]
    with as_operator(cloud, browser):
        try:
            browser.get(dashboard + "/pipelines")
            browser.find_element(By.CSS_SELECTOR, 'tr[data-pipeline="demo"] button').click()
            until("paused", lambda: "paused demo" in text_of(browser, "#message"))
            by = text_of(browser, 'tr[data-pipeline="demo"] .by')
            assert by == f"dashboard:{OPS_EMAIL}", by  # the verified caller, not "boss"
            time.sleep(flow.PAUSE_CACHE_S)  # the documented bound of an instance's cached read
            submit(cloud, {"pipeline": "demo", "id": "parked-1", "payload": {"stages": 1}})
            until("parked", lambda: bucket.get_blob("parked/demo/parked-1") is not None)
            assert job_of(cloud, "parked-1")["attempts"] == 0
            browser.find_element(By.CSS_SELECTOR, 'tr[data-pipeline="demo"] button').click()
            until("resumed", lambda: "resumed demo" in text_of(browser, "#message"))
        finally:
            if bucket.get_blob("paused/demo") is not None:  # leave demo running for the rest
                bucket.blob("paused/demo").delete()
    until("the parked job done", lambda: job_of(cloud, "parked-1")["status"] == "done")
    assert 'data-paused="no"' in browser.page_source.replace("'", '"')


def test_a_bulk_retry_counts_first_then_confirms_as_the_verified_operator(
    cloud: LocalCloud, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    payload = {"stages": 1, "fail_at": 0, "fail_attempts": 1, "permanent": True}
    ids = [f"bulk-{i}" for i in range(3)]
    jobs = [{"pipeline": "demo", "id": i, "payload": payload} for i in ids]
    submit(cloud, {"batch_id": "bulk-demo", "jobs": jobs})
    for i in ids:
        until(f"{i} failed", lambda i=i: job_of(cloud, i)["status"] == "failed")
    with as_operator(cloud, browser):
        browser.get(cloud.endpoints["dashboard"] + "/jobs")
        search(browser, batch="bulk-demo", status="failed")
        until("the failed jobs", lambda: listed(browser) == ids)
        browser.find_element(By.ID, "bulk-retry").click()
        until("the count", lambda: text_of(browser, "#matching") == "3")
        shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#first-ids a")]
        assert sorted(shown) == ids
        assert all(job_of(cloud, i)["status"] == "failed" for i in ids)  # counting did nothing
        browser.save_screenshot(str(DOCS / "dashboard-bulk-count.png"))
        browser.find_element(By.ID, "confirm").click()
        until("the result", lambda: "retry: 3 of 3" in text_of(browser, "#message"))
    for i in ids:
        view = until(f"{i} done", lambda i=i: (v := job_of(cloud, i))["status"] == "done" and v)
        retried = [h for h in view["history"] if h["event"] == "retried"]
        assert [h.get("by") for h in retried] == [f"dashboard:{OPS_EMAIL}"]
        assert "boss" not in json.dumps(view["history"])  # no header the caller chose


def test_a_jobs_trace_is_drawn_as_a_waterfall_on_its_page(cloud: LocalCloud, browser: Any) -> None:
    """The job page draws the spans the functions exported to the local collector: each
    attempt with its stages, the requeue between them, the stages' own spans, the end."""
    from selenium.webdriver.common.by import By

    payload = {"stages": 3, "fail_at": 1, "fail_attempts": 1, "sleep_s": 0.3}
    submit(cloud, {"pipeline": "demo", "id": "traced-1", "payload": payload})
    browser.get(cloud.endpoints["dashboard"] + "/jobs/traced-1")

    def drawn() -> set[str]:
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            bars = browser.find_elements(By.CSS_SELECTOR, "svg#waterfall g.span")
            return {str(bar.get_attribute("data-name")) for bar in bars}
        except StaleElementReferenceException:
            return set()

    # live (the page refreshes itself); the requeued job waits out its backoff, then the
    # sweep's re-ring of a job whose doorbell came before it was due (up to the stale time)
    names = until("the trace's end drawn", lambda: "done" in (n := drawn()) and n, timeout=150)
    assert {"job demo", "submit", "queued", "attempt 1", "requeued", "attempt 2"} <= names
    assert {"stage-0", "stage-1", "sleep"} <= names  # the stages, and their own spans
    # the last stages of attempt 2 may be one span: their checkpoint came within the
    # minimum write interval, so it was coalesced and the done write dropped it
    assert any(name.endswith("stage-2") for name in names)
    assert "local trace collector" in text_of(browser, "#trace-source")
    failed = browser.find_elements(By.CSS_SELECTOR, 'svg#waterfall g[data-name="requeued"] rect')
    assert failed and failed[0].get_attribute("stroke") == "#dc2626"  # the stage error shows
    browser.find_element(By.CSS_SELECTOR, "#trace").location_once_scrolled_into_view  # noqa: B018
    browser.save_screenshot(str(DOCS / "dashboard-job-trace.png"))


def test_a_jobs_outputs_are_links_and_its_error_shows_the_traceback(
    cloud: LocalCloud, browser: Any
) -> None:
    """Issue 40: the job page links each committed output (its link answers the bytes on
    the local cloud), and a failed stage's traceback shows where the pipeline raised."""
    from selenium.webdriver.common.by import By

    submit(
        cloud, {"pipeline": "demo", "id": "with-outputs", "payload": {"stages": 2, "output": True}}
    )
    browser.get(cloud.endpoints["dashboard"] + "/jobs/with-outputs")
    until("the job done", lambda: text_of(browser, "#status") == "done")
    browser.get(cloud.endpoints["dashboard"] + "/jobs/with-outputs")  # the final page
    links = until(
        "two output links",
        lambda: (
            [
                (a.text, a.get_attribute("href"))
                for a in browser.find_elements(By.CSS_SELECTOR, "#outputs a.output")
            ]
            or None
        ),
    )
    assert [name for name, _ in links] == ["stage-0.json", "stage-1.json"]
    for name, href in links:
        assert href.endswith(f"/jobs/with-outputs/outputs/{name}?attempt=1")
        got = requests.get(href, timeout=30)  # the link, as the browser follows it
        assert got.status_code == 200 and json.loads(got.content)["job_id"] == "with-outputs"
    browser.save_screenshot(str(DOCS / "dashboard-job-outputs.png"))

    payload = {"stages": 1, "fail_at": 0, "permanent": True}
    submit(cloud, {"pipeline": "demo", "id": "with-traceback", "payload": payload})
    browser.get(cloud.endpoints["dashboard"] + "/jobs/with-traceback")
    until("the job failed", lambda: text_of(browser, "#status") == "failed")
    trace = until("its traceback shown", lambda: text_of(browser, "#error pre.traceback"))
    assert trace.startswith("Traceback (most recent call last):") and "demo.py" in trace
    assert "demo.py" in text_of(browser, "#error .raised-at")
    assert "permanent" in text_of(browser, "#error .muted")
