"""A claim instance reclaimed gracefully on the local Cloud Run (SIGTERM, the grace,
SIGKILL, as a rollout or host maintenance does) hands its jobs back: each is queued
again with its checkpoint and no attempt spent, its doorbell rung, and a live instance
resumes it from that checkpoint, long before the stale time. Everything goes over HTTP
and through Pub/Sub as in production; the SIGTERM is the platform's own.

Two jobs share the instance: a `demo` job, whose stage calls check() every 50 ms, is
handed back from its own thread at once; a `nap` job, whose stage sleeps without ever
calling check(), is handed back from outside half-way through the grace, while the nap
goes on (Python cannot stop a thread) and its owner's writes are refused."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import (
    Watch,
    handed_back_at,
    instance_pids,
    owner_pid,
    running_on,
    submit_batch,
)
from shared.job_queue import checkpoint_of
from tests import polling

STALE_S = 60.0  # far beyond the test: only a hand-back can move these jobs on
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=4,
        stale_seconds=STALE_S,
        sweep_interval_seconds=1.0,
        function_env={
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "RECLAIM_PIPELINE_MODULES": "tests.integration.sample_pipelines",
        },
    ) as c:
        yield c


wait_for = functools.partial(polling.wait_for, interval=0.1)


def history(record: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [e for e in record["history"] if e.get("event") == event]


def test_a_sigtermed_instance_hands_its_jobs_back_and_another_resumes_them(
    cloud: LocalCloud,
) -> None:
    watch = Watch(cloud)
    claim = cloud.service("claim")
    jobs = [
        {"pipeline": "demo", "payload": {"stages": 3, "sleep_s": 2.0, "output": True}},
        {"pipeline": "nap", "payload": {"nap_s": 8.0}},
    ]
    _batch, (demo, nap) = submit_batch(cloud.endpoints["jobs"], jobs)

    def both_past_their_first_stage() -> tuple[int, dict[str, tuple[str, int]]] | None:
        records = watch.snapshot([demo, nap])
        if any(checkpoint_of(r)[0] < 1 for r in records.values()):
            return None
        for index, pids in instance_pids(cloud).items():
            held = running_on(records, pids)
            if set(held) == {demo, nap}:
                return index, held
        return None

    index, held = wait_for("both jobs on one instance, past stage 0", both_past_their_first_stage)
    sigterm = datetime.now(UTC)
    claim.reclaim(index, graceful=True)

    records = wait_for(
        "both jobs done",
        lambda: (
            (r := watch.snapshot([demo, nap]))
            and all(x["status"] == "done" for x in r.values())
            and r
        ),
    )
    victim_pids = instance_pids_of_owner(held)
    for job_id, (owner, attempt) in held.items():
        rec = records[job_id]
        (back,) = history(rec, "handed back")
        assert attempt == 1 and (back["owner"], back["attempt"]) == (owner, 1)
        # no attempt spent: the budget grew by the one the hand-back gave back
        assert rec["attempts"] == 2 and rec["max_attempts"] == MAX_ATTEMPTS + 1
        assert rec["handbacks"] == 1 and rec["rescues"] == 0 and not history(rec, "rescued")
        claims = history(rec, "claimed")
        assert [c["attempt"] for c in claims] == [1, 2]
        assert owner_pid(claims[1]["owner"]) not in victim_pids  # another instance
        assert "took_over_from" not in claims[1]  # it was queued, not taken over as stale
        assert handed_back_at(rec, 1) is not None
        assert (handed_back_at(rec, 1) - sigterm).total_seconds() < STALE_S / 4
    # resumed from the checkpoint the hand-back saved: the stages before it ran once, by
    # attempt 1 (their outputs kept), the rest by attempt 2
    saved = max(e["next_stage"] for e in history(records[demo], "checkpoint") if e["attempt"] == 1)
    assert saved >= 1
    completed = records[demo]["result"]["completed"]
    assert [(c["stage"], c["attempt"]) for c in completed] == [
        (i, 1 if i < saved else 2) for i in range(3)
    ]
    outputs = records[demo]["result"]["outputs"]
    assert [o.split("/")[2] for o in outputs] == [str(c["attempt"]) for c in completed]
    # the nap job's first stage too; its nap was cut off and ran again in attempt 2
    assert records[nap]["result"] == {"state": {"first": 1, "napped": 2}, "attempt": 2}
    # the checking stage stopped at once; the napping one was handed back from outside later
    assert handed_back_at(records[demo], 1) < handed_back_at(records[nap], 1)
    gone = wait_for(
        "the reclaimed instance gone",
        lambda: next(
            (
                i["shutdown"]
                for i in claim.stats()["instance_list"]
                if i["id"] == index and i["state"] == "gone"
            ),
            None,
        ),
    )
    assert gone["reason"] == "reclaim" and gone["outcome"] in ("exited", "killed after grace")
    assert cloud.dead_children() == {}


def instance_pids_of_owner(held: dict[str, tuple[str, int]]) -> set[int]:
    return {pid for owner, _ in held.values() if (pid := owner_pid(owner)) is not None}
