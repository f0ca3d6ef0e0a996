"""A rollout's transition on the local Cloud Run (issue 42, F13): Cloud Run's traffic moves
"may be directed to either a new revision or a previous revision during the transition
period" (https://cloud.google.com/run/docs/rollouts-rollbacks-traffic-migration), so a
deploy may ask for one: the previous revision hands over, still taking new requests,
until the transition ends or a newer deploy cuts it. Real instance processes, arranged
by state (tests/local/test_cloudrun_revisions.py's rig)."""

from __future__ import annotations

from collections.abc import Callable

from tests.local.test_cloudrun_revisions import Rig, _call, rig, wait_for

__all__ = ["rig"]  # the fixture, imported for this module's tests


def test_during_a_transition_new_requests_still_reach_the_previous_revision(
    rig: Callable[..., Rig],
) -> None:
    r = rig(concurrency=2, max_instances=2)
    first = _call(f"{r.url}/")[1]["revision"]
    second = r.svc.deploy({"X": "2"}, transition_s=600).name
    wait_for("the new revision serving", lambda: r.serving(second))
    assert r.revision(first)["state"] == "handing over"
    seen = [_call(f"{r.url}/during-{i}")[1]["revision"] for i in range(3)]
    assert seen == [first] * 3  # the worst case of "either": the old code takes them
    assert r.revision(first)["instances"]["serving"] >= 1
    # a newer deploy with no transition is a hard cut: every older revision retires
    third = r.svc.deploy({"X": "3"}).name
    wait_for("the third revision serving", lambda: r.serving(third))
    assert r.revision(first)["state"] == "retired" and r.revision(second)["state"] == "retired"
    assert [_call(f"{r.url}/after-{i}")[1]["revision"] for i in range(2)] == [third] * 2
    wait_for("the first revision drained", lambda: r.drained(first))


def test_a_transition_ends_by_itself_and_the_previous_revision_drains(
    rig: Callable[..., Rig],
) -> None:
    r = rig(concurrency=2, max_instances=2)
    first = _call(f"{r.url}/")[1]["revision"]
    second = r.svc.deploy({"X": "2"}, transition_s=0.5).name
    wait_for("the new revision serving", lambda: r.serving(second))
    wait_for("the previous revision drained", lambda: r.drained(first))
    assert r.revision(first)["state"] == "retired"
    assert _call(f"{r.url}/later")[1]["revision"] == second
    status, answer = _call(
        f"{r.platform.admin_url}/services/svc/revisions", {"transition_s": "soon"}
    )
    assert status == 400 and answer["error"] == "bad revision"
