"""The CLI's edges, as a person meets them: quiet stderr unless -v, a closed pipe ends
quietly, a mistyped flag gets its own command's usage, --version, submit --tag and
--wait, watch of one job, and bulk actions that never act unconfirmed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from reclaim import __version__
from tests.cli.cli_support import ROOT, Cloud
from tests.polling import wait_for


def _submit(cloud: Cloud, *extra: str) -> str:
    return str(cloud.ok("submit", "demo", "--json", *extra).json()["id"])


def test_operator_commands_write_nothing_on_stderr_unless_verbose(cloud: Cloud) -> None:
    job = _submit(cloud)
    for args in (("pause", "demo"), ("resume", "demo"), ("sweep",), ("cancel", job)):
        result = cloud.ok(*args)
        assert result.err == "", (args, result.err)  # the metric lines stay out of it
    loud = cloud.ok("-v", "retry", job)
    lines = [json.loads(line) for line in loud.err.splitlines()]
    assert lines and all("severity" in line for line in lines), loud.err


def test_a_closed_pipe_ends_the_command_quietly(cloud: Cloud) -> None:
    for _ in range(3):
        _submit(cloud)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: `reclaim list | head -0`
    proc = subprocess.run(
        [sys.executable, "-m", "reclaim.cli", "list", "--status", "queued"],
        env=cloud.env,
        cwd=ROOT,
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == "", proc.stderr  # no BrokenPipeError traceback


def test_a_mistyped_flag_gets_its_commands_usage_and_the_nearest_flag(cloud: Cloud) -> None:
    result = cloud.run("submit", "demo", "--payloda", "{}")
    assert result.code == 2
    assert result.err.startswith("usage: reclaim submit"), result.err
    assert "unrecognized arguments: --payloda (did you mean --payload?)" in result.err
    result = cloud.run("list", "--stauts", "done")
    assert result.err.startswith("usage: reclaim list") and "--status?" in result.err


def test_version(cloud: Cloud) -> None:
    result = cloud.ok("--version")
    assert result.out.strip() == f"reclaim {__version__}"


def test_submit_tag_labels_the_job(cloud: Cloud) -> None:
    job = _submit(cloud, "--tag", "nightly", "--tag", "eu")
    assert cloud.store.read(job).record["tags"] == ["nightly", "eu"]
    listed = cloud.ok("list", "--tag", "eu", "--json").json()
    assert [j["id"] for j in listed["jobs"]] == [job]


def _start(cloud: Cloud, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reclaim.cli", *args],
        env=cloud.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _exists(cloud: Cloud, job: str) -> bool:
    try:
        cloud.store.read(job)
    except Exception:
        return False
    return True


def test_submit_wait_prints_the_result_and_exits_by_the_end(cloud: Cloud, fresh: Any) -> None:
    job = fresh("wait")
    proc = _start(cloud, "submit", "demo", "--id", job, "--wait")
    wait_for("the job to be written", lambda: _exists(cloud, job))
    cloud.drive(job, "done")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == [f"{job}  queued", f'{job}  done  {{"ok": true}}'], out
    failing = fresh("wait")
    proc = _start(cloud, "submit", "demo", "--id", failing, "--wait")
    wait_for("the job to be written", lambda: _exists(cloud, failing))
    cloud.drive(failing, "failed")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "failed  ValueError: piece 7 is not a garment" in out.splitlines()[-1], out


def test_submit_wait_gives_up_at_its_timeout_and_the_job_goes_on(cloud: Cloud, fresh: Any) -> None:
    job = fresh("slow")
    result = cloud.run("submit", "demo", "--id", job, "--wait", "--wait-timeout", "1")
    assert result.code == 4 and "gave up after 1s" in result.err, result
    assert cloud.store.read(job).record["status"] == "queued"
    assert cloud.run("submit", "demo", "--wait-timeout", "1").code == 2  # needs --wait


def test_watch_follows_one_job_until_it_ends(cloud: Cloud, fresh: Any) -> None:
    job = _submit(cloud)
    proc = _start(cloud, "watch", job)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith(f"{job}  queued"), first
    cloud.drive(job, "running")
    cloud.drive(job, "done")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].startswith(f"{job}  done"), out
    unknown = cloud.run("watch", fresh("nothing"))
    assert unknown.code == 2 and "no batch or job" in unknown.err, unknown
