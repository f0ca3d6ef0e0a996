"""`reclaim tf-module DIR`: the terraform module of this installed reclaim, with the
library source its archives carry, copied where a root module can call it.

Terraform calls a module on disk only by a path starting with ./ or ../, and where pip
put reclaim depends on the venv; so a project keeps a copy (``.reclaim/module``) laid
out as this repository is: ``terraform/`` (the module) beside ``shared/``,
``functions/``, ``reclaim/`` (the public API and its VERSION) and
``requirements.txt``, which is where the module looks for the library
(``library_dir`` = the folder above it). The copy is the pin: it is the version pip
installed, and the module refuses any other than its caller's ``reclaim_version``.
docs/library.md, "Deploying".
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from reclaim.install import LIBRARY, part

MARKER = ".reclaim-module"
"""Written in every copy: a folder without it is never replaced."""
API_FILES = ("__init__.py", "install.py", "VERSION", "py.typed")
"""What the function archives carry of the public API package (terraform/functions.tf)."""
_SKIP_DIRS = frozenset({"__pycache__", "build", ".terraform"})
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".tfstate", ".tfvars", ".backup")


class ModuleCopyError(Exception):
    """The copy cannot be written; the message says why and what to do."""


def version() -> str:
    """The installed reclaim's version (reclaim/VERSION, the one source)."""
    return (LIBRARY / "reclaim" / "VERSION").read_text(encoding="utf-8").strip()


def module_source() -> Path:
    """The module's .tf files: package data of the wheel, or this repository's terraform/."""
    candidate = part("terraform")
    if (candidate / "versions.tf").is_file():
        return candidate
    raise ModuleCopyError(f"no terraform module next to the library in {LIBRARY}")


def copy_module(dest: Path) -> Path:
    """Write the copy into `dest` (replacing a copy written before, never anything else);
    returns `dest`. The copy is built beside it and swapped in whole."""
    dest = dest.resolve()
    if dest.exists() and not (dest / MARKER).is_file():
        raise ModuleCopyError(
            f"{dest} exists and was not written by `reclaim tf-module` (no {MARKER}): "
            "move it away or choose another folder"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _fill(staging)
        if dest.exists():
            retired = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            dest.rename(retired)
            staging.rename(dest)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _fill(out: Path) -> None:
    _copy_tree(module_source(), out / "terraform")
    _copy_tree(LIBRARY / "shared", out / "shared")
    _copy_tree(part("functions"), out / "functions")
    (out / "reclaim").mkdir()
    for name in API_FILES:
        shutil.copyfile(LIBRARY / "reclaim" / name, out / "reclaim" / name)
    # the functions' pins: the repository's requirements.txt, which every function
    # folder copies (the wheel carries those copies only)
    pins = LIBRARY / "requirements.txt"
    shutil.copyfile(
        pins if pins.is_file() else part("functions") / "claim" / pins.name,
        out / "requirements.txt",
    )
    (out / MARKER).write_text(
        f"reclaim {version()}: written by `reclaim tf-module`, replaced whole by the next\n",
        encoding="utf-8",
    )


def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and not path.name.endswith(_SKIP_SUFFIXES):
            target = dst / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
