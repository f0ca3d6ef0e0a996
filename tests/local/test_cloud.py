"""LocalCloud end to end, with throwaway functions (fake_functions.py) standing in
for the real ones: notifications, push wiring through the Cloud Run fronts, the
scheduler tick, THREADS = concurrency, instances under kills and pauses, and a
clean stop. The platform's own behaviours are in test_cloudrun_platform.py."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from reclaim.local import wiring
from reclaim.local.cloud import DEFAULT_FUNCTIONS, ROOT, FunctionSpec, LocalCloud
from reclaim.local.procs import free_port, group_pids, spawn, stop, wait_for_port
from tests import polling

FAKE = "tests/local/fake_functions.py"
FAKES = {name: FunctionSpec(FAKE, "echo") for name in DEFAULT_FUNCTIONS}


def _get(url: str, timeout: float = 20) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


_wait_for = functools.partial(polling.wait_for, timeout=30, interval=0.1)


def _seen(out_dir: Path, service: str) -> list[dict[str, Any]]:
    path = out_dir / f"{service}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rfind(")") + 2]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("seen")


@pytest.fixture(scope="module")
def cloud(out_dir: Path) -> Iterator[LocalCloud]:
    with LocalCloud.for_tests(
        functions=FAKES,
        function_env={"FAKE_OUT_DIR": str(out_dir)},
        sweep_interval_seconds=0.5,
        max_instances=2,
        concurrency=4,
        pending_timeout_seconds=30,
    ) as c:
        yield c


def test_functions_get_their_environment(cloud: LocalCloud):
    status, seen = _get(cloud.endpoints["submit"] + "/jobs/x")
    assert status == 200 and seen["path"] == "/jobs/x"
    assert seen["threads"] == "8"  # submit's concurrency, exactly (terraform's THREADS)
    assert seen["storage"] == cloud.gcs_url
    assert seen["project"] == cloud.config.topology.project
    status, seen = _get(cloud.endpoints["claim"] + "/env")
    assert status == 200 and seen["threads"] == "4" == str(cloud.config.concurrency)


def test_upload_publishes_a_notification(cloud: LocalCloud):
    t = cloud.config.topology
    pub, sub = wiring.pubsub_admin_clients(cloud.pubsub_host)
    sub_path = t.subscription_path(f"probe-{uuid.uuid4().hex[:8]}")
    sub.create_subscription(
        request={
            "name": sub_path,
            "topic": t.topic_path(t.uploads_topic),
            "ack_deadline_seconds": 30,
        }
    )
    storage = wiring.storage_client(cloud.gcs_url, t.project)
    name = f"in/{uuid.uuid4().hex}.txt"
    # a record write must NOT notify (only the uploads bucket does)
    storage.bucket(t.records_bucket).blob(name).upload_from_string(b"record")
    blob = storage.bucket(t.uploads_bucket).blob(name)
    blob.upload_from_string(b"hello", if_generation_match=0)
    blob.reload()
    messages: list[Any] = []

    def _pulled() -> Any:
        resp = sub.pull(request={"subscription": sub_path, "max_messages": 10}, timeout=5)
        messages.extend(m.message for m in resp.received_messages)
        return [m for m in messages if m.attributes.get("objectId") == name]

    (msg,) = _wait_for("the upload notification", _pulled)
    a = msg.attributes
    assert a["bucketId"] == t.uploads_bucket
    assert a["objectGeneration"] == str(blob.generation)
    assert a["eventType"] == "OBJECT_FINALIZE"
    assert a["payloadFormat"] == "JSON_API_V1"
    data = json.loads(msg.data)
    assert (data["bucket"], data["name"]) == (t.uploads_bucket, name)
    assert all(m.attributes.get("bucketId") == t.uploads_bucket for m in messages)
    pub.transport.close()
    sub.transport.close()


def test_upload_is_pushed_to_submit_upload(cloud: LocalCloud, out_dir: Path):
    t = cloud.config.topology
    storage = wiring.storage_client(cloud.gcs_url, t.project)
    name = f"push/{uuid.uuid4().hex}.bin"
    storage.bucket(t.uploads_bucket).blob(name).upload_from_string(b"x")

    def _arrived() -> list[dict[str, Any]]:
        return [s for s in _seen(out_dir, "submit_upload") if name in s["body"]]

    seen = _wait_for("the push to submit_upload", _arrived)[0]
    # functions-framework builds the CloudEvent source from this path
    assert seen["path"] == f"/projects/{t.project}/topics/{t.uploads_topic}"
    envelope = json.loads(seen["body"])
    assert envelope["subscription"] == t.subscription_path(wiring.SUBMIT_UPLOAD_SUBSCRIPTION)
    assert envelope["message"]["attributes"]["objectId"] == name


def test_doorbell_reaches_claim_through_its_front(cloud: LocalCloud, out_dir: Path):
    t = cloud.config.topology
    pub, sub = wiring.pubsub_admin_clients(cloud.pubsub_host)
    job_id = f"job-{uuid.uuid4().hex}"
    pub.publish(
        request={
            "topic": t.topic_path(t.jobs_topic),
            "messages": [
                {"data": json.dumps({"job_id": job_id}).encode(), "attributes": {"job_id": job_id}}
            ],
        }
    )

    def _arrived() -> list[dict[str, Any]]:
        return [s for s in _seen(out_dir, "claim") if job_id in s["body"]]

    seen = _wait_for("the doorbell push to claim", _arrived)[0]
    assert seen["path"] == f"/projects/{t.project}/topics/{t.jobs_topic}"
    assert re.fullmatch(r"claim-00001-[a-z]{3}", seen["revision"])  # Cloud Run's form
    assert seen["revision"] == cloud.revisions("claim")["serving"]
    envelope = json.loads(seen["body"])
    assert envelope["subscription"] == t.subscription_path(wiring.CLAIM_SUBSCRIPTION)
    pub.transport.close()
    sub.transport.close()


def test_scheduler_posts_to_sweep_like_cloud_scheduler(cloud: LocalCloud, out_dir: Path):
    ticks = _wait_for("a scheduler tick", lambda: _seen(out_dir, "sweep"))
    tick = ticks[0]
    assert tick["method"] == "POST" and tick["user_agent"].startswith("Google-Cloud-Scheduler")
    assert tick["content_type"] == "application/json"
    assert isinstance(json.loads(tick["body"]), dict)
    assert 200 in cloud.sweep_ticks


def test_one_instance_serves_its_concurrency_in_parallel(cloud: LocalCloud):
    """concurrency requests meet at a barrier inside ONE process: only possible if
    they run at the same time (a serial server breaks the barrier)."""
    claim = cloud.service("claim")
    _get(cloud.endpoints["claim"] + "/warm")
    index = min(claim.pids())
    url = claim.url_of(index)
    parties = cloud.config.concurrency
    key = uuid.uuid4().hex
    with ThreadPoolExecutor(parties) as pool:
        results = list(
            pool.map(
                lambda _: _get(f"{url}/?barrier={key}&parties={parties}&timeout=15"), range(parties)
            )
        )
    assert [s for s, _ in results] == [200] * parties
    assert len({seen["pid"] for _, seen in results}) == 1


def test_barrier_control_fails_on_a_single_thread(tmp_path: Path):
    """The parallel test can fail: the same barrier under THREADS=1 breaks."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADS": "1", "WORKERS": "1"}
    proc = spawn(
        [
            sys.executable,
            "-m",
            "functions_framework",
            "--source",
            FAKE,
            "--target",
            "echo",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        log_path=tmp_path / "ff.log",
        cwd=ROOT,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        url = f"http://127.0.0.1:{port}/?barrier=b&parties=2&timeout=1"
        with ThreadPoolExecutor(2) as pool:
            statuses = [s for s, _ in pool.map(lambda _: _get(url), range(2))]
        assert statuses != [200, 200]
    finally:
        stop(proc)


def test_a_killed_instance_is_replaced_and_traffic_moves_on(cloud: LocalCloud):
    claim = cloud.service("claim")
    _, seen = _get(cloud.endpoints["claim"] + "/x")
    index = next(i for i, pgid in claim.pids().items() if pgid == seen["pgid"])
    claim.reclaim(index, graceful=False, wait=True)
    assert group_pids(seen["pgid"]) == []  # master and gunicorn worker are gone
    assert index not in claim.pids()
    after = [_get(cloud.endpoints["claim"] + "/y") for _ in range(4)]
    assert all(s == 200 for s, _ in after)
    assert seen["pgid"] not in {b["pgid"] for _, b in after}


def test_pause_and_resume_an_instance(cloud: LocalCloud):
    claim = cloud.service("claim")
    _, seen = _get(cloud.endpoints["claim"] + "/p0")
    pid = seen["pgid"]
    index = next(i for i, pgid in claim.pids().items() if pgid == pid)
    claim.pause(index, unroute=True)
    assert all(_state(p) == "T" for p in group_pids(pid))
    results = [_get(cloud.endpoints["claim"] + "/p") for _ in range(4)]
    assert all(s == 200 and seen["pgid"] != pid for s, seen in results)
    claim.resume(index)
    assert all(_state(p) != "T" for p in group_pids(pid))
    assert _get(claim.url_of(index) + "/r")[1]["pgid"] == pid


def test_the_platform_admin_api_is_wired(cloud: LocalCloud):
    status, stats = _get(cloud.endpoints["cloudrun_admin"] + "/stats")
    assert status == 200 and set(stats["services"]) == {
        "submit",
        "submit_upload",
        "claim",
        "sweep",
        "dashboard",
        "admin",
        "waitpoints",  # waits: POST /waitpoints/<token>
    }
    assert stats["services"]["claim"]["config"]["concurrency"] == 4


def _members(cloud: LocalCloud) -> set[int]:
    return {p for pgid in cloud.pids().values() for p in group_pids(pgid)}


def test_stop_leaves_no_process_behind():
    cloud = LocalCloud.for_tests(
        functions=FAKES,
        max_instances=2,
        min_instances=2,
        sweep_interval_seconds=0,
        duplicate_fraction=0.25,
        drop_publish_fraction=0.5,
        seed=7,
    )
    with cloud:
        # the fault knobs reached the emulator
        faults = _get(cloud.endpoints["emulator_admin"] + "/faults")[1]
        assert (faults["duplicate_fraction"], faults["drop_publish_fraction"]) == (0.25, 0.5)
        members = _members(cloud)
        # a gunicorn master and its worker per function: more members than groups
        assert len(members) > len(cloud.pids())
        cloud.service("claim").pause(1)  # a frozen instance must still go
        front_port = int(cloud.endpoints["claim"].rsplit(":", 1)[1])
    assert not [p for p in members if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]
    with pytest.raises(OSError):
        wait_for_port("127.0.0.1", front_port, timeout=0.3)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def _descendant_groups(pid: int) -> set[int]:
    """Process groups of pid's children (each child leads its own group)."""
    groups = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                groups.add(int(fields[2]))
    return groups


def test_make_dev_starts_prints_and_stops_on_sigterm(tmp_path: Path):
    sources = ",".join(f"{n}={FAKE}:echo" for n in DEFAULT_FUNCTIONS)
    ports = {
        k: "0"
        for k in (
            "PUBSUB",
            "GCS",
            "SUBMIT",
            "SUBMIT_UPLOAD",
            "CLAIM",
            "SWEEP",
            "DASHBOARD",
            "EMULATOR_ADMIN",
            "CLOUDRUN_ADMIN",
        )
    }
    env = {
        **os.environ,
        **{f"LOCAL_{k}_PORT": v for k, v in ports.items()},
        "LOCAL_LOG_DIR": str(tmp_path),
        "LOCAL_FUNCTION_SOURCES": sources,
        "LOCAL_CLAIM_MIN_INSTANCES": "1",
        "LOCAL_SWEEP_INTERVAL_SECONDS": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "reclaim.local.dev"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = []
        assert proc.stdout is not None
        for line in proc.stdout:
            banner.append(line)
            if "Ctrl-C stops everything" in line:
                break
        text = "".join(banner)
        assert "reclaim local cloud is up" in text and "curl -s -X POST" in text
        # it said what it runs before starting it
        assert "local cloud: starting" in text and "--push-window adaptive" in text
        assert "claim          tests/local/fake_functions.py:echo  concurrency 4" in text
        assert "LOCAL_CLAIM_MIN_INSTANCES=1" in text
        groups = _descendant_groups(proc.pid)
        assert len(groups) >= 3  # emulator, fake-gcs, the warm claim-0
        members = {p for g in groups for p in group_pids(g)}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [g for g in groups if group_pids(g)] == []
    assert not [p for p in members if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]
    assert (tmp_path / "claim-0.log").exists()


def test_make_dev_killed_with_sigkill_leaves_no_orphans(tmp_path: Path):
    """kill -9 of the launcher: the kernel's parent-death signal ends the emulators and
    every instance, including the ones the platform's spawner thread started."""
    sources = ",".join(f"{n}={FAKE}:echo" for n in DEFAULT_FUNCTIONS)
    names = ("PUBSUB", "GCS", "SUBMIT", "SUBMIT_UPLOAD", "CLAIM", "SWEEP", "DASHBOARD")
    env = {
        **os.environ,
        **{f"LOCAL_{k}_PORT": "0" for k in names},
        "LOCAL_EMULATOR_ADMIN_PORT": "off",
        "LOCAL_CLOUDRUN_ADMIN_PORT": "off",
        "LOCAL_LOG_DIR": str(tmp_path),
        "LOCAL_FUNCTION_SOURCES": sources,
        "LOCAL_CLAIM_MIN_INSTANCES": "2",
        "LOCAL_SWEEP_INTERVAL_SECONDS": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "reclaim.local.dev"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Ctrl-C stops everything" in line:
                break
        groups = _descendant_groups(proc.pid)
        assert len(groups) >= 4  # emulator, fake-gcs, two warm claim instances
        proc.kill()
        proc.wait(10)
        try:
            _wait_for("every child gone", lambda: not [g for g in groups if group_pids(g)])
        except AssertionError as exc:  # say who outlived the launcher, for the next reader
            left = [(pid, _cmdline(pid)) for g in groups for pid in group_pids(g)]
            raise AssertionError(f"{exc}; still running: {left}") from None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_make_dev_rejects_bad_settings():
    env = {**os.environ, "LOCAL_GCS_PORT": "http"}
    r = subprocess.run(
        [sys.executable, "-m", "reclaim.local.dev"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "LOCAL_GCS_PORT='http' is invalid" in r.stderr
