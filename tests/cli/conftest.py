"""The CLI as operators run it: a subprocess talking to fake-gcs-server and the
Pub/Sub emulator, with a bucket and topics of its own per test module."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shared.features import table as features
from shared.stores.gcs import GcsStore
from tests.cli.cli_support import ROOT, Cloud


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str], gcs_client: Any, publisher: Any, subscriber: Any
) -> Iterator[Cloud]:
    def name(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    project = emulator_env["GOOGLE_CLOUD_PROJECT"]
    bucket = gcs_client.create_bucket(name("cli-records")).name
    jobs_topic = name("cli-jobs")
    dead_topic = name("cli-dead")
    publisher.create_topic(name=publisher.topic_path(project, jobs_topic))
    publisher.create_topic(name=publisher.topic_path(project, dead_topic))
    doorbells = subscriber.subscription_path(project, name("cli-doorbells"))
    subscriber.create_subscription(
        name=doorbells, topic=publisher.topic_path(project, jobs_topic), ack_deadline_seconds=10
    )
    hold = name("cli-dead-hold")
    subscriber.create_subscription(
        name=subscriber.subscription_path(project, hold),
        topic=publisher.topic_path(project, dead_topic),
        ack_deadline_seconds=60,
    )
    env = {
        **os.environ,
        **emulator_env,
        "RECLAIM_PROJECT": project,
        "RECLAIM_RECORDS_BUCKET": bucket,
        "RECLAIM_JOBS_TOPIC": jobs_topic,
        "PYTHONPATH": str(ROOT),
    }
    yield Cloud(
        env=env,
        project=project,
        bucket=bucket,
        store=_serving_the_table(GcsStore(bucket, gcs_client)),
        subscriber=subscriber,
        publisher=publisher,
        doorbells=doorbells,
        dead_letter_topic=publisher.topic_path(project, dead_topic),
        dead_letter_subscription=hold,
    )


@pytest.fixture
def fresh(cloud: Cloud) -> Callable[[str], str]:
    """fresh('b') -> an unused batch id."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"


def _serving_the_table(store: GcsStore) -> GcsStore:
    """The tests read the features' index objects directly: hand the store their prefixes
    (as a Context built on it would)."""
    store.allow_index_prefixes(features.INDEX_PREFIXES)
    return store
