"""The project a command runs in, and the commands that make and serve one.

A project is a folder whose pyproject.toml has a ``[tool.reclaim]`` table (``reclaim
init`` writes it)::

    [tool.reclaim]
    pipeline_modules = ["acme_jobs.hello"]   # what RECLAIM_PIPELINE_MODULES gets
    app_dir = "."                            # the folder those modules import from

Run from a project, every command imports your modules from ``app_dir`` (as
``python -m`` would from the current folder), so your package never needs installing
and never shares a name with the library's. ``reclaim init`` writes a project,
``reclaim dev`` serves one on the local cloud, ``reclaim tf-module`` copies the
terraform module (docs/library.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tomllib
from collections.abc import Callable, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reclaim.cli.context import EXIT_OK, CliError

MODULES_ENV = "RECLAIM_PIPELINE_MODULES"
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_KEYS = frozenset({"pipeline_modules", "app_dir"})


@dataclass(frozen=True)
class Project:
    """A project's folder, its pipeline modules and the folder they import from."""

    root: Path
    pipeline_modules: tuple[str, ...]
    app_dir: Path

    def apply(self, env: MutableMapping[str, str], path: MutableSequence[str]) -> None:
        """Let this process import the project's modules: app_dir first on the import
        path, and RECLAIM_PIPELINE_MODULES unless the environment already names some."""
        if str(self.app_dir) not in path:
            path.insert(0, str(self.app_dir))
        if self.pipeline_modules and not env.get(MODULES_ENV, "").strip():
            env[MODULES_ENV] = ",".join(self.pipeline_modules)


def load(root: Path) -> Project | None:
    """The project whose pyproject.toml is in `root`, or None (no file, no [tool.reclaim]);
    CliError naming the key when the table is wrong."""
    file = root / "pyproject.toml"
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CliError(f"{file} is not readable TOML: {exc}") from None
    table = doc.get("tool", {}).get("reclaim")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise CliError(f"{file}: [tool.reclaim] must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise CliError(f"{file}: [tool.reclaim] has unknown keys {unknown}; known: {sorted(_KEYS)}")
    modules = table.get("pipeline_modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(m, str) and _MODULE.fullmatch(m) for m in modules
    ):
        raise CliError(
            f"{file}: [tool.reclaim] pipeline_modules must be a list of dotted module names"
        )
    app_dir = table.get("app_dir", ".")
    if not isinstance(app_dir, str) or not (root / app_dir).is_dir():
        raise CliError(f"{file}: [tool.reclaim] app_dir must name a folder of the project")
    return Project(root.resolve(), tuple(modules), (root / app_dir).resolve())


def use_current(env: MutableMapping[str, str], path: MutableSequence[str]) -> None:
    """Before any command: the current folder's project, if it is one, is applied; else
    the current folder goes on the import path, as `python -m` puts it there, so that
    RECLAIM_PIPELINE_MODULES naming a package of this folder imports."""
    project = load(Path.cwd())
    if project is not None:
        project.apply(env, path)
    elif os.getcwd() not in path:
        path.insert(0, os.getcwd())


# ----------------------------------------------------------------------- commands

_Add = Callable[[str, Callable[..., int], str, str], Any]


def configure_project_parsers(add: _Add) -> None:
    """`reclaim init`, `reclaim dev`, `reclaim tf-module`."""
    p = add(
        "init",
        cmd_init,
        "write a new project: your pipelines package, its test, deploy/ and a Makefile",
        "Writes DIR (refused when it is not empty, unless --force; then no file it\n"
        "would write may exist yet: nothing is overwritten). Then `make dev` and\n"
        "`make test` in DIR. See docs/library.md.",
    )
    p.add_argument("dir", help="the project folder (created if missing)")
    p.add_argument(
        "--package",
        metavar="NAME",
        help="your pipelines package (default: the folder's name as a Python identifier)",
    )
    p.add_argument("--force", action="store_true", help="write into a folder that is not empty")
    p.set_defaults(in_project=False)  # each of these names its folder: not the current one
    p = add(
        "dev",
        cmd_dev,
        "run the local cloud serving a project's pipelines (Ctrl-C stops it)",
        "The emulators, the five functions on the local Cloud Run and the scheduler,\n"
        "importing the project's [tool.reclaim] pipeline_modules (or --modules) from\n"
        "its app_dir; an edit of those modules rolls the functions over (running jobs\n"
        "are handed back and go on). The buckets are kept in DIR/.reclaim/storage across\n"
        "restarts (--fresh starts empty); logs go to DIR/.reclaim/logs; the endpoints are\n"
        "written to DIR/.reclaim/dev.json once up, where the CLI run in DIR finds them.\n"
        "LOCAL_* variables tune it (python -m reclaim.local.dev --help lists them).\n"
        "SIGINT or SIGTERM stops everything it started. Needs `pip install 'reclaim[dev]'`.",
    )
    p.add_argument("dir", nargs="?", default=".", help="the project folder (default: .)")
    p.add_argument(
        "--modules",
        metavar="M[,M...]",
        help="pipeline modules to serve (default: the project's pipeline_modules)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start with empty buckets: delete the jobs kept in DIR/.reclaim/storage first",
    )
    p.set_defaults(in_project=False)
    p = add(
        "tf-module",
        cmd_tf_module,
        "copy this reclaim's terraform module and library source for your root module",
        "Writes DIR (default .reclaim/module) with terraform/ (the module) beside the\n"
        "library it archives, from the installed reclaim: your root module calls\n"
        '`source = "<DIR>/terraform"`. Re-run it after upgrading reclaim (`make deploy`\n'
        "in a project does). It only ever replaces a folder it wrote.",
    )
    p.add_argument("dir", nargs="?", default=".reclaim/module", help="where to write")
    p.set_defaults(in_project=False)


def cmd_init(args: argparse.Namespace) -> int:
    from reclaim.local import scaffold

    try:
        written = scaffold.write_project(Path(args.dir), args.package, force=args.force)
    except scaffold.ScaffoldError as exc:
        raise CliError(str(exc)) from None
    print(f"wrote {len(written)} files in {args.dir}")
    print(f"next:  cd {args.dir} && make dev      (and `make test`; README.md says more)")
    return EXIT_OK


def cmd_tf_module(args: argparse.Namespace) -> int:
    from reclaim.local import tf_module

    try:
        dest = tf_module.copy_module(Path(args.dir))
    except tf_module.ModuleCopyError as exc:
        raise CliError(str(exc)) from None
    print(f"wrote the terraform module of reclaim {tf_module.version()} in {dest}/terraform")
    return EXIT_OK


def cmd_dev(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise CliError(f"{args.dir} is not a folder")
    project = load(root) or Project(root.resolve(), (), root.resolve())
    modules = _modules(args.modules) if args.modules is not None else None
    from reclaim.local import tools

    try:
        tools.require("reclaim dev")
    except tools.MissingTools as exc:
        raise CliError(str(exc)) from None
    named = os.environ.get(MODULES_ENV, "").strip()
    dev_env(project, modules, os.environ, sys.path)
    if args.fresh:
        _forget(Path(os.environ["LOCAL_STORAGE_DIR"]), project)
    from reclaim.local import dev

    follow = modules is None and not named  # the project's list: re-read on every look
    return dev.run([], modules=_project_modules(project.root) if follow else None)


def _project_modules(root: Path) -> Callable[[], tuple[str, ...]]:
    """The project's [tool.reclaim] pipeline_modules as pyproject.toml says now (the last
    readable list while an edit leaves it unreadable)."""
    last: list[tuple[str, ...]] = []

    def now() -> tuple[str, ...]:
        try:
            found = load(root)
        except CliError:
            found = None
        if found is not None:
            last[:] = [found.pipeline_modules]
        return last[0] if last else ()

    return now


def _forget(storage: Path, project: Project) -> None:
    """--fresh: remove the kept buckets (only a folder inside the project's .reclaim/)."""
    if not storage.exists():
        return
    state = (project.root / ".reclaim").resolve()
    if not storage.resolve().is_relative_to(state):
        raise CliError(f"--fresh only empties a folder under {state}; LOCAL_STORAGE_DIR={storage}")
    shutil.rmtree(storage)
    print(f"reclaim dev: --fresh: removed the kept state in {storage}", file=sys.stderr)


def dev_env(
    project: Project,
    modules: Sequence[str] | None,
    env: MutableMapping[str, str],
    path: MutableSequence[str],
) -> None:
    """What `reclaim dev` sets before it starts the local cloud: the modules (a flag wins
    over the environment, which wins over the project), where they import from, and the
    project's own folder for logs and the endpoints file."""
    if modules is not None:
        env[MODULES_ENV] = ",".join(modules)
    project.apply(env, path)
    env["LOCAL_PYTHONPATH"] = str(project.app_dir)
    state = project.root / ".reclaim"
    for var, default in (
        ("LOCAL_LOG_DIR", "logs"),
        ("LOCAL_ENDPOINTS_FILE", "dev.json"),
        ("LOCAL_STORAGE_DIR", "storage"),
    ):
        env[var] = str(project.root / env[var] if env.get(var) else state / default)


def _modules(raw: str) -> list[str]:
    names = [m.strip() for m in raw.split(",") if m.strip()]
    bad = [m for m in names if not _MODULE.fullmatch(m)]
    if bad:
        raise CliError(f"--modules: {bad[0]!r} is not a dotted module name")
    return names
