"""`reclaim dev` follows your code: an edit of a pipeline module rolls the functions over.

Every second the launcher looks at the modification times and sizes of the Python files
of your pipeline modules' packages (polling: no inotify limit, editors that save by
rename are seen the same way, and a project has few files). When they changed and have
stayed the same for one more look (an editor's save is often several writes), the new
code is first imported in a separate Python: an edit that does not import is reported
and the functions go on serving the previous code. Otherwise every function gets a new
revision on the local Cloud Run (reclaim/local/cloudrun/revision.py), as a deploy on GCP
does: its first instance starts with the new code and takes the traffic once it listens;
the previous revision's instances get SIGTERM. Claim's are SIGTERMed at once (not after
its 30-minute request timeout), so a running job is handed back at its next boundary or
`check()` and goes on from its checkpoint on the new revision: it is never lost, and it
resumes by the rules of a deploy (docs/pipelines.md, "Deploying a change"). A change of
the module list itself (pyproject.toml's [tool.reclaim]) is picked up the same way.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reclaim.local.cloud import LocalCloud

Snapshot = dict[Path, tuple[int, int]]
"""A watched file -> (mtime in ns, size)."""

SERVE_TIMEOUT_S = 60.0
"""How long a reload waits for each function's new revision to listen."""


def package_files(modules: Sequence[str], search: Sequence[Path]) -> list[Path]:
    """The Python files of each module's top-level package (or the module's own file),
    found on `search` without importing anything."""
    out: set[Path] = set()
    for top in sorted({m.split(".")[0] for m in modules}):
        spec = importlib.machinery.PathFinder.find_spec(top, [str(p) for p in search])
        if spec is None:
            continue
        for folder in spec.submodule_search_locations or []:
            out.update(p for p in Path(folder).rglob("*.py") if "__pycache__" not in p.parts)
        if spec.origin and spec.origin.endswith(".py") and not spec.submodule_search_locations:
            out.add(Path(spec.origin))
    return sorted(out)


def snapshot(files: Sequence[Path]) -> Snapshot:
    """(mtime, size) of each file that exists now."""
    out: Snapshot = {}
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def import_problem(modules: Sequence[str], search: Sequence[Path], root: Path) -> str | None:
    """Why the modules do not import (the last lines of the error), in a fresh Python as an
    instance would import them; None when they do."""
    code = "import sys; from shared.pipelines import load_modules; load_modules(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (root, *search)))}
    proc = subprocess.run(
        [sys.executable, "-c", code, *modules],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 0:
        return None
    return "\n".join(proc.stderr.strip().splitlines()[-6:]) or f"exit code {proc.returncode}"


@dataclass
class Reloader:
    """Polls the pipeline modules' files and rolls the cloud's functions when they change.

    `modules` says which modules to serve now (re-read at every look: a project's
    pyproject.toml may change them); `say` prints one line for a person."""

    cloud: LocalCloud
    modules: Callable[[], tuple[str, ...]]
    say: Callable[[str], None]
    served: tuple[str, ...] = ()
    seen: Snapshot = field(default_factory=dict)
    _changed: Snapshot | None = None
    reloads: int = 0

    def __post_init__(self) -> None:
        self.served = self.modules()
        self.seen = self._look(self.served)

    @property
    def search(self) -> tuple[Path, ...]:
        """Where the functions import the modules from: the project's folders, then the
        library's (this repository's pipelines/ under `make dev`)."""
        return (*self.cloud.config.python_path, _root())

    def _look(self, modules: Sequence[str]) -> Snapshot:
        return snapshot(package_files(modules, self.search))

    def poll(self) -> bool:
        """One look; True when it rolled the functions over to new code."""
        modules = self.modules()
        now = self._look(modules)
        if now == self.seen and modules == self.served:
            self._changed = None
            return False
        if self._changed != now:  # changed since the last look: wait until it settles
            self._changed = now
            return False
        self._changed = None
        self.seen = now
        problem = import_problem(modules, self.search, _root())
        if problem is not None:
            self.say(
                "your pipeline modules do not import; still serving the previous code:\n" + problem
            )
            return False
        self.served = modules
        return self.roll(modules)

    def roll(self, modules: Sequence[str]) -> bool:
        """A new revision of every function with these modules; True once each serves."""
        started = time.monotonic()
        deployed = {}
        for name in self.cloud.config.service_names():
            drain = 0.0 if name.startswith("claim") else None  # running jobs hand back now
            deployed[name] = self.cloud.deploy_revision(
                name, pipeline_modules=modules, drain_timeout_seconds=drain
            )
        failed = _wait_serving(self.cloud, deployed)
        if failed:
            self.say(
                f"reload failed: {', '.join(failed)} did not start (its log under "
                f"{self.cloud.config.log_dir}); the previous revision serves"
            )
            return False
        self.reloads += 1
        self.say(
            f"reloaded your pipelines ({', '.join(modules) or 'the built-ins only'}): "
            f"{len(deployed)} functions on new revisions in {time.monotonic() - started:.1f} s; "
            "a running job is handed back at its next check() and goes on from its checkpoint"
        )
        return True


def _wait_serving(cloud: LocalCloud, deployed: dict[str, str]) -> list[str]:
    """The revisions that failed to start (empty: every one serves, or has already been
    replaced by a newer one)."""
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    waiting = dict(deployed)
    failed = []
    while waiting and time.monotonic() < deadline:
        for name, revision in list(waiting.items()):
            state = cloud.revision(name, revision)["state"]
            if state in ("serving", "retired"):
                del waiting[name]
            elif state == "failed":
                failed.append(revision)
                del waiting[name]
        if waiting:
            time.sleep(0.2)
    return failed + list(waiting.values())


def _root() -> Path:
    from reclaim.local.cloud import ROOT

    return ROOT
