"""Push into a real functions-framework cloud_event function (a subprocess).

functions-framework converts the raw push envelope into a CloudEvent; the
function writes what it received to a file and the test reads it back.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.procs import free_port, spawn, stop, wait_for_port
from tests.emulator.emulator_support import PROJECT, eventually

FUNCTION = """
import json
import os

import functions_framework


@functions_framework.cloud_event
def receive(event):
    record = {"attributes": dict(event.get_attributes()), "data": event.data}
    with open(os.environ["EMULATOR_TEST_OUT"], "a") as out:
        out.write(json.dumps(record, default=str) + "\\n")
"""


@pytest.fixture
def cloud_event_function(tmp_path: Path, log_dir: Path) -> Iterator[tuple[str, Path]]:
    source, out = tmp_path / "main.py", tmp_path / "received.jsonl"
    source.write_text(FUNCTION)
    port = free_port()
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "EMULATOR_TEST_OUT": str(out)}
    proc = spawn(
        [
            str(venv_bin / "functions-framework"),
            "--source",
            str(source),
            "--target",
            "receive",
            "--signature-type",
            "cloudevent",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        log_path=log_dir / "emulator-push-function.log",
        cwd=tmp_path,
        die_with_parent=True,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        yield f"http://127.0.0.1:{port}", out
    finally:
        stop(proc)


def _received(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def test_push_reaches_a_cloud_event_function(
    publisher, subscriber, unique, cloud_event_function
) -> None:
    base, out = cloud_event_function
    topic_id = unique("topic")
    topic = publisher.topic_path(PROJECT, topic_id)
    sub = subscriber.subscription_path(PROJECT, unique("push"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        request={
            "name": sub,
            "topic": topic,
            "push_config": {"push_endpoint": f"{base}/projects/{PROJECT}/topics/{topic_id}"},
        }
    )
    data = json.dumps({"job_id": "job-42"}).encode()
    message_id = publisher.publish(topic, data, job_id="job-42").result(timeout=10)

    [event] = eventually(lambda: _received(out), timeout=20)
    attributes = event["attributes"]
    assert attributes["type"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert attributes["source"] == f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{topic_id}"
    assert attributes["id"] == message_id
    message = event["data"]["message"]
    assert base64.b64decode(message["data"]) == data
    assert message["attributes"] == {"job_id": "job-42"}
    assert message["messageId"] == message_id
    assert attributes["time"] == message["publishTime"]  # the envelope's time survives
