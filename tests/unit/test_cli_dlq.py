"""`reclaim dlq`'s decisions, without Pub/Sub: decoding a dead letter and what
--requeue does with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from shared import records
from shared.cli import dlq
from shared.config import Settings
from shared.jobs import JobStatus
from shared.queue import Queue
from shared.storage_memory import MemoryStore
from tests.unit.unit_support import Bell

NOW = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def test_decode_dead_letter_reads_attribute_then_data_and_pubsub_counts() -> None:
    attrs = {
        "CloudPubSubDeadLetterSourceDeliveryCount": "20",
        "CloudPubSubDeadLetterSourceSubscription": "reclaim-claim",
    }
    data = json.dumps({"job_id": "j9"}).encode()
    letter = dlq.decode_dead_letter("a1", "m1", data, attrs, 0, None)
    assert (letter.job_id, letter.delivery_count, letter.source_subscription) == (
        "j9",
        20,
        "reclaim-claim",
    )
    letter = dlq.decode_dead_letter("a1", "m1", b"\xff", {"job_id": "j8"}, 3, None)
    assert (letter.job_id, letter.delivery_count) == ("j8", 3)
    assert dlq.decode_dead_letter("a", "m", b"[1]", {}, 0, None).job_id is None


def test_requeue_decision() -> None:
    store = MemoryStore()
    store.create(records.new_record("q", "demo", {}, NOW))
    done = store.create(records.new_record("d", "demo", {}, NOW))
    store.update({**done.record, "status": JobStatus.DONE}, done.generation)
    store.put_raw("bad", b"nope")
    queue = Queue(store, Bell(), Settings.from_env({}))
    assert dlq.requeue_decision(queue, "q") == ("ring", "queued")
    assert dlq.requeue_decision(queue, "d") == ("drop", "done")
    assert dlq.requeue_decision(queue, "bad") == ("keep", None)
    assert dlq.requeue_decision(queue, "missing") == ("keep", None)
    assert dlq.requeue_decision(queue, None) == ("keep", None)
