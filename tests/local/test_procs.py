"""Child processes: a stopped group leaves no member, even a paused or forked one."""

from __future__ import annotations

import signal
import sys
import time

from local.procs import group_pids, signal_group, spawn, stop, stop_all

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
