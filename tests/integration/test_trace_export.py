"""One job, one trace, on the local cloud: a three-stage job whose first instance is
SIGKILLed (the sweep rescues it) and whose second is reclaimed with SIGTERM (it hands the
job back) ends as exactly one trace at the local collector, with the spans submit,
queued, attempt 1 and its stages, rescued, attempt 2, handed back, attempt 3, done,
each sent once by the request that ended its attempt; sent again, the same span ids.
The dashboard's job page draws that trace. Everything goes over HTTP as in production:
the SIGKILL and the SIGTERM are the local Cloud Run's own."""

from __future__ import annotations

import functools
import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, instance_pids, running_on
from shared import tracing
from shared.job_queue import checkpoint_of
from shared.traces import export
from shared.traces import spans as trace_spans
from tests import polling

REQUEST_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        max_instances=2,
        concurrency=2,
        stale_seconds=3.0,
        sweep_interval_seconds=1.0,
        shutdown_grace_seconds=2.0,
        function_env={
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
        },
    ) as c:
        yield c


wait_for = functools.partial(polling.wait_for, interval=0.1)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def the_instance_running(
    cloud: LocalCloud, watch: Watch, job_id: str, attempt: int, past: int
) -> int:
    """The claim instance whose owner runs `attempt` of the job past stage `past`."""

    def found() -> tuple[int] | None:
        record = watch.snapshot([job_id])[job_id]
        if record.get("attempts") != attempt or checkpoint_of(record)[0] < past:
            return None
        for index, pids in instance_pids(cloud).items():
            if running_on({job_id: record}, pids):
                return (index,)  # an instance id may be 0
        return None

    (index,) = wait_for(f"attempt {attempt} running past stage {past}", found)
    return int(index)


def test_a_rescued_and_handed_back_job_is_one_trace_at_the_collector(cloud: LocalCloud) -> None:
    collector = cloud.endpoints["trace_collector"]
    before = get(f"{collector}/stats")
    watch = Watch(cloud)
    claim = cloud.service("claim")
    answer = requests.post(
        cloud.endpoints["jobs"],
        json={"pipeline": "demo", "payload": {"stages": 3, "sleep_s": 2.5}},
        headers={"traceparent": REQUEST_TRACE},
        timeout=60,
    )
    assert answer.status_code in (200, 201, 202), answer.text
    job_id = answer.json()["id"]

    claim.reclaim(the_instance_running(cloud, watch, job_id, 1, past=1), graceful=False)  # SIGKILL
    index = the_instance_running(cloud, watch, job_id, 2, past=2)  # rescued, resumed
    claim.reclaim(index, graceful=True)  # SIGTERM: handed back
    record = wait_for(
        "the job done",
        lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "done" and r,
    )
    context = tracing.parse(record["traceparent"])
    assert context is not None
    names = [e["event"] for e in record["history"]]
    # the rescue is the sweep's (a "rescued" write, exported then) or a redelivered
    # doorbell's claim taking the stale job over (attempt 1's spans go with attempt 2's)
    by_sweep = names.count("rescued") == 1
    assert record["rescues"] == 1 and names.count("handed back") == 1, json.dumps(record["history"])
    root_name = "job demo"
    spans = wait_for(  # the export goes out just after the done write, before the answer
        "the root span at the collector",
        lambda: (
            (s := get(f"{collector}/v1/traces/{context.trace_id}")["spans"])
            and any(x["name"] == root_name for x in s)
            and s
        ),
    )

    # exactly one trace holds this job's spans: the record's own
    traces = get(f"{collector}/v1/traces")["traces"]
    holding = [
        trace_id
        for trace_id in traces
        if any(
            s["attributes"].get("reclaim.job_id") == job_id
            for s in get(f"{collector}/v1/traces/{trace_id}")["spans"]
        )
    ]
    assert holding == [context.trace_id]
    kinds = Counter(s["attributes"]["reclaim.span"] for s in spans)
    named = Counter(s["name"] for s in spans)
    for expected in ("submit", "attempt 1", "rescued", "attempt 2", "handed back", "attempt 3"):
        assert named[expected] == 1, (expected, named)
    # a wait before each claim, but a takeover claims a running job: no wait before it
    assert named["done"] == 1 and named[root_name] == 1
    assert named["queued"] == (3 if by_sweep else 2)
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans)
    root = by_id[context.span_id]  # the logs' spanId is the trace's root
    assert root["name"] == root_name and root["parent_span_id"] is None
    for span in spans:
        if span["span_id"] != context.span_id:
            assert span["parent_span_id"] in by_id, span  # one tree, nothing dangling
    stages = [s for s in spans if s["attributes"]["reclaim.span"] == "stage"]
    attempt_of = {by_id[s["parent_span_id"]]["name"]: [] for s in stages}
    for s in stages:
        attempt_of[by_id[s["parent_span_id"]]["name"]].append(s["name"])
    assert attempt_of["attempt 1"][0] == "stage-0"  # attempt 1's stages, from its checkpoints
    assert "stage-1" in attempt_of["attempt 1"]  # cut short by the SIGKILL
    assert attempt_of["attempt 3"][-1] == "stage-2"
    assert kinds["user"] > 0  # the demo's own "sleep" spans, from the attempts that exported
    assert not [
        s for s in spans if s["name"] == "sleep" and s["attributes"]["reclaim.attempt"] == 1
    ]
    (submit,) = (s for s in spans if s["name"] == "submit")
    assert submit["links"] == [
        {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331"}
    ]  # linked to the submit request's own trace, not a child of it
    after = get(f"{collector}/stats")
    # one export call per attempt's end that exported: the sweep's rescue (when it was the
    # sweep's), the hand-back, the done
    assert after["requests"] - before["requests"] == (3 if by_sweep else 2)
    assert after["rewritten"] == before["rewritten"]  # each span sent once

    # the same job exported again (as after a crash): the same span ids, rewritten
    built = trace_spans.build(record)
    assert built is not None
    sent = export.send(built, built.spans, f"{collector}/v1/traces")
    assert sent.ok and sent.spans == len(built.spans)
    again = get(f"{collector}/v1/traces/{context.trace_id}")["spans"]
    assert {s["span_id"] for s in again} == set(by_id)
    assert get(f"{collector}/stats")["rewritten"] - after["rewritten"] == len(built.spans)

    # the dashboard's job page draws that trace, from the collector
    page = requests.get(f"{cloud.endpoints['dashboard']}/jobs/{job_id}", timeout=30)
    assert page.status_code == 200
    assert 'id="waterfall"' in page.text and "as exported to the local trace collector" in page.text
    for name in ("attempt 1", "rescued", "handed back", "attempt 3", "sleep"):
        assert f'data-name="{name}"' in page.text
