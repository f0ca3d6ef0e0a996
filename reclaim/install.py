"""Where this reclaim's parts are, and the check that the `shared` Python finds is ours.

The wheel installs two top-level packages side by side: `reclaim` (the public API, the
CLI, the local cloud) and `shared` (the library the function archives import by that
name). A user's own `shared/` package earlier on sys.path (a project folder, the current
directory under `python -m` or pytest) would be imported in its place and fail far from
the cause ("No module named 'shared.errors'"); `check_shared` fails at once instead,
naming both folders and the fix. It looks the package up without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent.parent
"""The folder holding reclaim/ and shared/: this repository, or site-packages."""


def part(name: str) -> Path:
    """A folder the wheel carries as package data of reclaim (functions/, terraform/), or
    the repository's top-level folder of that name when running from a checkout."""
    packaged = LIBRARY / "reclaim" / name
    return packaged if packaged.is_dir() else LIBRARY / name


class SharedClashError(ImportError):
    """Another package named `shared` is found before reclaim's own."""


def check_shared() -> None:
    """SharedClashError when `import shared` would not import the library installed beside
    this package (the wheel's or this checkout's)."""
    ours = LIBRARY / "shared"
    spec = importlib.util.find_spec("shared")
    found = _folder(spec)
    if found is None or found == ours.resolve():
        return
    raise SharedClashError(
        f"reclaim needs its own package 'shared' ({ours}), but Python finds another one "
        f"first: {found}. A folder named 'shared' with an __init__.py in your project (or "
        "on PYTHONPATH) hides reclaim's; rename that folder (for example to "
        "'common'), or run from a directory that does not contain it."
    )


def _folder(spec: importlib.machinery.ModuleSpec | None) -> Path | None:
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in"):
        return Path(spec.origin).resolve().parent
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]).resolve() if locations else None
