"""A bench run stopped by SIGTERM (a CI timeout, `kill`) leaves no local cloud behind.

The local clouds' processes (emulators, function instances) run in process groups of
their own, so the signal reaches the bench alone: its teardown must stop them, and a
beside lane's (a process of its own, bench.lanes) must be stopped by its own teardown.
The runs are `python -m bench --only throughput` and `--only rescue,imports` (rescue in
a lane), signalled once their function instances serve.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTED_S = 120.0
"""How long the run may take to start its first local cloud (a condition, not a timing)."""


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process (Linux /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and fields[0] != "Z":
            found[int(entry)] = (int(fields[1]), cmdline)
    return found


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live process below root."""
    procs = _processes()
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmdline) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = cmdline
                frontier.append(pid)
    return found


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "only",
    [
        "throughput",  # one process
        "rescue,imports",  # rescue in a beside lane (bench.lanes), its clouds the lane's
    ],
)
def test_sigterm_stops_every_local_cloud_process(tmp_path: Path, only: str) -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "bench", "--only", only, "--out", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + STARTED_S
        while time.monotonic() < deadline and run.poll() is None:
            seen.update(_descendants(run.pid))
            if any("functions_framework" in c for c in seen.values()):
                break
            time.sleep(0.2)
        assert any("functions_framework" in c for c in seen.values()), "no cloud started"
        assert any("pubsub_emulator" in c for c in seen.values())
        seen.update(_descendants(run.pid))
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=120)
        text = out.decode(errors="replace")
        assert run.returncode == 128 + signal.SIGTERM, text
        assert "interrupted" in text, text
        left = {pid: c for pid, c in _processes().items() if pid in seen and c == seen[pid]}
        assert left == {}, f"still running after the bench exited: {left}"
        assert not (tmp_path / "results.json").exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        _kill_all([pid for pid, c in _processes().items() if seen.get(pid) == c[1]])
