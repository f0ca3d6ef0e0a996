"""`reclaim` end to end: subprocesses against fake-gcs-server and the Pub/Sub emulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from reclaim.local.procs import free_port
from tests.cli.cli_support import ROOT, Cloud


def _submit(cloud: Cloud, *args: str, stdin: str | None = None) -> list[str]:
    answer = cloud.ok("submit", "demo", *args, "--json", stdin=stdin).json()
    return [j["id"] for j in answer.get("jobs", [answer])]


def test_submit_one_job_rings_and_status_shows_it(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud, "--payload", '{"stages": 2}')
    assert cloud.rung(1) == [job_id]

    shown = cloud.ok("status", job_id, "--json").json()
    assert shown["id"] == job_id
    assert shown["status"] == "queued"
    assert shown["pipeline"] == "demo"
    assert [e["event"] for e in shown["history"]] == ["submitted"]

    text = cloud.ok("status", job_id).out
    assert ["status", "queued"] in [line.split() for line in text.splitlines()]
    assert "submitted" in text.split("history")[1]


def test_submit_a_batch_from_jsonl_and_list_with_filters(cloud: Cloud, tmp_path: Path) -> None:
    batch = "catalog-" + tmp_path.name[-8:].replace("_", "-")
    pieces = tmp_path / "pieces.jsonl"
    pieces.write_text('{"stages": 1}\n\n{"stages": 2}\n{"stages": 3}\n')
    ids = _submit(cloud, "--batch", batch, "--from", str(pieces))
    assert len(ids) == 3
    assert sorted(cloud.rung(3)) == sorted(ids)
    cloud.drive(ids[0], "done")
    cloud.drive(ids[1], "failed")

    listed = cloud.ok("list", "--batch", batch, "--json").json()
    assert sorted(j["id"] for j in listed["jobs"]) == sorted(ids)
    by_status = {j["id"]: j["status"] for j in listed["jobs"]}
    assert by_status == {ids[0]: "done", ids[1]: "failed", ids[2]: "queued"}

    failed = cloud.ok("list", "--batch", batch, "--status", "failed", "--json").json()
    assert [j["id"] for j in failed["jobs"]] == [ids[1]]
    queued = cloud.ok("list", "--status", "queued", "--limit", "1000", "--json").json()
    assert ids[2] in [j["id"] for j in queued["jobs"]]
    assert ids[0] not in [j["id"] for j in queued["jobs"]]
    assert len(cloud.ok("list", "--limit", "2", "--json").json()["jobs"]) == 2

    table = cloud.ok("list", "--batch", batch).out.splitlines()
    assert table[0].split()[:3] == ["ID", "STATUS", "PIPELINE"]
    assert len(table) == 4


def test_submit_refuses_bad_input_and_writes_nothing(cloud: Cloud, tmp_path: Path) -> None:
    before = cloud.store.list_jobs()
    unknown = cloud.run("submit", "no-such-pipeline")
    assert unknown.code == 2
    assert "no-such-pipeline" in unknown.err and "demo" in unknown.err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"stages": 1}\n[1, 2]\n')
    refused = cloud.run("submit", "demo", "--from", str(bad))
    assert refused.code == 2
    assert "line 2" in refused.err
    assert cloud.run("submit", "demo", "--payload", "{nope").code == 2
    assert cloud.run("submit", "demo", "--id", "../x").code == 2
    assert cloud.store.list_jobs() == before


def test_status_of_an_unknown_job_is_exit_2_with_a_message(cloud: Cloud) -> None:
    result = cloud.run("status", "no-such-job")
    assert result.code == 2
    assert "no-such-job" in result.err and "unknown" in result.err
    as_json = cloud.run("status", "no-such-job", "--json")
    assert as_json.code == 2
    assert json.loads(as_json.err)["exit_code"] == 2


def test_an_unreadable_record_is_reported_and_left_untouched(cloud: Cloud, gcs_client: Any) -> None:
    blob = gcs_client.bucket(cloud.bucket).blob("jobs/mangled.json")
    blob.upload_from_string(b'{"schema": 1, "id": "mangled", "stat')
    for command in (("status", "mangled"), ("cancel", "mangled"), ("retry", "mangled")):
        result = cloud.run(*command)
        assert result.code == 2, command
        assert "unreadable" in result.err and "mangled" in result.err
    assert blob.download_as_bytes() == b'{"schema": 1, "id": "mangled", "stat'


def test_cancel_a_queued_job_then_status_shows_cancelled(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    cancelled = cloud.ok("cancel", job_id, "--reason", "wrong photo", "--by", "ops:ann")
    assert job_id in cancelled.out

    shown = cloud.ok("status", job_id, "--json").json()
    assert shown["status"] == "cancelled"
    assert shown["history"][-1] | {"at": None} == {
        "at": None,
        "event": "cancelled",
        "by": "ops:ann",
        "reason": "wrong photo",
    }
    assert job_id not in [e.job_id for e in cloud.store.list_pending()]

    again = cloud.run("cancel", job_id)
    assert again.code == 2
    assert "illegal transition" in again.err


def test_cancel_a_running_job_fences_its_owner(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    running = cloud.drive(job_id, "running")
    generation = cloud.store.read(job_id).generation
    cloud.ok("cancel", job_id)
    # the owner's next write (a heartbeat with its old generation) loses the CAS
    from shared.errors import LostRace

    try:
        cloud.store.update({**running, "updated_at": running["updated_at"]}, generation)
        raise AssertionError("the owner's write after cancel must fail")
    except LostRace:
        pass
    assert cloud.store.read(job_id).record["status"] == "cancelled"


def test_cancel_of_a_failed_job_is_refused(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    cloud.drive(job_id, "failed")
    before = cloud.store.read(job_id)
    result = cloud.run("cancel", job_id)
    assert result.code == 2
    assert "'failed'" in result.err
    assert cloud.store.read(job_id) == before


def test_retry_of_a_done_job_is_refused(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    cloud.drive(job_id, "done")
    cloud.rung(1)
    before = cloud.store.read(job_id)
    result = cloud.run("retry", job_id)
    assert result.code == 2
    assert "illegal transition" in result.err and "'done'" in result.err
    assert cloud.store.read(job_id) == before


def test_retry_of_a_failed_job_requeues_audits_and_rings(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    assert cloud.rung(1) == [job_id]
    cloud.drive(job_id, "failed")

    answer = cloud.ok("retry", job_id, "--by", "ops:bob", "--json").json()
    assert answer["status"] == "queued"
    assert answer["rung"] is True
    record = cloud.store.read(job_id).record
    assert record["status"] == "queued"
    assert record["max_attempts"] > record["attempts"]
    assert record["history"][-1]["event"] == "retried"
    assert record["history"][-1]["by"] == "ops:bob"
    assert job_id in [e.job_id for e in cloud.store.list_pending()]
    assert cloud.rung(1) == [job_id]

    status_text = cloud.ok("status", job_id).out
    assert "piece 7 is not a garment" in status_text  # the last error is still shown
    assert "retried" in status_text


def _watch(cloud: Cloud, batch: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reclaim.cli", "watch", batch, "--interval", "0.2"],
        env=cloud.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_follows_a_batch_to_the_end_and_exits_0(cloud: Cloud, fresh: Any) -> None:
    batch = fresh("w-ok")
    ids = _submit(cloud, "--batch", batch, "--from", "-", stdin='{"stages": 1}\n' * 3)
    cloud.drive(ids[0], "done")
    watch = _watch(cloud, batch)
    try:
        cloud.drive(ids[1], "done")
        cloud.ok("cancel", ids[2])
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    last = out.strip().splitlines()[-1]
    assert "3/3" in last
    assert "done 2" in last and "cancelled 1" in last


def test_watch_exits_1_when_a_job_failed(cloud: Cloud, fresh: Any) -> None:
    batch = fresh("w-fail")
    ids = _submit(cloud, "--batch", batch, "--from", "-", stdin='{"stages": 1}\n' * 2)
    cloud.drive(ids[0], "done")
    cloud.drive(ids[1], "failed")
    result = cloud.run("watch", batch, "--json")
    assert result.code == 1
    final = json.loads(result.out.strip().splitlines()[-1])
    assert final["final"] is True
    assert final["counts"]["failed"] == 1 and final["counts"]["done"] == 1
    assert cloud.run("watch", fresh("nobatch")).code == 2


def test_watch_gives_up_after_its_timeout(cloud: Cloud, fresh: Any) -> None:
    batch = fresh("w-slow")
    _submit(cloud, "--batch", batch)
    result = cloud.run("watch", batch, "--interval", "0.1", "--timeout", "0.3")
    assert result.code == 4
    assert "0/1" in result.err


def _dead_letter(cloud: Cloud, job_id: str) -> None:
    cloud.publisher.publish(
        cloud.dead_letter_topic,
        json.dumps({"job_id": job_id}).encode(),
        job_id=job_id,
        CloudPubSubDeadLetterSourceDeliveryCount="20",
        CloudPubSubDeadLetterSourceSubscription="reclaim-claim",
    ).result(timeout=10)


def test_dlq_shows_without_losing_then_requeue_rerings(cloud: Cloud) -> None:
    (pending,) = _submit(cloud)
    (finished,) = _submit(cloud)
    cloud.drive(finished, "done")
    cloud.rung(2)
    _dead_letter(cloud, pending)
    _dead_letter(cloud, finished)
    dlq = ("dlq", "--dead-letter-subscription", cloud.dead_letter_subscription)

    for _ in range(2):  # looking twice: nothing was acked the first time
        shown = cloud.ok(*dlq, "--json").json()
        rows = {m["job_id"]: m for m in shown["messages"]}
        assert set(rows) == {pending, finished}
        assert rows[pending]["delivery_count"] == 20
        assert rows[pending]["source_subscription"] == "reclaim-claim"
        assert rows[pending]["action"] == "left"

    text = cloud.ok(*dlq).out
    assert pending in text and "reclaim-claim" in text

    requeued = cloud.ok(*dlq, "--requeue", "--json").json()
    actions = {m["job_id"]: m["action"] for m in requeued["messages"]}
    assert actions == {pending: "re-rung", finished: "acked (done)"}
    assert cloud.rung(1) == [pending]
    assert cloud.ok(*dlq, "--json").json()["messages"] == []


def test_sweep_runs_one_pass_and_prints_counts(cloud: Cloud) -> None:
    (job_id,) = _submit(cloud)
    cloud.rung(1)
    stored = cloud.store.read(job_id)
    stale = {**stored.record, "updated_at": "2020-01-01T00:00:00+00:00"}
    cloud.store.update(stale, stored.generation)  # its doorbell was lost long ago

    counts = cloud.ok("sweep", "--json").json()
    assert counts["examined"] >= 1
    assert counts["requeued"] + counts["rescued"] >= 1
    assert job_id in cloud.rung(1)
    text = cloud.ok("sweep").out
    assert "examined" in text


def test_missing_bucket_is_exit_3_with_a_clear_message(cloud: Cloud) -> None:
    result = cloud.run("--bucket", "no-such-bucket-reclaim", "list")
    assert result.code == 3
    assert "no-such-bucket-reclaim" in result.err and "does not exist" in result.err


def test_missing_dead_letter_subscription_is_exit_3(cloud: Cloud) -> None:
    result = cloud.run("dlq", "--dead-letter-subscription", "no-such-hold")
    assert result.code == 3
    assert "no-such-hold" in result.err


def test_unreachable_emulator_is_exit_3(cloud: Cloud) -> None:
    env = {**cloud.env, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{free_port()}"}
    result = cloud.run("status", "some-job", env=env)
    assert result.code == 3
    assert "cannot reach the storage emulator" in result.err


def test_missing_credentials_is_exit_3(cloud: Cloud, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in cloud.env.items()
        if k not in ("STORAGE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST")
    }
    env["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "missing.json")
    result = cloud.run("status", "some-job", env=env)
    assert result.code == 3
    assert "credentials" in result.err


def test_help_reads_well() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reclaim.cli", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    for command in ("submit", "status", "watch", "list", "cancel", "retry", "sweep", "dlq"):
        assert command in proc.stdout
    assert "exit codes" in proc.stdout
