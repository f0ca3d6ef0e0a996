"""Per-key limits under kills (issue 46), on the local cloud: a key with max_running 1;
each round, the instance running its place's holder is killed hard, the next holder's is
reclaimed gracefully, the next one's is paused past the stale time (alive and silent: a
zombie) and resumed once its place was taken over; twice, with the drain and the sweep
on. From the histories, the place object and the claim logs, no two attempts of the key
ever hold the place or run a stage at once, and the resumed zombie commits nothing
(tests/chaos/flow_kills.py says how each is read). `make soak` plays the same rounds until
every ordering of the four moves that can happen was seen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reclaim.local.cloud import LocalCloud
from tests.chaos import flow_kills

ROUNDS = 2

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with flow_kills.flow_cloud() as c:
        yield c


def test_no_two_attempts_of_a_key_hold_its_place_or_run_at_once(cloud: LocalCloud) -> None:
    run = flow_kills.play(cloud, ROUNDS, deadline_s=150)
    for r in run.rounds:
        run.say(f"moves {' < '.join(r.ordering())} ({r.reclaim_path or 'no drain re-claim'})")
    # the storm happened: every round killed, reclaimed, stopped and resumed a holder
    assert len(run.rounds) == ROUNDS, run.log
    assert all(r.reclaimed and r.paused and r.cont_sent for r in run.rounds), run.log
    assert len(run.samples) > 100, "the place was hardly read: the check saw nothing"
    spans = flow_kills.attempts(run)
    assert any("killed" in s.how for s in spans), spans  # a holder died holding its place
    verdict = flow_kills.judge(run)
    assert verdict.problems() == [], "\n".join(verdict.problems())
