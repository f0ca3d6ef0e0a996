"""What workflows cost: Cloud Storage calls per member and per child, and the release delay.

Calls are counted by ``store.calls`` over the library path (submit, then each job's
terminal write and what follows it: shared.finish), on the MemoryStore, which counts every
call the GcsStore would make: exact and repeatable. The same jobs without the feature are
the baseline, so the difference is the feature's own cost. The delay runs on the local
cloud (2 warm claim instances, the sweep off, so only the parent's hook can release the
child): from the parent's ``done`` to the child's first ``claimed``, both from the records.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from bench.common import SilentDoorbell, bench_cloud, row, wait_terminal
from shared import finish
from shared.config import Settings
from shared.features.table import context
from shared.jobs import JobStatus
from shared.queue import parse_submission
from shared.stores.memory import MemoryStore
from shared.submission import create as submission

MEMBERS = 200
CHILDREN = 100
PAIRS = 12
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _calls(body: dict[str, Any]) -> Counter[str]:
    """Store calls of submitting `body`, then of each job's terminal write and what follows
    it (parents first, released children, the callback): the bench's own scanning for
    what to end next is not counted."""
    store = MemoryStore()
    counted: Counter[str] = Counter()

    def measured(fn: Any) -> None:
        before = Counter(store.calls)
        fn()
        counted.update(Counter(store.calls) - before)

    parsed = parse_submission(body, Settings.from_env({}))
    measured(
        lambda: submission.submit(
            context(store, SilentDoorbell(), Settings.from_env({})), parsed, NOW
        )
    )
    ended: set[str] = set()
    while True:
        due = [
            j
            for j in store.list_jobs()
            if j not in ended and store.read(j).record["status"] == JobStatus.QUEUED
        ]
        if not due:
            return counted
        for job_id in due:
            stored = store.read(job_id)
            done = {**stored.record, "status": JobStatus.DONE, "result": {}}

            def end(done: Any = done, generation: int = stored.generation) -> None:
                written = store.update(done, generation)
                finish.after_terminal(
                    context(store, SilentDoorbell(), Settings.from_env({})), written.record
                )

            measured(end)
            ended.add(job_id)


def _per(extra: Counter[str], n: int) -> dict[str, float]:
    return {k: round(v / n, 2) for k, v in sorted(extra.items()) if v}


def _quiet() -> None:
    """The library path logs a line per job; the bench prints figures, not those."""
    logging.getLogger("reclaim").setLevel(logging.WARNING)


def _compare(
    plain: dict[str, Any], feat: dict[str, Any], n: int, *, units: str, per: str
) -> dict[str, Any]:
    """Storage calls of the same jobs without and with the feature, and the extra per unit
    (`units` and `per` name the count and the per-unit figures in the results)."""
    base = _calls(plain)
    with_feature = _calls(feat)
    return {
        units: n,
        "baseline": dict(base),
        "with": dict(with_feature),
        per: _per(with_feature - base, n),
    }


def _callback_calls() -> dict[str, Any]:
    plain = {"jobs": [{"pipeline": "demo", "id": f"m{i}"} for i in range(MEMBERS)]}
    with_cb = {**plain, "on_complete": {"pipeline": "demo"}}
    return _compare(plain, with_cb, MEMBERS, units="members", per="per_member")


def _dependency_calls() -> dict[str, Any]:
    parents = [{"pipeline": "demo", "id": f"p{i}"} for i in range(CHILDREN)]
    plain = {"jobs": parents + [{"pipeline": "demo", "id": f"c{i}"} for i in range(CHILDREN)]}
    deps = {
        "jobs": parents
        + [{"pipeline": "demo", "id": f"c{i}", "depends_on": [f"p{i}"]} for i in range(CHILDREN)]
    }
    return _compare(plain, deps, CHILDREN, units="children", per="per_child")


def _post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60):
        pass


def _at(record: dict[str, Any], event: str) -> float:
    ats = [e["at"] for e in record["history"] if e["event"] == event]
    return datetime.fromisoformat(min(ats) if event == "claimed" else ats[-1]).timestamp()


def _release_delay() -> dict[str, Any]:
    with bench_cloud(
        max_instances=2, min_instances=2, concurrency=4, sweep_interval_seconds=0
    ) as b:
        run = uuid.uuid4().hex[:6]
        ids = []
        for i in range(PAIRS):
            parent, child = f"p-{run}-{i}", f"c-{run}-{i}"
            body = {
                "jobs": [
                    {"id": parent, "pipeline": "demo", "payload": {"stages": 1, "sleep_s": 0.3}},
                    {
                        "id": child,
                        "pipeline": "demo",
                        "payload": {"stages": 1},
                        "depends_on": [parent],
                    },
                ]
            }
            _post(b.cloud.endpoints["jobs"], body)
            ids += [parent, child]
            time.sleep(0.2)
        records = wait_terminal(b.queue, ids, timeout_s=120)
    delays = [
        _at(records[f"c-{run}-{i}"], "claimed") - _at(records[f"p-{run}-{i}"], "done")
        for i in range(PAIRS)
    ]
    return {
        "pairs": PAIRS,
        "delays_s": [round(d, 3) for d in delays],
        "median_s": round(statistics.median(delays), 3),
        "max_s": round(max(delays), 3),
    }


def run() -> dict[str, Any]:
    _quiet()
    cb = _callback_calls()
    deps = _dependency_calls()
    delay = _release_delay()
    rows = [
        row(
            "workflows: extra Cloud Storage calls per batch member with on_complete",
            ", ".join(f"{v:g} {k}" for k, v in cb["per_member"].items()),
            f"the same {MEMBERS}-job batch without on_complete (store.calls)",
            f"{sum(cb['per_member'].values()):g} calls/member, the callback job's own included",
            "O(1) per member, no read of the batch",
            all(k != "read" or v < 1 for k, v in cb["per_member"].items()),
        ),
        row(
            "workflows: extra Cloud Storage calls per child with depends_on (one parent)",
            ", ".join(f"{v:g} {k}" for k, v in deps["per_child"].items()),
            f"{2 * CHILDREN} independent jobs (store.calls)",
            f"{sum(deps['per_child'].values()):g} calls/child",
            "O(parents) per child",
            None,
        ),
        row(
            "workflows: last parent done -> child claimed (sweep off)",
            f"median {delay['median_s']:g} s, max {delay['max_s']:g} s over {PAIRS} pairs",
            "the next sweep (Cloud Scheduler: 60 s)",
            f"{delay['max_s'] / 60:.3f} of a sweep interval",
            "seconds",
            delay["max_s"] < 10,
        ),
    ]
    return {"raw": {"callbacks": cb, "dependencies": deps, "delay": delay}, "rows": rows}
