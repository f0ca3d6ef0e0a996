"""Flow control on the local cloud (fake-gcs-server, the Pub/Sub emulator pushing to the
claim service on the local Cloud Run, the scheduler's sweep): per-key concurrency limits,
a SIGKILLed holder's place, a rate, pause and resume, and a bulk retry. Every claim is
shown from the records' own history (claimed / done times), never from the test's clock."""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import requests

from reclaim.cli import main as cli_main
from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import emulator_stats
from shared import doorbell
from shared.features import flow
from tests.integration.cloud_support import batch, fast_cloud, job, running_on
from tests.polling import wait_for

ENDS = ("done", "failed", "requeued", "handed back")


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    with fast_cloud(max_instances=3, concurrency=4) as c:
        yield c


@pytest.fixture
def operator_shell(cloud: LocalCloud, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process pointed at the module's cloud, as an operator's shell is, for the CLI
    run in process. shared.doorbell keeps one publisher per process, made on first use
    for the PUBSUB_EMULATOR_HOST of that moment: the test gets one of its own, stopped
    after it, so no later test in this process rings this cloud's emulator once it is gone."""
    for name, value in cloud.client_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(doorbell, "_PUBLISHER", None)
    monkeypatch.setattr(doorbell, "_DOORBELLS", {})
    yield
    if doorbell._PUBLISHER is not None:
        doorbell._PUBLISHER.stop()


def post(cloud: LocalCloud, path: str, body: Any = None) -> requests.Response:
    """To submit, or to the admin function for an operator route (pause, resume, bulk)."""
    served_by = "admin" if path.startswith(("/pipelines/", "/bulk/")) else "submit"
    if served_by == "admin" and body is None:
        body = {}  # the operator routes take JSON only (docs/api.md, "Operator routes")
    return requests.post(cloud.endpoints[served_by] + path, json=body, timeout=60)


def submit_batch(cloud: LocalCloud, jobs: list[dict[str, Any]]) -> tuple[str, list[str]]:
    batch_id = f"f-{uuid.uuid4().hex[:8]}"
    resp = post(cloud, "/jobs", {"batch_id": batch_id, "jobs": jobs})
    assert resp.status_code == 202, resp.text
    return batch_id, [j["id"] for j in resp.json()["jobs"]]


def all_terminal(cloud: LocalCloud, batch_id: str) -> dict[str, Any]:
    return wait_for("every job terminal", lambda: (b := batch(cloud, batch_id))["done"] and b)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def intervals(view: dict[str, Any]) -> list[tuple[datetime, datetime]]:
    """(claimed, ended) of each attempt that ended, from the record's history."""
    out, start = [], None
    for entry in view["history"]:
        if entry["event"] == "claimed":
            start = at(entry["at"])
        elif entry["event"] in ENDS and start is not None:
            out.append((start, at(entry["at"])))
            start = None
    return out


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak


def crowded(spans: dict[str, list[Any]], owners: dict[Any, Any]) -> list[Any]:
    """The spans that overlap a third one (what a failure shows)."""
    out = []
    for key, group in spans.items():
        for s in group:
            inside = [o for o in group if o[0] <= s[0] < o[1]]
            if len(inside) > 2:
                out.append((key, [(str(a), str(b), owners.get((a, b))) for a, b in inside]))
    return out[:3]


def dead_lettered(cloud: LocalCloud) -> int:
    return int(emulator_stats(cloud.endpoints["emulator_admin"])["totals"]["dead_lettered"])


def test_fifty_jobs_over_three_keys_never_run_more_than_two_per_key(cloud: LocalCloud) -> None:
    keys = ["k-a", "k-b", "k-c"]
    jobs = [
        {
            "pipeline": "demo",
            "payload": {"stages": 1, "sleep_s": 0.3},
            "concurrency_key": keys[i % 3],
            "max_running": 2,
        }
        for i in range(50)
    ]
    batch_id, ids = submit_batch(cloud, jobs)
    final = all_terminal(cloud, batch_id)
    assert final["counts"] == {"done": 50}, final["counts"]
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    owners: dict[tuple[datetime, datetime], Any] = {}
    for job_id in ids:
        view = job(cloud, job_id)
        spans[view["concurrency_key"]] += intervals(view)
        for span in intervals(view):
            owners[span] = (job_id, [e for e in view["history"] if e["event"] != "submitted"])
    peaks = {key: most_at_once(s) for key, s in spans.items()}
    assert sum(len(s) for s in spans.values()) >= 50
    assert all(peak <= 2 for peak in peaks.values()), (peaks, crowded(spans, owners))
    assert any(peak == 2 for peak in peaks.values()), peaks  # the limit was reached, not idle
    assert dead_lettered(cloud) == 0


def test_a_sigkilled_holders_place_comes_back(cloud: LocalCloud) -> None:
    key = f"solo-{uuid.uuid4().hex[:6]}"
    slow = {"pipeline": "demo", "payload": {"stages": 2, "sleep_s": 1.5}}
    quick = {"pipeline": "demo", "payload": {"stages": 1}}
    batch_id, ids = submit_batch(
        cloud,
        [{**slow, "concurrency_key": key, "max_running": 1}]
        + [{**quick, "concurrency_key": key, "max_running": 1} for _ in range(2)],
    )
    index, victim = wait_for("the holder running", lambda: running_on(cloud, ids[:1]))
    cloud.service("claim").reclaim(index, graceful=False)
    final = all_terminal(cloud, batch_id)
    assert final["counts"] == {"done": 3}, final["counts"]
    assert job(cloud, victim)["attempts"] >= 2  # the rescue re-ran it
    spans = [s for job_id in ids for s in intervals(job(cloud, job_id))]
    assert most_at_once(spans) == 1


def test_a_rate_of_ten_a_second_holds_over_a_hundred_jobs(cloud: LocalCloud) -> None:
    key = f"api-{uuid.uuid4().hex[:6]}"
    jobs = [
        {"pipeline": "demo", "payload": {"stages": 1}, "concurrency_key": key, "rate": "10/s"}
        for _ in range(100)
    ]
    batch_id, ids = submit_batch(cloud, jobs)
    final = all_terminal(cloud, batch_id)
    assert final["counts"] == {"done": 100}, final["counts"]
    per_second: Counter[int] = Counter()
    for job_id in ids:
        view = job(cloud, job_id)
        assert view["attempts"] == 1  # deferring never burnt an attempt
        for entry in view["history"]:
            if entry["event"] == "claimed":  # every start took a token of its second
                per_second[int(at(entry["at"]).timestamp())] += 1
    assert sum(per_second.values()) == 100
    assert max(per_second.values()) <= 10, sorted(per_second.items())
    assert len(per_second) >= 10  # 100 starts at 10 a second need 10 windows at least
    assert dead_lettered(cloud) == 0


def test_pause_then_submit_then_resume_runs_everything(cloud: LocalCloud) -> None:
    assert post(cloud, "/pipelines/demo/pause").json()["paused"] is True
    time.sleep(flow.PAUSE_CACHE_S)  # the documented bound: an instance trusts its read so long
    try:
        jobs = [{"pipeline": "demo", "payload": {"stages": 1}} for _ in range(12)]
        batch_id, ids = submit_batch(cloud, jobs)
        parked = wait_for("every job parked", lambda: _parked(cloud, ids))
        assert parked == set(ids)
        assert all(job(cloud, i)["attempts"] == 0 for i in ids)  # none started
    finally:
        resumed = post(cloud, "/pipelines/demo/resume")
    assert resumed.status_code == 200 and resumed.json()["was_paused"] is True
    final = all_terminal(cloud, batch_id)
    assert final["counts"] == {"done": 12}, final["counts"]
    assert dead_lettered(cloud) == 0


def _parked(cloud: LocalCloud, ids: list[str]) -> set[str] | None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project=cloud.endpoints["project"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud.endpoints["storage_emulator_host"]},
    )
    names = client.list_blobs(cloud.endpoints["records_bucket"], prefix="parked/demo/")
    found = {b.name.rsplit("/", 1)[-1] for b in names} & set(ids)
    return found if found == set(ids) else None


@pytest.mark.usefixtures("operator_shell")
def test_bulk_retry_of_a_batchs_failed_jobs_requeues_exactly_those(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    fail = {"pipeline": "demo", "payload": {"stages": 1, "fail_at": 0, "fail_attempts": 1}}
    ok = {"pipeline": "demo", "payload": {"stages": 1}}
    batch_id, ids = submit_batch(cloud, [fail, ok, fail, ok, {**fail, "max_attempts": 1}])
    other_batch, other = submit_batch(cloud, [{**fail, "max_attempts": 1}])
    for b in (batch_id, other_batch):
        all_terminal(cloud, b)
    # fail_attempts 1: attempt 1 fails; with max_attempts 1 that is final
    failed = sorted(i for i in ids if job(cloud, i)["status"] == "failed")
    assert failed == [ids[4]]
    args = ["retry", "--batch", batch_id, "--status", "failed", "--json"]
    assert cli_main([*args, "--dry-run"]) == 0
    assert '"matching": 1' in capsys.readouterr().out
    assert cli_main([*args, "--yes"]) == 0  # stdin is no terminal here either
    assert f'"{ids[4]}"' in capsys.readouterr().out
    final = all_terminal(cloud, batch_id)
    assert final["counts"] == {"done": 5}, final["counts"]  # attempt 2 passes
    retried = {
        i for i in ids + other if any(e["event"] == "retried" for e in job(cloud, i)["history"])
    }
    assert retried == {ids[4]}
    assert job(cloud, other[0])["status"] == "failed"  # the other batch's failure is left
    assert cli_main([*args, "--yes"]) == 0  # a re-run finds nothing left to do
    assert '"matching": 0' in capsys.readouterr().out


def test_bad_flow_input_is_a_400_with_a_reason_and_nothing_written(cloud: LocalCloud) -> None:
    for body, word in (
        ({"pipeline": "demo", "concurrency_key": "a b"}, "concurrency_key"),
        ({"pipeline": "demo", "concurrency_key": "k", "max_running": 0}, "max_running"),
        ({"pipeline": "demo", "rate": "lots"}, "rate"),
    ):
        resp = post(cloud, "/jobs", body)
        assert resp.status_code == 400 and word in resp.json()["reason"], resp.text
    resp = post(cloud, "/pipelines/no-such/pause")
    assert resp.status_code == 400 and "unknown" in resp.json()["reason"]
