"""Child processes: a stopped group leaves no member, even a paused or forked one; the
ports they listen on are never handed to two of them at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from reclaim.local.procs import (
    PORT_SPAN,
    free_port,
    group_pids,
    signal_group,
    spawn,
    stop,
    stop_all,
)

# A parent that forks a grandchild which ignores SIGTERM, like a stubborn worker.
_FORKER = """
import os, signal, time
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True: time.sleep(1)
while True: time.sleep(1)
"""


def _wait_members(pgid: int, n: int) -> list[int]:
    for _ in range(200):
        pids = group_pids(pgid)
        if len(pids) >= n:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"group {pgid} never had {n} members: {group_pids(pgid)}")


def test_stop_takes_the_whole_group(tmp_path):
    proc = spawn([sys.executable, "-c", _FORKER], log_path=tmp_path / "f.log")
    _wait_members(proc.pid, 2)
    stop(proc, timeout=0.5)
    assert proc.poll() is not None
    assert group_pids(proc.pid) == []


def test_stop_wakes_a_paused_child():
    proc = spawn([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    _wait_members(proc.pid, 1)
    assert signal_group(proc, signal.SIGSTOP)
    stop(proc, timeout=5)
    assert proc.returncode == -signal.SIGTERM
    assert group_pids(proc.pid) == []
    assert not signal_group(proc, signal.SIGCONT)  # already gone


def _ignores_sigterm(pid: int) -> bool:
    """Whether `pid` has SIGTERM ignored yet (the SigIgn mask in /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return False
    return bool(int(mask.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def test_leftover_worker_is_reaped_after_master_died():
    proc = spawn([sys.executable, "-c", _FORKER])
    pids = _wait_members(proc.pid, 2)
    workers = [p for p in pids if p != proc.pid]
    for _ in range(250):  # the forked worker must ignore SIGTERM before the master gets it
        if all(_ignores_sigterm(p) for p in workers):
            break
        time.sleep(0.02)
    signal_group(proc, signal.SIGTERM)  # the master dies, the worker ignores it
    proc.wait(5)
    assert [p for p in group_pids(proc.pid) if p != proc.pid] == [p for p in pids if p != proc.pid]
    stop(proc)
    assert group_pids(proc.pid) == []


def test_stop_all_takes_every_group(tmp_path):
    procs = [spawn([sys.executable, "-c", _FORKER]) for _ in range(3)]
    for p in procs:
        _wait_members(p.pid, 2)
    signal_group(procs[1], signal.SIGSTOP)
    stop_all(procs, timeout=0.5)
    assert all(p.poll() is not None for p in procs)
    assert [p.pid for p in procs if group_pids(p.pid)] == []


def _ports_of(block: str, n: int) -> list[int]:
    """n ports from free_port in a fresh process given RECLAIM_PORT_BLOCK=block."""
    probe = f"from reclaim.local.procs import free_port; print([free_port() for _ in range({n})])"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "RECLAIM_PORT_BLOCK": block},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [int(p) for p in done.stdout.strip("[]\n").split(", ")]


def test_free_ports_are_below_the_ephemeral_range_and_never_shared_between_blocks():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
    first, second = _ports_of("0/2", 300), _ports_of("1/2", 300)
    assert not set(first) & set(second)  # two workers never hand out the same port
    for ports in (first, second):
        assert len(set(ports)) == len(ports)  # nor does one, before its block is used up
        assert all(ephemeral - PORT_SPAN <= p < ephemeral for p in ports), ports


def test_a_port_someone_listens_on_is_never_handed_out():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen()
        taken = server.getsockname()[1]
        handed = {free_port() for _ in range(PORT_SPAN + 1)}
    assert taken not in handed
