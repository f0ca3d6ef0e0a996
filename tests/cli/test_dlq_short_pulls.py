"""`reclaim dlq` against a Pub/Sub emulator that answers each Pull with at most two
messages and delivers every message twice, as the service may (fewer messages than
are waiting, at-least-once): every dead letter is shown once, nothing is lost, and
--requeue acks them all."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.procs import free_port, spawn, stop, wait_for_port
from shared.stores.gcs import GcsStore
from tests.cli.cli_support import ROOT, Cloud

PER_PULL = 2
LETTERS = 5  # 3 pending jobs, 2 done


@pytest.fixture(scope="module")
def short_pulls(gcs_server: str, gcs_client: Any, log_dir: Path) -> Iterator[Cloud]:
    port = free_port()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "reclaim.local.pubsub_emulator",
            "--port",
            str(port),
            "--max-pull-messages",
            str(PER_PULL),
            "--duplicate-fraction",
            "1",
            "--seed",
            "7",
        ],
        log_path=log_dir / "pubsub-emulator-short-pulls.log",
        cwd=ROOT,
        die_with_parent=True,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        host = f"127.0.0.1:{port}"
        yield _cloud(host, gcs_server, gcs_client)
    finally:
        stop(proc)


def _cloud(host: str, gcs_server: str, gcs_client: Any) -> Cloud:
    project = "reclaim-short-pulls"
    names = {k: f"{k}-{uuid.uuid4().hex[:8]}" for k in ("jobs", "dead", "bells", "hold")}
    publisher, subscriber = wiring.pubsub_admin_clients(host)
    for topic in ("jobs", "dead"):
        publisher.create_topic(request={"name": publisher.topic_path(project, names[topic])})
    for sub, topic in (("bells", "jobs"), ("hold", "dead"), ("probe", "dead")):
        subscriber.create_subscription(
            request={
                "name": subscriber.subscription_path(project, names.get(sub, sub)),
                "topic": publisher.topic_path(project, names[topic]),
                "ack_deadline_seconds": 60,
            }
        )
    bucket = gcs_client.create_bucket(f"dlq-records-{uuid.uuid4().hex[:8]}").name
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": host,
        "STORAGE_EMULATOR_HOST": gcs_server,
        "RECLAIM_PROJECT": project,
        "RECLAIM_RECORDS_BUCKET": bucket,
        "RECLAIM_JOBS_TOPIC": names["jobs"],
        "PYTHONPATH": str(ROOT),
    }
    return Cloud(
        env=env,
        project=project,
        bucket=bucket,
        store=GcsStore(bucket, gcs_client),
        subscriber=subscriber,
        publisher=publisher,
        doorbells=subscriber.subscription_path(project, names["bells"]),
        dead_letter_topic=publisher.topic_path(project, names["dead"]),
        dead_letter_subscription=names["hold"],
    )


def _dead_letters(cloud: Cloud, job_ids: list[str]) -> None:
    cloud.publisher.publish(
        request={
            "topic": cloud.dead_letter_topic,
            "messages": [
                {
                    "data": json.dumps({"job_id": j}).encode(),
                    "attributes": {
                        "job_id": j,
                        "CloudPubSubDeadLetterSourceDeliveryCount": "20",
                        "CloudPubSubDeadLetterSourceSubscription": "reclaim-claim",
                    },
                }
                for j in job_ids
            ],
        }
    )


def test_dlq_reads_every_short_pull_and_shows_each_message_once(short_pulls: Cloud) -> None:
    cloud = short_pulls
    jobs = [cloud.ok("submit", "demo", "--json").json()["id"] for _ in range(LETTERS)]
    pending, finished = jobs[:3], jobs[3:]
    for job_id in finished:
        cloud.drive(job_id, "done")
    assert set(cloud.rung(LETTERS)) == set(jobs)
    _dead_letters(cloud, jobs)

    # the knob: one Pull answers at most PER_PULL although LETTERS are waiting
    probe = cloud.subscriber.subscription_path(cloud.project, "probe")
    answer = cloud.subscriber.pull(request={"subscription": probe, "max_messages": 10}, timeout=5)
    assert len(answer.received_messages) == PER_PULL

    dlq = ("dlq", "--dead-letter-subscription", cloud.dead_letter_subscription, "--json")
    for _ in range(2):  # looking twice: nothing was acked, every copy was handed back
        rows = cloud.ok(*dlq).json()["messages"]
        assert sorted(r["job_id"] for r in rows) == sorted(jobs)  # each once
        assert len({r["message_id"] for r in rows}) == LETTERS
        assert {r["action"] for r in rows} == {"left"}

    requeued = cloud.ok(*dlq, "--requeue").json()["messages"]
    actions = {r["job_id"]: r["action"] for r in requeued}
    assert actions == {
        **dict.fromkeys(pending, "re-rung"),
        **dict.fromkeys(finished, "acked (done)"),
    }
    assert set(cloud.rung(len(pending))) == set(pending)
    assert cloud.ok(*dlq).json()["messages"] == []
