"""A job handed back while every claim slot is busy is taken by the first slot that
frees, from the pending listing, whatever became of its doorbell.

On Cloud Run the hand-back's doorbell would pend (every slot busy), be refused with a
429 after the pending limit, and come back only after Pub/Sub's backoff; here it is
dropped outright (the emulator's fault knob), the worst case. Nothing else can deliver
the job: the sweep does not tick and the stale time (60 s) is far beyond the test. So
the only way the job runs again is the freed slot's drain taking it because its marker
says it is due, and the test shows that by state: the order of the records' history,
the new owner's instance, and the drain's log line. How fast that is belongs to
`make bench` (bench/handback.py), not to a pass/fail test on a shared machine.

Layout: 2 warm instances x 1 slot. `held` (a long demo job) runs on instance A;
`holder` (until_handed_back) holds B's only slot until `held` has been handed back.
A is reclaimed gracefully (SIGTERM); the replacement that min_instances starts gets no
request (no doorbell reaches it), so it never frees a slot."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import (
    Watch,
    emulator_stats,
    history_time,
    instance_pids,
    owner_pid,
    running_on,
    submit_batch,
    topic_count,
)
from tests import polling
from tests.integration.cloud_support import lines_about

STALE_S = 60.0  # far beyond the test: no staleness rescue, no overdue-by-age drain

wait_for = functools.partial(polling.wait_for, interval=0.1)


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        min_instances=2,
        concurrency=1,
        stale_seconds=STALE_S,
        sweep_interval_seconds=0,  # no tick: no sweep re-rings the dropped doorbell
        function_env={"RECLAIM_PIPELINE_MODULES": "tests.integration.sample_pipelines"},
    ) as c:
        yield c


def test_a_job_handed_back_while_every_slot_is_busy_is_taken_by_the_first_freed_slot(
    cloud: LocalCloud,
) -> None:
    e = cloud.endpoints
    watch = Watch(cloud)
    claim = cloud.service("claim")
    long_job = {"pipeline": "demo", "payload": {"stages": 2, "sleep_s": 30.0}}
    _b, (held,) = submit_batch(e["jobs"], [long_job])
    wait_for("held running", lambda: watch.snapshot([held])[held]["status"] == "running")
    hold = {"pipeline": "until_handed_back", "payload": {"job": held}}
    _b, (holder,) = submit_batch(e["jobs"], [hold])

    def both_running() -> dict[str, int] | None:
        records = watch.snapshot([held, holder])
        where = {
            job_id: index
            for index, pids in instance_pids(cloud).items()
            for job_id in running_on(records, pids)
        }
        return where if len(where) == 2 else None

    where = wait_for("both jobs running, one per instance", both_running)
    assert where[held] != where[holder]  # each instance's only slot is busy
    freed_pids = instance_pids(cloud)[where[holder]]
    # from now on every doorbell is lost: the hand-back's ring reaches nobody
    faults = requests.post(
        e["emulator_admin"] + "/faults", json={"drop_publish_fraction": 1.0}, timeout=10
    )
    assert faults.ok, faults.text
    claim.reclaim(where[held], graceful=True)

    def claimed_again() -> dict[str, dict] | None:
        records = watch.snapshot([held, holder])
        return records if history_time(records[held], "claimed", 2) is not None else None

    records = wait_for("held claimed again", claimed_again, timeout=60)
    handed_back = history_time(records[held], "handed back", 1)
    holder_done = history_time(records[holder], "done", 1)
    reclaimed = history_time(records[held], "claimed", 2)
    assert handed_back is not None and holder_done is not None and reclaimed is not None
    # the causal order: hand-back (every slot busy) -> the holder's slot frees -> claim
    assert handed_back <= holder_done <= reclaimed
    assert records[holder]["result"] == {"released_by": held}
    second = [h for h in records[held]["history"] if h["event"] == "claimed"][1]
    assert owner_pid(second["owner"]) in freed_pids  # by the instance whose slot freed
    assert "took_over_from" not in second  # queued and due, not a stale rescue
    drained = [
        line
        for line in lines_about(cloud.config.log_dir, held)["claim"]
        if line.get("message") == "draining a due job"
    ]
    assert [(d.get("marked_due"), d.get("backlog")) for d in drained] == [(True, False)]
    # the hand-back's ring was lost, as the test meant (it may land after the claim: the
    # owner writes the hand-back, then publishes)
    wait_for(
        "the hand-back's doorbell dropped",
        lambda: topic_count(emulator_stats(e["emulator_admin"]), e["jobs_topic"], "dropped") >= 1,
    )
