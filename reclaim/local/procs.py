"""Starting and stopping the local cloud's child processes, with no orphans."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PORT_SPAN = 12_000
"""free_port hands out the PORT_SPAN ports just below the kernel's ephemeral range."""
_port_lock = threading.Lock()
_ports: Iterator[int] | None = None


def free_port() -> int:
    """A TCP port nobody listens on right now, for a child process to listen on.

    Not the kernel's pick (bind to port 0): that comes from the ephemeral range, where
    outgoing connections take their source ports, and it can hand the port it just gave
    one process to another before either child has bound it; the loser's wait_for_port
    then meets the winner's server. Ports come from just below that range instead, in
    turn from a random start, so one process gives a port again only after the whole
    span; RECLAIM_PORT_BLOCK="i/n" keeps it to the i-th of n equal blocks, so that
    processes running side by side (tests/conftest.py: the pytest-xdist workers) never
    give out the same one.
    """
    global _ports
    with _port_lock:
        if _ports is None:
            _ports = _port_walk(os.environ.get("RECLAIM_PORT_BLOCK", ""))
        for _ in range(PORT_SPAN):
            port = next(_ports)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:  # in use (or lingering in TIME_WAIT): the next one
                    continue
            return port
    raise RuntimeError("no free TCP port below the ephemeral range")


def _port_walk(block: str) -> Iterator[int]:
    """This process's ports, endlessly, from a random one on."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            top = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        top = 32768  # Linux's default first ephemeral port
    bottom = max(1024, top - PORT_SPAN)
    if block:
        index, count = (int(n) for n in block.split("/"))
        size = (top - bottom) // count
        bottom += index % count * size
        top = bottom + size
    start = random.SystemRandom().randrange(bottom, top)  # not the tests' seeded random
    return itertools.cycle([*range(start, top), *range(bottom, start)])


def wait_for_port(
    host: str, port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
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


def spawn(
    args: Sequence[str],
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = False,
    long_lived_thread: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a child in its own process group, so stop() can take its children too.

    die_with_parent asks the kernel to SIGTERM the child if this process dies
    without cleaning up (kill -9 of the launcher). Linux ties that signal to the
    spawning THREAD, so it is only honoured from the main thread, or from a thread
    the caller vouches for (long_lived_thread: it lives as long as the child should,
    like the local Cloud Run platform's spawner).
    """
    args = list(args)
    trusted = long_lived_thread or threading.current_thread() is threading.main_thread()
    if die_with_parent and trusted:
        setpriv = shutil.which("setpriv")
        if setpriv:
            # A parent that dies between fork and setpriv's prctl would never signal the
            # child: after the prctl, a shell checks that its parent is still this process
            # (else exits) and execs the program, which keeps the parent-death signal.
            guard = f'[ "$PPID" = {os.getpid()} ] || exit 143; exec "$@"'
            args = [setpriv, "--pdeathsig", "TERM", "--", "/bin/sh", "-c", guard, "sh", *args]
    if log_path is None:
        return subprocess.Popen(
            args,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )
    with open(log_path, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
        )


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> bool:
    """Send sig to the child's whole process group; False if it is already gone."""
    if proc.poll() is not None:
        return False
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc (Linux)."""
    return list(_group_states(pgid))


def wait_group_stopped(pgid: int, stopped: bool = True, timeout: float = 5.0) -> None:
    """Signals arrive asynchronously: block until every member is (or no member
    is) stopped, so a caller of SIGSTOP/SIGCONT can rely on the new state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = _group_states(pgid).values()
        if all((st in "Tt") == stopped for st in states):
            return
        time.sleep(0.01)
    raise TimeoutError(f"group {pgid} did not {'stop' if stopped else 'continue'} in {timeout}s")


def _group_states(pgid: int) -> dict[int, str]:
    return {pid: state for pid, state, _parent, group in _processes() if group == pgid}


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state, parent pid, process group) of every process, read from /proc (Linux);
    zombies (state Z) excluded."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and fields[0] != "Z":
            yield int(entry), fields[0], int(fields[1]), int(fields[2])


def stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM the child's group, SIGKILL it if it lingers; no member survives."""
    if proc.poll() is not None:
        _reap_group(proc.pid)
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGCONT)  # a paused (SIGSTOP) child must wake to exit
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _reap_group(proc.pid)


def stop_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 5.0) -> None:
    """stop() for many children at once: one grace period for all, not one each."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
                os.killpg(proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        stop(proc, timeout=1.0)  # SIGKILLs what lingers and reaps every group


def reap(proc: subprocess.Popen[bytes]) -> None:
    """After a kill: collect the child's exit status and SIGKILL what is left of its group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _reap_group(proc.pid)


def stop_children(timeout: float = 5.0) -> list[int]:
    """The last resort of an interrupted run: SIGTERM every child this process still has,
    with its process group when it leads one (spawn() gives each its own), SIGKILL what
    lingers past timeout; returns their pids. A teardown cut short leaves none behind."""
    me = os.getpid()
    children = {pid: group == pid for pid, _st, parent, group in _processes() if parent == me}

    def send(sig: int) -> None:
        for pid, leads in children.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if leads:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)

    def alive() -> bool:
        return any(group_pids(pid) if leads else _exists(pid) for pid, leads in children.items())

    send(signal.SIGTERM)
    send(signal.SIGCONT)  # a paused (SIGSTOP) child must wake to exit
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        _collect(children)
        time.sleep(0.05)
    send(signal.SIGKILL)
    _collect(children)
    return list(children)


def _exists(pid: int) -> bool:
    return any(p == pid for p, _st, _parent, _group in _processes())


def _collect(children: dict[int, bool]) -> None:
    """Reap the children that have exited (they are ours to wait for)."""
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _reap_group(pgid: int, timeout: float = 5.0) -> None:
    """SIGKILL whatever is left of the group (a worker whose master already exited)
    and wait until the kernel has taken it away."""
    deadline = time.monotonic() + timeout
    while group_pids(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.02)


def function_args(source: Path, target: str, host: str, port: int) -> list[str]:
    """The command that serves one HTTP function under functions-framework."""
    return [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(source),
        "--target",
        target,
        "--signature-type",
        "http",
        "--host",
        host,
        "--port",
        str(port),
    ]
