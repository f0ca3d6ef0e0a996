"""Starting and stopping the local cloud's child processes, with no orphans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 20.0,
                  proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts on host:port; fail fast if proc died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout}s")


def spawn(args: Sequence[str], env: dict[str, str] | None = None,
          log_path: Path | None = None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a child in its own process group, so stop() can take its children too."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        list(args), env=env, stdout=out, stderr=subprocess.STDOUT if log_path else out,
        cwd=cwd, start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM the child's group, SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
