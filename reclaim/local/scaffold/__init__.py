"""`reclaim init DIR`: a new project that depends on reclaim instead of living in it.

The files are the templates beside this module (``template/``, each ending in
``.tmpl``; ``package/`` becomes your package's folder), with ``{{name}}``,
``{{package}}``, ``{{pipeline}}`` and ``{{version}}`` filled in, plus the terraform
module's copy (``.reclaim/module``, reclaim.local.tf_module). Everything is checked before
the first write: a folder that is not empty is refused unless ``force``, and even then
no existing file is overwritten. docs/library.md lists what it writes.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

from reclaim.local import tf_module

TEMPLATE = Path(__file__).resolve().parent / "template"
MODULE_COPY = Path(".reclaim") / "module"
"""Where the project keeps the terraform module's copy (its root module's source)."""
RESERVED = frozenset({"reclaim", "shared", "local", "functions", "tests", "deploy"})
"""Package names the project cannot take: the wheel's top-level packages, and the
project's own tests/ and deploy/ folders."""
_SLUG = re.compile(r"[^a-z0-9]+")


class ScaffoldError(Exception):
    """The project cannot be written; nothing was. The message says why."""


def names(dest: Path, package: str | None = None) -> dict[str, str]:
    """The values filled into the templates: the project's name (from its folder), its
    package (a Python identifier), its example pipeline, the reclaim version it pins."""
    name = _SLUG.sub("-", dest.resolve().name.lower()).strip("-")
    if not name or not name[0].isalpha():
        raise ScaffoldError(
            f"{dest.name!r} does not give a project name (letters first): rename the folder"
        )
    package = package or name.replace("-", "_")
    if not package.isidentifier() or keyword.iskeyword(package) or not package.islower():
        raise ScaffoldError(f"--package {package!r} must be a lowercase Python identifier")
    if package in RESERVED or package in sys.stdlib_module_names:
        raise ScaffoldError(
            f"a package named {package!r} would collide with "
            + ("the standard library" if package in sys.stdlib_module_names else "reclaim's")
            + "; choose another with --package"
        )
    return {
        "name": name,
        "package": package,
        "pipeline": f"{name}-hello",
        "version": tf_module.version(),
    }


def plan(dest: Path, package: str | None = None) -> dict[Path, str]:
    """Every file to write (relative path -> text), templates filled in."""
    values = names(dest, package)
    out: dict[Path, str] = {}
    for path in sorted(TEMPLATE.rglob("*.tmpl")):
        rel = path.relative_to(TEMPLATE).with_suffix("")
        if rel.parts[0] == "package":
            rel = Path(values["package"], *rel.parts[1:])
        if rel.name == "gitignore":  # a dot-file in the wheel is easy to lose: named plainly
            rel = rel.with_name(".gitignore")
        text = path.read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        out[rel] = text
    return out


def write_project(dest: Path, package: str | None = None, *, force: bool = False) -> list[Path]:
    """Write the project into `dest`; the files written. ScaffoldError, with nothing
    written, for a folder that is not empty (without force), a file that already exists,
    or a name that cannot be a package."""
    if dest.exists() and not dest.is_dir():
        raise ScaffoldError(f"{dest} exists and is not a folder")
    files = plan(dest, package)
    present = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
    if present and not force:
        shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
        raise ScaffoldError(
            f"{dest} is not empty ({shown}); pass --force to add the project's files to it "
            "(an existing file is never overwritten)"
        )
    clashes = [str(rel) for rel in [*files, MODULE_COPY] if (dest / rel).exists()]
    if clashes:
        raise ScaffoldError(f"{dest} already has {', '.join(clashes)}: nothing was written")
    written = []
    for rel, text in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    tf_module.copy_module(dest / MODULE_COPY)
    return written
