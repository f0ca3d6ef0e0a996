"""Headless Chromium (Debian's chromium + chromium-driver) driven by Selenium, against
the dashboard of a real local cloud.

Where the browser or its driver is missing the tests say so and are skipped, except
under CI=true, where they fail: CI installs both (`make test`, as root on Debian).
No browser is ever downloaded: Selenium is handed Debian's chromedriver, so its
driver manager never runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("RECLAIM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RECLAIM_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def _missing() -> str | None:
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            return f"{what} is not installed at {path} (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (requirements-dev.txt)"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One headless Chromium for the session, with a fresh profile."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests cannot run under CI=true: {missing}")
        pytest.skip(f"browser tests skipped: {missing}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="reclaim-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
