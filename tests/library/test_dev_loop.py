"""The dev loop as a user lives it, on the installed wheel: `reclaim dev` keeps the jobs
across a restart (a running one handed back at the stop is claimed again after it), an
edit of a pipeline module is served without a restart (a running job handed back, not
lost), the CLI run in the project finds the running cloud by itself and a pipeline the
running cloud does not serve gets the same 400 as curl, and the client, installed beside
an app's own requests and google-auth, follows a job to its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.library.test_install import FREE_PORTS, _endpoints, _follow
from tests.polling import wait_for

pytestmark = pytest.mark.slow
PIPELINE = "acme-jobs-hello"
LONG = {"stages": 2, "sleep_s": [0, 3600]}  # the built-in demo: its 2nd stage checks often


class Dev:
    """One `reclaim dev` in a project, started and stopped as a person does."""

    def __init__(self, bin_dir: Path, project: Path, env: dict[str, str], log: Path) -> None:
        self.bin_dir, self.project, self.env, self.log = bin_dir, project, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> dict[str, Any]:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [str(self.bin_dir / "reclaim"), "dev", *args],
                cwd=self.project,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = self.proc
        path = self.project / ".reclaim" / "dev.json"
        return dict(wait_for("reclaim dev to be up", lambda: _endpoints(path, proc)))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                assert self.proc.wait(timeout=90) == 0
            finally:
                if self.proc.poll() is None:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI in the project, with no client variables exported."""
        return subprocess.run(
            [str(self.bin_dir / "reclaim"), *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def dev(installed: Path, tmp_path: Path) -> Iterator[Dev]:
    env = {
        "PATH": f"{installed}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        **FREE_PORTS,
    }
    subprocess.run(
        [str(installed / "reclaim"), "init", "acme-jobs"], cwd=tmp_path, env=env, check=True
    )
    running = Dev(installed, tmp_path / "acme-jobs", env, tmp_path / "dev.log")
    try:
        yield running
    finally:
        running.stop()


def _job(jobs: str, job_id: str) -> dict[str, Any]:
    answer = requests.get(f"{jobs}/{job_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _events(jobs: str, job_id: str) -> list[str]:
    return [str(h["event"]) for h in _job(jobs, job_id)["history"]]


def _submit(jobs: str, body: dict[str, Any]) -> None:
    answer = requests.post(jobs, json=body, timeout=60)
    assert answer.status_code == 202, answer.text


def test_jobs_survive_a_restart_and_a_handed_back_one_runs_again(dev: Dev) -> None:
    jobs = dev.start()["endpoints"]["jobs"]
    _submit(jobs, {"pipeline": PIPELINE, "id": "kept", "payload": {"name": "Ada"}})
    assert _follow(jobs, "kept")["status"] == "done"
    _submit(jobs, {"pipeline": "demo", "id": "long", "payload": LONG})
    wait_for("long to run its 2nd stage", lambda: "checkpoint" in _events(jobs, "long"))
    dev.stop()  # SIGTERM: the claim instance hands `long` back (its queue was in memory)
    _state_kept(dev)
    jobs = dev.start()["endpoints"]["jobs"]  # new ports, the same buckets
    kept = _job(jobs, "kept")
    assert kept["status"] == "done" and kept["result"]["greeting"] == "Hello, Ada!"
    assert "pending job(s) rung again" in dev.said()
    wait_for(
        "long claimed again after the restart",
        lambda: _events(jobs, "long")[-2:] == ["handed back", "claimed"],
    )
    dev.stop()
    dev.start("--fresh")
    fresh = requests.get(f"{_endpoints_of(dev)}/kept", timeout=30)
    assert fresh.status_code == 404, fresh.text  # --fresh: empty buckets


def _state_kept(dev: Dev) -> None:
    assert not (dev.project / ".reclaim" / "dev.json").exists()
    assert (dev.project / ".reclaim" / "storage").is_dir()


def _endpoints_of(dev: Dev) -> str:
    doc = json.loads((dev.project / ".reclaim" / "dev.json").read_text())
    return str(doc["endpoints"]["jobs"])


def test_an_edit_is_served_without_a_restart_and_a_running_job_goes_on(dev: Dev) -> None:
    jobs = dev.start()["endpoints"]["jobs"]
    _submit(jobs, {"pipeline": "demo", "id": "busy", "payload": LONG})
    wait_for("busy to run its 2nd stage", lambda: "checkpoint" in _events(jobs, "busy"))
    hello = dev.project / "acme_jobs" / "hello.py"
    hello.write_text(hello.read_text().replace('f"Hello, ', 'f"Howdy, '))
    wait_for("the reload", lambda: "reloaded your pipelines" in dev.said(), timeout=120)
    _submit(jobs, {"pipeline": PIPELINE, "id": "edited", "payload": {"name": "Bo"}})
    assert _follow(jobs, "edited")["result"]["greeting"] == "Howdy, Bo!"
    wait_for(
        "busy handed back and claimed on the new revision",
        lambda: _events(jobs, "busy")[-2:] == ["handed back", "claimed"],
    )
    hello.write_text(hello.read_text() + "\nthis is not python\n")
    wait_for("the refusal", lambda: "do not import; still serving" in dev.said(), timeout=120)
    _submit(jobs, {"pipeline": PIPELINE, "id": "still", "payload": {"name": "Cy"}})
    assert _follow(jobs, "still")["result"]["greeting"] == "Howdy, Cy!"


def test_the_cli_in_the_project_uses_the_running_cloud_and_its_refusals(
    dev: Dev, client_installed: Path
) -> None:
    doc = dev.start("--modules", "acme_jobs.hello")  # a flag: the cloud serves this list
    jobs = doc["endpoints"]["jobs"]
    submitted = dev.cli("submit", PIPELINE, "--payload", '{"name": "Di"}', "--wait")
    assert submitted.returncode == 0, submitted.stderr
    assert '"greeting": "Hello, Di!"' in submitted.stdout.splitlines()[-1]
    assert submitted.stderr == ""
    extra = dev.project / "acme_jobs" / "extra.py"
    extra.write_text(
        "from reclaim import Pipeline, register\n"
        "register(Pipeline('acme-extra', stages=[('noop', lambda ctx: None)]))\n"
    )
    pyproject = dev.project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            '["acme_jobs.hello"]', '["acme_jobs.hello", "acme_jobs.extra"]'
        )
    )
    curl = requests.post(jobs, json={"pipeline": "acme-extra"}, timeout=30)
    assert curl.status_code == 400, curl.text
    refused = dev.cli("submit", "acme-extra")  # the CLI imports it; the cloud does not serve it
    assert refused.returncode == 2, refused
    assert refused.stderr.strip() == (
        f"reclaim: {curl.json()['error']}: {curl.json()['reason']} (HTTP 400 from {jobs})"
    )
    client = (
        "import sys; from reclaim_client import Client; q = Client(sys.argv[1]); "
        "job = q.submit('acme-jobs-hello', {'name': 'Ed'}); done = q.wait(job.id, timeout=120); "
        "print(done.status, done.result['greeting'])"
    )
    ran = subprocess.run(
        [str(client_installed / "python"), "-c", client, jobs.removesuffix("/jobs")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "done Hello, Ed!"
