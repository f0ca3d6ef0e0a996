"""`reclaim dlq`'s decisions, without Pub/Sub: decoding a dead letter and what
--requeue does with it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reclaim.cli import dlq
from shared import deadletters, records
from shared.config import Settings
from shared.jobs import JobStatus
from shared.queue import Queue
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell

NOW = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)


def test_decode_dead_letter_reads_attribute_then_data_and_pubsub_counts() -> None:
    attrs = {
        "CloudPubSubDeadLetterSourceDeliveryCount": "20",
        "CloudPubSubDeadLetterSourceSubscription": "reclaim-claim",
    }
    data = json.dumps({"job_id": "j9"}).encode()
    letter = deadletters.decode_dead_letter(["a1"], "m1", data, attrs, 0, None)
    assert (letter.job_id, letter.delivery_count, letter.source_subscription) == (
        "j9",
        20,
        "reclaim-claim",
    )
    letter = deadletters.decode_dead_letter(["a1", "a2"], "m1", b"\xff", {"job_id": "j8"}, 3, None)
    assert (letter.job_id, letter.delivery_count, letter.ack_ids) == ("j8", 3, ("a1", "a2"))
    assert deadletters.decode_dead_letter(["a"], "m", b"[1]", {}, 0, None).job_id is None


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
    assert dlq.requeue_decision(queue, "not an id") == ("keep", None)  # a letter naming no job


@dataclass
class _Message:
    message_id: str


@dataclass
class _Received:
    ack_id: str
    message: _Message


def _scripted(*answers: list[tuple[str, str]]) -> tuple[Any, list[int]]:
    """A pull that answers (ack id, message id) lists in turn, then nothing."""
    asked: list[int] = []
    queue = list(answers)

    def pull(n: int) -> Sequence[_Received]:
        asked.append(n)
        batch = queue.pop(0) if queue else []
        assert len(batch) <= n
        return [_Received(ack, _Message(mid)) for ack, mid in batch]

    return pull, asked


def test_pulls_go_on_after_a_short_answer_until_an_empty_one() -> None:
    pull, asked = _scripted([("a1", "m1")], [("a2", "m2"), ("a3", "m3")], [("a4", "m4")])
    got = deadletters.pull_distinct(pull, 100)
    assert [(r.message.message_id, ids) for r, ids in got] == [
        ("m1", ("a1",)),
        ("m2", ("a2",)),
        ("m3", ("a3",)),
        ("m4", ("a4",)),
    ]
    assert asked == [100, 99, 97, 96]  # the fourth answer was empty: the backlog is drained


def test_a_message_delivered_twice_is_kept_once_with_both_ack_ids() -> None:
    pull, _ = _scripted([("a1", "m1"), ("a2", "m2")], [("a3", "m1")], [("a4", "m2"), ("a5", "m3")])
    got = deadletters.pull_distinct(pull, 100)
    assert [(r.message.message_id, ids) for r, ids in got] == [
        ("m1", ("a1", "a3")),
        ("m2", ("a2", "a4")),
        ("m3", ("a5",)),
    ]


def test_pulling_stops_at_most_messages() -> None:
    pull, asked = _scripted([("a1", "m1"), ("a2", "m2")], [("a3", "m3")], [("a4", "m4")])
    assert [r.message.message_id for r, _ in deadletters.pull_distinct(pull, 3)] == [
        "m1",
        "m2",
        "m3",
    ]
    assert asked == [3, 1]


def test_a_subscription_that_keeps_redelivering_cannot_hold_the_loop() -> None:
    answers = [[(f"a{i}", "m1")] for i in range(100)]
    pull, asked = _scripted(*answers)
    got = deadletters.pull_distinct(pull, 2)
    assert [(r.message.message_id, len(ids)) for r, ids in got] == [("m1", 8)]
    assert len(asked) == 8  # _DELIVERIES_PER_MESSAGE x most deliveries, then it stops
