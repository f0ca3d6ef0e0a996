"""The dashboard in a real browser against the local cloud: a batch's progress bar
advances as its jobs finish, a failed job's error shows, and the Retry button
requeues it (the page then refreshes itself until the job is done).

Screenshots go to $RECLAIM_SCREENSHOT_DIR (default .local-cloud/screenshots, so a test
run leaves the tree clean); `RECLAIM_SCREENSHOT_DIR=docs .venv/bin/python -m pytest
tests/browser` refreshes the ones docs/seeing.md and the README show."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from local.cloud import LocalCloud
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
    browser.find_element(By.ID, "retry").click()
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
