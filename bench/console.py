"""What a run shows and where its logs go: the terminal gets the benchmark names, a
progress line for the long ones and the table; every log line (this process's, the
local clouds' emulators' and functions') goes to one file under bench/logs/, whose path
the run prints. Verbose runs also echo each line to stderr as it is written.

The local clouds write one file per process in their own log directory (the rows read
some of them back); a follower thread copies their new lines, prefixed with their
source, into the run's file while the run goes on, and the directories are removed once
the run's file holds them.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

from shared import logs

_FOLLOW_S = 0.5


class Console:
    """The run's terminal and its log file (start() it; close() flushes and tidies)."""

    def __init__(self) -> None:
        self.verbose = False
        self.path: Path | None = None
        self._clouds: Path | None = None
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self._offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tty = sys.stdout.isatty()
        self._progress = False

    def start(self, log_dir: Path, verbose: bool, path: Path | None = None) -> Path:
        """Open bench/logs/bench-<time>.log (or `path`: a lane's own) and send every
        logger of this process to it."""
        self.verbose = verbose
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.path = path or log_dir / f"bench-{stamp}.log"
        self._clouds = self.path.with_name(self.path.stem + "-clouds")
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        handler = _LineHandler(self)
        handler.setFormatter(logs.JsonFormatter())
        project = logging.getLogger(logs.ROOT)
        for old in list(project.handlers):
            project.removeHandler(old)
        project.addHandler(handler)
        project.propagate = False
        root = logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
        plain = _LineHandler(self)
        plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(plain)
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        self._thread = threading.Thread(target=self._follow, name="bench-logs", daemon=True)
        self._thread.start()
        return self.path

    def cloud_log_dir(self) -> Path | None:
        """A fresh directory for one local cloud's logs (None before start: the default)."""
        if self._clouds is None:
            return None
        return self._clouds / f"cloud-{uuid.uuid4().hex[:8]}"

    def say(self, text: str) -> None:
        """A line that stays on the terminal (from any thread: the beside lane's relay)."""
        with self._lock:
            self._end_progress()
            print(text, flush=True)

    def progress(self, text: str) -> None:
        """The one line that says how far a long benchmark is: rewritten in place on a
        terminal, a line of its own otherwise."""
        with self._lock:
            if self._tty and not self.verbose:
                sys.stdout.write("\r\033[K  " + text)
                sys.stdout.flush()
                self._progress = True
            else:
                print("  " + text, flush=True)

    def _end_progress(self) -> None:
        if self._progress:
            sys.stdout.write("\r\033[K")
            sys.stdout.flush()
            self._progress = False

    def write(self, line: str) -> None:
        """One log line to the file (and to stderr when verbose)."""
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
            if self.verbose:
                sys.stderr.write(line + "\n")

    def close(self) -> None:
        """Copy what the clouds wrote last, close the file, remove their directories."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._copy_new()
        self._end_progress()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        if self._clouds is not None:
            shutil.rmtree(self._clouds, ignore_errors=True)

    def _follow(self) -> None:
        while not self._stop.wait(_FOLLOW_S):
            self._copy_new()

    def _copy_new(self) -> None:
        """New complete lines of every file under the clouds' directories, prefixed by
        cloud and process (e.g. ``[cloud-1a2b3c4d/claim-0]``)."""
        if self._clouds is None or not self._clouds.exists():
            return
        for path in sorted(self._clouds.glob("*/*.log")):
            start = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            if end == 0:
                continue
            self._offsets[path] = start + end
            source = f"[{path.parent.name}/{path.stem}] "
            for line in data[:end].decode("utf-8", "replace").splitlines():
                self.write(source + line)


class _LineHandler(logging.Handler):
    """A logging handler that hands each formatted record to the console."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.write(self.format(record))
        except Exception:  # logging must never break the run
            self.handleError(record)


CONSOLE = Console()
"""The run's console: bench/__main__ starts it; the rows show progress through it."""
