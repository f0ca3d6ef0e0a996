"""The README's quickstart, run as written: its five lines, taken from README.md itself
(so the test and the page can never drift apart), in a user's shell with the built wheel
in dist/: install, start (left running, as the README says), then submit, status and
result in a second shell."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.library.test_install import FREE_PORTS
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def quickstart() -> list[str]:
    """The command lines of the README's "Quickstart" block, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the Quickstart has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_quickstart_has_five_lines_start_submit_status_result() -> None:
    lines = quickstart()
    assert len(lines) == 5, lines
    assert "reclaim dev" in lines[1] and "reclaim submit" in lines[2]


def test_the_readme_quickstart_runs_as_written(
    wheel: Path, installed: Path, tmp_path: Path
) -> None:
    install, start, submit, status, result = quickstart()
    env = {
        "PATH": f"{installed}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        **FREE_PORTS,
    }

    def shell(line: str) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run(
            ["bash", "-ec", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0, f"{line}\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}"
        return ran

    cwd = wheel.parent.parent  # the folder holding dist/, where `make wheel` put it
    shell(install)
    log = (tmp_path / "dev.log").open("w")
    dev = subprocess.Popen(
        ["bash", "-ec", start],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        endpoints = tmp_path / "hello" / ".reclaim" / "dev.json"
        wait_for("reclaim dev to be up", lambda: dev.poll() is None and endpoints.exists())
        cwd = tmp_path  # the second terminal, in the user's home: one shell, line by line
        out = shell(f"{submit}\necho @@\n{status}\necho @@\n{result}").stdout
        submitted, watched, shown = out.split("@@\n")
        assert submitted.strip() == "ada  queued", out
        assert watched.splitlines()[-1].startswith("ada  done"), out
        assert re.search(r"result\s+\{.*Hello, Ada!", shown), shown
        assert "history" in shown
    finally:
        os.killpg(dev.pid, signal.SIGTERM)
        try:
            dev.wait(timeout=90)
        finally:
            if dev.poll() is None:
                os.killpg(dev.pid, signal.SIGKILL)
            log.close()
