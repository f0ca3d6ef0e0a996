"""Lanes, so that `make bench` fits ten minutes on 2 cores. The entries whose rows are
judged on counts, or on bounds far from what they measure, run in four more processes
(the beside lanes) while this one runs the timed entry whose verdict a busy machine does
not move either (backlog); then this process waits for the beside lanes and runs the
rest (LAST) on a quiet machine. The table says which entries ran beside.

A beside lane is `python -m bench --only <its entries> --lane-of <its log>`: it takes its
own part of this process's block of ports (RECLAIM_PORT_BLOCK, see
reclaim.local.procs.free_port), writes its log next to the run's (appended to it at the end),
and its results file is merged into the run's, entry by entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench.console import CONSOLE

BESIDE = (
    ("sweep", "delayed", "capacity"),
    ("calls", "cost"),
    ("lost_doorbell", "rescue"),
    ("flow", "workflows", "client", "run_jobs"),
    ("retry",),
)
"""The beside lanes, each a process, balanced by time (80 to 100 s each alone): entries
judged on call counts (calls, sweep, delayed, lost_doorbell, client, the flow and
workflows calls rows), on bounds several times their figure (rescue's hand-back 0.2 s
against 2 s, its staleness 5 s against 10 s; the flow and workflows hand-offs, tens of
ms against a second; retry's lateness after a not_before, tenths of a second against 2 s),
or not judged (cost, run_jobs, capacity). retry waits out its backoffs (about 75 s, two
local clouds mostly asleep): a lane of its own, so it lengthens no other."""
LAST = (
    "throughput",
    "first_stage",
    "pools",
    "imports",
    "handback",
    "rollout",
    "trace",
    "waiters",
    "waits",
)
"""Timed entries run once the beside lanes are done: their ratios compare a fixed cost
with a short batch (rollout: 1.32x beside a lane, 1.18x alone), figures of tens of
milliseconds (pools, imports, first_stage), a CPU-bound rate (throughput) or a wait for a free slot
(handback: 0.00 s alone, 8.3 s beside two lanes), or a latency's p95 (trace; waits, a
resume over a thousand completions), which other lanes' load would move; waiters times
submits against a bound (2 s) with sixteen waiters parked.
The timed entry before them (backlog: 0.95x against 1.3x beside the lanes) keeps its
margin under that load."""
STOP_WAIT_S = 60.0
"""How long an interrupted run waits for a beside lane's own teardown."""


def split(chosen: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    """(timed entries run beside the lanes, the beside lanes, the entries run after them),
    each in the table's order. A run whose timed entries or beside lanes would be empty
    runs every entry in this process, in its order: (chosen, [], [])."""
    lanes = [[n for n in chosen if n in lane] for lane in BESIDE]
    lanes = [lane for lane in lanes if lane]
    timed = [n for n in chosen if not any(n in lane for lane in BESIDE)]
    if not lanes or not timed:
        return list(chosen), [], []
    first = [n for n in timed if n not in LAST]
    return first, lanes, [n for n in timed if n in LAST]


def port_blocks(block: str, parts: int) -> list[str]:
    """`parts` disjoint RECLAIM_PORT_BLOCKs inside `block` ("i/n"; the whole range when
    empty): this process's first, then one per beside lane, so no two hand out a port."""
    index, count = (int(n) for n in block.split("/")) if block else (0, 1)
    return [f"{index * parts + j}/{count * parts}" for j in range(parts)]


def start(lanes: list[list[str]], log: Path, verbose: bool) -> list[Beside]:
    """Every beside lane's process, each with its own ports (this process keeps the
    first block: set before it picks its first port)."""
    blocks = port_blocks(os.environ.get("RECLAIM_PORT_BLOCK", ""), len(lanes) + 1)
    os.environ["RECLAIM_PORT_BLOCK"] = blocks[0]
    return [
        Beside(names, log, verbose, i, block)
        for i, (names, block) in enumerate(zip(lanes, blocks[1:], strict=True), 1)
    ]


class Beside:
    """A beside lane's process: its terminal lines relayed, its results merged."""

    def __init__(self, names: list[str], log: Path, verbose: bool, number: int, ports: str) -> None:
        self.names = names
        self.label = f"beside-{number}"
        self.log = log.with_name(f"{log.stem}-{self.label}.log")
        self._out = Path(tempfile.mkdtemp(prefix="bench-beside-"))
        argv = [sys.executable, "-m", "bench", "--only", ",".join(names)]
        argv += ["--out", str(self._out), "--lane-of", str(self.log)]
        env = {**os.environ, "RECLAIM_PORT_BLOCK": ports, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            argv + (["-v"] if verbose else []),
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._relay = threading.Thread(target=self._relay_lines, name=self.label, daemon=True)
        self._relay.start()

    def _relay_lines(self) -> None:
        """The lane's lines that say which entry runs and how it ended (not its progress)."""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("["):
                CONSOLE.say(f"{self.label} " + line.rstrip("\n"))

    def check(self) -> None:
        """Between the timed lane's entries: stop the run when the beside lane failed."""
        code = self._proc.poll()
        if code not in (None, 0):
            self.finish()  # raises, naming the log

    def finish(self) -> dict[str, Any]:
        """Wait for the lane; its entries, or an error naming its log when it failed."""
        code = self._proc.wait()
        self._relay.join(timeout=10)
        self._append_log()
        if code != 0:
            raise RuntimeError(
                f"{self.label} ({', '.join(self.names)}) failed with exit code {code}; "
                f"its log is in {CONSOLE.path}"
            )
        results = json.loads((self._out / "results.json").read_text())
        shutil.rmtree(self._out, ignore_errors=True)
        entries: dict[str, Any] = results.get("benchmarks", {})
        for entry in entries.values():
            entry["lane"] = "beside"
        return entries

    def stop(self) -> None:
        """An interrupted run: the lane tears its local clouds down itself on SIGTERM."""
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._append_log()
        shutil.rmtree(self._out, ignore_errors=True)

    def _append_log(self) -> None:
        """The lane's log lines, appended to the run's one file."""
        if not self.log.exists():
            return
        with open(self.log, encoding="utf-8", errors="replace") as lines:
            CONSOLE.write(f"===== {self.label} ({', '.join(self.names)}) =====")
            for line in lines:
                CONSOLE.write(line.rstrip("\n"))
        self.log.unlink()
