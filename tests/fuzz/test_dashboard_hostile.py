"""Hostile records and odd object names through the web dashboard, in process on the
in-memory store: every page renders (or refuses with its status as a page), and
no record makes a page answer 500.

A record that decodes is the job's page (200); one that does not is the 409 page
saying it is left for a person. The overview, the batches page, the batch page and
/metrics read the same record through the pending index and the batch markers, and
the buttons act on it (a refusal is a 4xx page, never a crash). Over HTTP, against
the real dashboard function, test_hostile_http.py reads the same records.

The @example corpus holds the records that broke a page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import flask
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from shared.dashboard import app as dashboard_app
from shared.dashboard import csrf, figures
from shared.queue import Queue
from shared.stores.memory import MemoryStore
from tests.fuzz.fuzz_support import fuzz
from tests.fuzz.strategies import base_record, hostile_record, odd_segment, record_text
from tests.unit.unit_support import Bell, Clock, settings

JOB = "fuzz-dash-job"
BATCH = "fuzz-batch"
PAGES = {  # path -> the statuses it may answer
    f"/jobs/{JOB}": (200, 409),
    f"/batches/{BATCH}": (200, 404),
    "/": (200,),
    "/batches": (200,),
    "/metrics": (200,),
}


class Dashboard:
    """The dashboard app over one MemoryStore, as the function serves it."""

    def __init__(self, logs: Path) -> None:
        self.store = MemoryStore()
        self.queue = Queue(self.store, Bell(), settings(), clock=Clock())
        source = figures.LogFiles(logs)
        web = flask.Flask(__name__, static_folder=None)
        web.testing = True  # an exception in a page reaches the test instead of a 500 page

        @web.route("/", defaults={"path": ""}, methods=["GET", "POST"])
        @web.route("/<path:path>", methods=["GET", "POST"])
        def any_path(path: str) -> flask.Response:
            return dashboard_app.handle(flask.request, self.queue, source, peek=lambda p, s: [])

        self.client = web.test_client()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard-logs")


def _is_page(response: Any) -> None:
    """An HTML page that says its status, or /metrics' JSON (strict: no NaN, no Infinity)."""
    if response.mimetype == "application/json":
        json.loads(response.get_data(as_text=True), parse_constant=_no_constant)
        return
    assert response.mimetype == "text/html", response.mimetype
    html = response.get_data(as_text=True)
    assert html.startswith("<!doctype html>"), html[:200]
    if response.status_code >= 400:
        assert re.search(rf"<h1>{response.status_code} ", html), html[:500]


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in /metrics: not JSON")


ERROR_NOT_AN_OBJECT = record_text(base_record(JOB, "failed"), error='"boom"')
BATCH_ID_A_NUMBER = record_text(base_record(JOB, "done"), batch_id="7")
HISTORY_ODD = record_text(
    base_record(JOB, "running"), history='[{"at":7,"event":[1],"error":"x"},"y",{"error":{}}]'
)
RESULT_ODD = record_text(base_record(JOB, "done"), result='{"x":[1,{"y":null}],"outputs":7}')
ATTEMPTS_ODD = record_text(base_record(JOB, "queued"), attempts='"two"', max_attempts="[]")
STATUS_OF_A_MEMBER = record_text(
    base_record(JOB, "failed"), error='{"message":[1],"type":{}}', stage="3"
)


@fuzz(examples=150)
@given(data=hostile_record(JOB), odd=st.none() | odd_segment)
@example(data=ERROR_NOT_AN_OBJECT, odd=None)
@example(data=BATCH_ID_A_NUMBER, odd="has space")
@example(data=HISTORY_ODD, odd=None)
@example(data=RESULT_ODD, odd=None)
@example(data=ATTEMPTS_ODD, odd="..")
@example(data=STATUS_OF_A_MEMBER, odd=None)
def test_every_page_renders_a_hostile_record(logs: Path, data: bytes, odd: str | None) -> None:
    dash = Dashboard(logs)
    dash.store.put_raw(JOB, data)
    dash.store.add_pending(JOB)
    dash.store.add_to_batch(BATCH, JOB)
    if odd is not None:  # a foreign object in the pending index and in the batch
        dash.store.put_object(dash.store.bucket_name, f"pending/{odd}", b"")
        dash.store.put_object(dash.store.bucket_name, f"batches/{BATCH}/{odd}", b"")
    for path, allowed in PAGES.items():
        response = dash.client.get(path)
        assert response.status_code in allowed, (path, response.get_data(as_text=True)[:500])
        _is_page(response)
    cookie = dash.client.get_cookie(csrf.COOKIE)  # set by the first page, as in a browser
    assert cookie is not None
    for action in ("cancel", "retry"):
        pressed = dash.client.post(f"/jobs/{JOB}/{action}", data={csrf.FIELD: cookie.value})
        assert pressed.status_code in (303, 400, 404, 409), pressed.get_data(as_text=True)[:500]
        if pressed.status_code != 303:
            _is_page(pressed)
