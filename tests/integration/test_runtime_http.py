"""Issue 40 over HTTP on the local cloud, with a pipeline module of the user's own (a file
outside reclaim, imported by every function through RECLAIM_PIPELINE_MODULES):

- a retry is claimed within its backoff plus RETRY_MARGIN_S, by the doorbell waiting in
  its push (no sweep ticks, no drain, a 60 s stale time: nothing else could claim it in
  time), asserted from the record's history;
- a failing stage's traceback names the user's file and line, in GET /jobs/<id>, the
  client's Job, the dashboard's job page and the log line's sourceLocation;
- a queued job of a paused pipeline says so (API, client, CLI's view, dashboard);
- a job's outputs are listed and downloaded (a streamed one of several resumable-upload
  chunks among them), over the API, the client and the dashboard's links, and what a lost
  attempt wrote is never offered.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from reclaim_client import Client

from reclaim.local.cloud import LocalCloud
from shared import job_queue
from shared.claim.due_wait import RETRY_MARGIN_S
from tests.integration.cloud_support import job, lines_where
from tests.polling import wait_for

BACKOFF_S = 3.0
BIG_PIECE = bytes(range(256)) * 4096  # 1 MiB
BIG_PIECES = 10  # 10 MiB: two chunks of a resumable upload (shared.storage.OUTPUT_CHUNK_BYTES)

USER_STAGES = textwrap.dedent(
    '''
    """A user's pipelines, in a file of their own."""
    from reclaim import Pipeline, register


    def flaky(ctx):
        if ctx.attempt == 1:
            raise RuntimeError("the service said 503")
        ctx.result["attempt"] = ctx.attempt


    def lookup(record):
        return record["missing_key"]


    def parse(ctx):
        lookup({})


    def first(ctx):
        ctx.outputs.write("a.txt", "from the first stage")


    def second(ctx):
        ctx.outputs.write("b.txt", f"b of attempt {ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("after writing b.txt: this attempt is lost")
        with ctx.outputs.open("big.bin") as f:
            for _ in range(PIECES):
                f.write(PIECE)


    PIECE = bytes(range(256)) * 4096
    PIECES = 10

    register(Pipeline("user-flaky", stages=[("call", flaky)]))
    register(Pipeline("user-broken", stages=[("parse", parse)]))
    register(Pipeline("user-outputs", stages=[("first", first), ("second", second)]))
    register(Pipeline("user-held", stages=[("call", flaky)]))
    '''
)


@pytest.fixture(scope="module")
def user_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user-app")
    path = folder / "user_stages.py"
    path.write_text(USER_STAGES)
    return path


@pytest.fixture(scope="module")
def cloud(user_file: Path) -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        python_path=(user_file.parent,),
        stale_seconds=60.0,
        sweep_interval_seconds=0,  # no sweep: only the waiting doorbell can claim a retry
        function_env={
            "RECLAIM_PIPELINE_MODULES": "user_stages",
            "RECLAIM_BACKOFF_BASE_SECONDS": str(BACKOFF_S),
            "RECLAIM_BACKOFF_MAX_SECONDS": str(BACKOFF_S),
            "RECLAIM_DRAIN_MAX_JOBS": "0",  # nor a freed slot's drain
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
        },
    ) as c:
        yield c


@pytest.fixture(scope="module")
def client(cloud: LocalCloud) -> Client:
    return Client(cloud.endpoints["submit"])


def _submit(cloud: LocalCloud, pipeline: str, **fields: Any) -> str:
    job_id = f"rt-{uuid.uuid4().hex[:10]}"
    body = {"pipeline": pipeline, "payload": {}, "id": job_id, **fields}
    resp = requests.post(cloud.endpoints["jobs"], json=body, timeout=30)
    assert resp.status_code == 202, resp.text
    return job_id


def _ended(cloud: LocalCloud, job_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        view = job(cloud, job_id)
        return view if view["status"] in ("done", "failed", "cancelled") else None

    ended_view: dict[str, Any] = wait_for(f"job {job_id} ended", ended, timeout=120)
    return ended_view


def test_a_retry_is_claimed_within_its_backoff_and_the_margin(cloud: LocalCloud) -> None:
    job_id = _submit(cloud, "user-flaky")
    view = _ended(cloud, job_id)
    assert view["status"] == "done" and view["result"] == {"attempt": 2}
    history = view["history"]
    requeued = next(e for e in history if e["event"] == "requeued" and e.get("error"))
    claimed = next(e for e in history if e["event"] == "claimed" and e["attempt"] == 2)
    at = job_queue.parse_time(requeued["at"])
    due = job_queue.parse_time(requeued.get("not_before")) or at
    started = job_queue.parse_time(claimed["at"])
    assert at is not None and due is not None and started is not None
    assert (due - at).total_seconds() <= BACKOFF_S  # the backoff drawn (full jitter)
    assert started >= due  # never before its backoff
    late = (started - due).total_seconds()
    assert late <= RETRY_MARGIN_S, f"claimed {late:.2f} s after its not_before"
    assert view["error"] is None  # done: attempt 1's error stays in the history only


def test_a_failing_stage_names_the_users_file_and_line(
    cloud: LocalCloud, client: Client, user_file: Path
) -> None:
    job_id = _submit(cloud, "user-broken", max_attempts=1)
    view = _ended(cloud, job_id)
    line = USER_STAGES.splitlines().index('    return record["missing_key"]') + 1
    error = view["error"]
    assert view["status"] == "failed" and view["stage"] == "parse"
    assert error["type"] == "KeyError" and error["kind"] == "out of attempts"
    assert error["where"] == {"file": str(user_file), "line": line, "function": "lookup"}
    assert f'File "{user_file}", line {line}, in lookup' in error["traceback"]
    assert error["traceback"].splitlines()[1].endswith("in parse")  # the stage comes first
    got = client.get(job_id)
    assert got.traceback == error["traceback"] and got.error is not None
    page = requests.get(f"{cloud.endpoints['dashboard']}/jobs/{job_id}", timeout=30)
    assert page.status_code == 200 and f"{user_file}:{line} in lookup" in page.text
    assert "out of attempts" in page.text and "KeyError" in page.text

    def raised_line() -> list[dict[str, Any]]:
        found = lines_where(
            Path(cloud.endpoints["log_dir"]),
            lambda e: e.get("job_id") == job_id and e.get("message") == "the stage raised",
        )
        return [e for lines in found.values() for e in lines]

    (entry,) = wait_for("the log line about the stage's error", raised_line)
    location = entry["logging.googleapis.com/sourceLocation"]
    assert (location["file"], location["line"]) == (str(user_file), line)
    assert entry["severity"] == "ERROR" and "KeyError" in entry["stack_trace"]


def test_outputs_are_listed_and_downloaded_never_a_lost_attempts(
    cloud: LocalCloud, client: Client, tmp_path: Path
) -> None:
    job_id = _submit(cloud, "user-outputs")
    assert _ended(cloud, job_id)["status"] == "done"
    api = cloud.endpoints["submit"]
    listed = requests.get(f"{api}/jobs/{job_id}/outputs", timeout=30)
    assert listed.status_code == 200, listed.text
    outputs = {o["name"]: o for o in listed.json()["outputs"]}
    assert {n: (o["attempt"], o["size"]) for n, o in outputs.items()} == {
        "a.txt": (1, len("from the first stage")),
        "b.txt": (2, len("b of attempt 2")),
        "big.bin": (2, BIG_PIECES * len(BIG_PIECE)),
    }
    # over the API: the bytes themselves (nothing can sign a URL on the local cloud)
    got = requests.get(api + outputs["b.txt"]["url"], timeout=30)
    assert got.status_code == 200 and got.content == b"b of attempt 2"
    assert got.headers["Content-Type"].startswith("text/plain")
    # attempt 1's b.txt is in the bucket, but its stage never committed: never offered
    lost = requests.get(f"{api}/jobs/{job_id}/outputs/b.txt?attempt=1", timeout=30)
    assert lost.status_code == 404 and lost.json()["error"] == "not found"
    missing = requests.get(f"{api}/jobs/{job_id}/outputs/nothing.txt", timeout=30)
    assert missing.status_code == 404
    # the client: listed, and the streamed output downloaded to a file
    assert [(o.name, o.attempt) for o in client.outputs(job_id)] == [
        ("a.txt", 1),
        ("b.txt", 2),
        ("big.bin", 2),
    ]
    path = client.download(job_id, "big.bin", tmp_path)
    assert isinstance(path, Path) and path.read_bytes() == BIG_PIECE * BIG_PIECES
    assert client.download(job_id, "a.txt") == b"from the first stage"
    # the dashboard's job page links each, and its link answers the bytes
    page = requests.get(f"{cloud.endpoints['dashboard']}/jobs/{job_id}", timeout=30)
    assert f'href="{outputs["a.txt"]["url"]}"' in page.text
    linked = requests.get(cloud.endpoints["dashboard"] + outputs["a.txt"]["url"], timeout=30)
    assert linked.status_code == 200 and linked.content == b"from the first stage"


def test_a_queued_job_of_a_paused_pipeline_says_paused(cloud: LocalCloud, client: Client) -> None:
    admin = cloud.endpoints["admin"]
    paused = requests.post(f"{admin}/pipelines/user-held/pause", json={}, timeout=30)
    assert paused.status_code == 200, paused.text
    try:
        job_id = _submit(cloud, "user-held")
        parked = wait_for(
            "the job parked by the pause",
            lambda: job(cloud, job_id) if job(cloud, job_id).get("paused") else None,
        )
        assert parked["status"] == "queued" and parked["paused"] is True
        assert client.get(job_id).paused
        page = requests.get(f"{cloud.endpoints['dashboard']}/jobs/{job_id}", timeout=30)
        assert 'id="paused"' in page.text
    finally:
        resumed = requests.post(f"{admin}/pipelines/user-held/resume", json={}, timeout=30)
        assert resumed.status_code == 200, resumed.text
    view = _ended(cloud, job_id)
    assert view["status"] == "done" and "paused" not in view
