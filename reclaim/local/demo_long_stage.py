"""The pools demo's act on a Cloud Run job (docs/long-stages.md): one `film` job in the
`film` pool (runner "job", claim timeout 10 s) whose stage lasts longer than that; its
task is sent SIGTERM mid-stage (a platform event on the local jobs runner), hands the job
back, and a new execution finishes it from its checkpoint, once. Proved by state: the
record's history and the stages' own notes, never by timing."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, TextIO

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, submit_batch
from shared.job_queue import checkpoint_of
from shared.run_jobs import short_name

POOL = {
    "pipelines": ["film"],
    "runner": "job",
    "timeout_seconds": 10,  # the claim's timeout, shortened: the stage outlasts it
    "ack_deadline_seconds": 10,
    "job": {"task_timeout_seconds": 600},
}
STAGE_S = 15.0
TIMEOUT_S = 180.0


def _call(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def _events(record: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [e for e in record.get("history", []) if e.get("event") == event]


def _until(what: str, check: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def play(cloud: LocalCloud, out: TextIO) -> bool:
    """Run the act; True if the job finished once, handed back, from its checkpoint."""
    watch = Watch(cloud)
    _batch, (job_id,) = submit_batch(
        cloud.endpoints["jobs"], [{"pipeline": "film", "payload": {"seconds": STAGE_S}}]
    )
    out.write(f"  film {job_id}: a {STAGE_S:g} s stage, its pool's claim timeout 10 s\n")

    def filming() -> dict[str, Any] | None:
        record = watch.snapshot([job_id])[job_id]
        adopted = _events(record, "adopted")
        if record["status"] == "running" and adopted and checkpoint_of(record)[0] >= 1:  # type: ignore[arg-type]
            return record
        return None

    first = _until("the first task filming", filming)
    name = first["execution"]["name"]
    out.write(f"  execution {short_name(name)} adopted the claim; SIGTERM to its task\n")
    _call(f"{cloud.endpoints['run_jobs']}/admin/executions/{short_name(name)}/terminate", {})
    record = _until(
        "the film done",
        lambda: (r := watch.snapshot([job_id])[job_id])["status"] == "done" and r,
    )
    state = record["result"]["state"]
    held = (
        len(_events(record, "handed back")) == 1
        and len(_events(record, "done")) == 1
        and state["prepared_in_attempt"] == 1  # resumed from the checkpoint: not re-run
        and state["filmed_in_attempt"] == record["attempts"] == 2
        and not _events(record, "rescued")
    )
    out.write(
        f"  handed back once, then finished by execution "
        f"{short_name(record['execution']['name'])} in attempt {record['attempts']}; "
        f"'prepare' ran once: {'held' if held else 'FAILED'}\n"
    )
    return held
