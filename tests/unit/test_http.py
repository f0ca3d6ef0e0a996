"""shared.http.edge: the one mapping from library errors to JSON refusals, and the entry
point wrapper every function uses (run in a Flask request context, no server)."""

from __future__ import annotations

import json

import flask
import pytest

from shared import errors
from shared.http.edge import Refusal, answer, entry_point, refusal_for

APP = flask.Flask(__name__)


@pytest.mark.parametrize(
    ("exc", "status", "error"),
    [
        (errors.InvalidSubmission("bad"), 400, "invalid request"),
        (errors.Conflict("taken"), 409, "conflict"),
        (errors.BadEvent("no job_id"), 400, "bad event"),
        (errors.InvalidInput("too long", "job id"), 400, "invalid job id"),
        (errors.JobNotFound("j1"), 404, "not found"),
        (errors.BatchNotFound("b1"), 404, "not found"),
        (errors.CorruptRecord("j1", "not JSON"), 409, "record unreadable"),
        (errors.ConfigError("RECLAIM_X='y' is invalid"), 500, "misconfigured"),
        (errors.Unavailable("503"), 503, "unavailable"),
        (errors.NotFound("no bucket"), 503, "unavailable"),  # a write's 404: the bucket
        (errors.DoorbellError("j1", "timeout"), 503, "unavailable"),
        (errors.IllegalTransition("cannot"), 500, "internal error"),
        (Refusal(413, "body too large", "big"), 413, "body too large"),
    ],
)
def test_each_error_kind_has_its_answer(exc: errors.ReclaimError, status: int, error: str) -> None:
    refusal = refusal_for(exc)
    assert (refusal.status, refusal.error) == (status, error)
    assert refusal.reason


def test_an_outage_asks_for_a_retry_after() -> None:
    assert refusal_for(errors.Unavailable("x"), 10).headers == {"Retry-After": "10"}


def test_every_problem_of_a_refused_batch_is_in_the_answer() -> None:
    refusal = refusal_for(errors.InvalidSubmission("first", ["first", "second"]))
    with APP.app_context():
        body = refusal.answer().get_json()
    assert body == {"error": "invalid request", "reason": "first", "problems": ["first", "second"]}


def _call(handler: object) -> flask.Response:
    wrapped = entry_point("test")(handler)
    with APP.test_request_context("/x", method="POST"):
        return wrapped(flask.request)


def test_the_entry_point_answers_a_library_error_as_json() -> None:
    def handler(request: flask.Request) -> flask.Response:
        raise errors.JobNotFound("j9")

    response = _call(handler)
    assert response.status_code == 404
    assert response.get_json() == {"error": "not found", "reason": "no job 'j9'"}


def test_the_entry_point_answers_a_bug_with_a_logged_500(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def handler(request: flask.Request) -> flask.Response:
        raise TypeError("a bug")

    response = _call(handler)
    assert response.status_code == 500 and response.get_json()["error"] == "internal error"
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(e["severity"] == "ERROR" and "TypeError: a bug" in e["stack_trace"] for e in logged)


def test_the_entry_point_answers_every_refusal_with_the_functions_render() -> None:
    """The dashboard renders refusals as pages: a library error and a bug alike."""

    def render(request: flask.Request, refusal: Refusal) -> flask.Response:
        return flask.Response(f"<h1>{refusal.status} {refusal.error}</h1>", refusal.status)

    def missing(request: flask.Request) -> flask.Response:
        raise errors.JobNotFound("j9")

    def buggy(request: flask.Request) -> flask.Response:
        raise TypeError("a bug")

    for handler, status, error in ((missing, 404, "not found"), (buggy, 500, "internal error")):
        with APP.test_request_context("/x"):
            response = entry_point("test", render=render)(handler)(flask.request)
        assert response.status_code == status
        assert response.get_data(as_text=True) == f"<h1>{status} {error}</h1>"


def test_the_entry_point_acknowledges_an_ignored_event() -> None:
    def handler(request: flask.Request) -> flask.Response:
        raise errors.IgnoredEvent("an object was deleted")

    response = _call(handler)
    assert response.status_code == 200 and response.get_json()["ignored"] is True


def test_the_entry_point_passes_answers_through() -> None:
    def handler(request: flask.Request) -> flask.Response:
        return answer(202, {"ok": True})

    assert _call(handler).status_code == 202
