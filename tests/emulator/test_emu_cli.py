"""The CLI: clean exit on SIGTERM/SIGINT, clear errors on bad flags."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from reclaim.local.procs import free_port, spawn, stop, wait_for_port


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_exit_0(sig: signal.Signals) -> None:
    port = free_port()
    proc = spawn([sys.executable, "-m", "reclaim.local.pubsub_emulator", "--port", str(port)])
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=5) == 0
    finally:
        stop(proc)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.mark.parametrize(
    "args, message",
    [
        (["--duplicate-fraction", "2"], "between 0 and 1"),
        (["--port", "{busy}"], "cannot listen"),
        (["--port", "{emulator}"], "cannot listen"),  # no SO_REUSEPORT sharing with a twin
    ],
)
def test_bad_flags_exit_with_a_message(args: list[str], message: str, pubsub_emulator: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        ports = {"busy": busy.getsockname()[1], "emulator": pubsub_emulator.rsplit(":", 1)[1]}
        argv = [a.format(**ports) for a in args]
        result = subprocess.run(
            [sys.executable, "-m", "reclaim.local.pubsub_emulator", *argv],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode != 0 and message in result.stderr
