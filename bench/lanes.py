"""Two lanes, so that `make bench` fits ten minutes on 2 cores: the entries whose rows are
judged on counts, or on bounds far from what they measure, run in a second process (the
beside lane) while this one runs the entries judged on times near their targets (the
timed lane), those most sensitive to the machine's load last, when the beside lane has
usually finished. The table says which entries were measured beside the others.

The beside lane is `python -m bench --only <its entries> --lane-of <the run's log>`: it
takes the second half of this process's block of ports (RECLAIM_PORT_BLOCK, see
local.procs.free_port), writes its log next to the run's (appended to it at the end),
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
    "calls",
    "sweep",
    "delayed",
    "lost_doorbell",
    "rescue",
    "cost",
    "client",
    "flow",
    "workflows",
    "run_jobs",
    "capacity",
)
"""Entries judged on call counts (calls, sweep, delayed, lost_doorbell, client, the flow and
workflows calls rows), on bounds several times their figure (rescue's hand-back 0.2 s
against 2 s, its staleness 5 s against 10 s; the flow and workflows hand-offs, tens of ms
against a second), or not judged (cost, run_jobs, capacity)."""
LAST = ("pools", "throughput", "imports")
"""Timed entries run at the end of the timed lane: their ratios compare figures of tens of
milliseconds (pools, imports) or a CPU-bound rate (throughput), which a second lane's load
would move; the beside lane is usually done by then."""
STOP_WAIT_S = 60.0
"""How long an interrupted run waits for the beside lane's own teardown."""


def split(chosen: list[str]) -> tuple[list[str], list[str]]:
    """(timed lane in run order, beside lane) for a run of `chosen` entries. A run that
    would leave either lane empty runs all of them in this process, in their order."""
    beside = [n for n in chosen if n in BESIDE]
    timed = [n for n in chosen if n not in BESIDE and n not in LAST]
    timed += [n for n in LAST if n in chosen]
    if not beside or not timed:
        return list(chosen), []
    return timed, beside


def port_blocks(block: str) -> tuple[str, str]:
    """(this process's, the beside lane's) RECLAIM_PORT_BLOCK: the two halves of `block`
    ("i/n"; the whole range when empty), so the lanes never hand out the same port."""
    index, count = (int(n) for n in block.split("/")) if block else (0, 1)
    return f"{2 * index}/{2 * count}", f"{2 * index + 1}/{2 * count}"


class Beside:
    """The beside lane's process: its terminal lines relayed, its results merged."""

    def __init__(self, names: list[str], log: Path, verbose: bool) -> None:
        mine, theirs = port_blocks(os.environ.get("RECLAIM_PORT_BLOCK", ""))
        os.environ["RECLAIM_PORT_BLOCK"] = mine  # before this process picks its first port
        self.names = names
        self.log = log.with_name(log.stem + "-beside.log")
        self._out = Path(tempfile.mkdtemp(prefix="bench-beside-"))
        argv = [sys.executable, "-m", "bench", "--only", ",".join(names)]
        argv += ["--out", str(self._out), "--lane-of", str(self.log)]
        env = {**os.environ, "RECLAIM_PORT_BLOCK": theirs, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            argv + (["-v"] if verbose else []),
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._relay = threading.Thread(target=self._relay_lines, name="bench-beside", daemon=True)
        self._relay.start()

    def _relay_lines(self) -> None:
        """The lane's lines that say which entry runs and how it ended (not its progress)."""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("["):
                CONSOLE.say("beside " + line.rstrip("\n"))

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
                f"the beside lane ({', '.join(self.names)}) failed with exit code {code}; "
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
            CONSOLE.write(f"===== the beside lane ({', '.join(self.names)}) =====")
            for line in lines:
                CONSOLE.write(line.rstrip("\n"))
        self.log.unlink()
