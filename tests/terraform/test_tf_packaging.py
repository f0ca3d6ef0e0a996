"""Build each function archive the way terraform/functions.tf does, unpack it, and
import the entry point from the unpacked archive alone: catches a missing shared/
module or a package the code needs that requirements.txt does not bring in."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.terraform.test_tf_config import FUNCTIONS
from tests.terraform.tfhcl import ROOT, config, unquote

_PROBE = """
import json, sys
archive, site, target = sys.argv[1:4]
sys.path[:0] = [archive]
sys.path.append(site)
import main
assert callable(getattr(main, target)), target
print(json.dumps({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}))
"""


def _skip_patterns() -> list[str]:
    return [unquote(s) for s in config()["locals"]["_skip"]]


def _files(base: Path, skip: list[str]) -> dict[str, Path]:
    """fileset(base, "**") minus what terraform's local._skip leaves out."""
    out = {}
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and not any(s in rel for s in skip):
            out[rel] = path
    return out


def archive_members(source: str) -> dict[str, Path]:
    """archive path -> file, in terraform's merge order (later entries win)."""
    skip = _skip_patterns()
    members = {"requirements.txt": ROOT / "requirements.txt"}
    members.update({f"shared/{k}": v for k, v in _files(ROOT / "shared", skip).items()})
    members.update(_files(ROOT / "functions" / source, skip))
    return members


def build_archive(source: str, dest: Path) -> Path:
    """The zip terraform's archive_file makes (file() reads each as UTF-8 text)."""
    zpath = dest / f"{source}.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in archive_members(source).items():
            zf.writestr(name, path.read_text(encoding="utf-8"))
    return zpath


def _closure(requirements: Path) -> set[str]:
    """Canonical names of the distributions requirements.txt installs, transitively."""
    todo = [
        Requirement(line.split("#")[0].strip())
        for line in requirements.read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        for sub in metadata.distribution(name).requires or []:
            sub_req = Requirement(sub)
            if sub_req.marker is None or sub_req.marker.evaluate({"extra": ""}):
                todo.append(sub_req)
    return seen


def test_skip_patterns_leave_no_binary_file_in_an_archive() -> None:
    for folder in {src for src, _ in FUNCTIONS.values()}:
        for name, path in archive_members(folder).items():
            assert not fnmatch.fnmatch(name, "*.py[co]"), name
            path.read_text(encoding="utf-8")  # file() in terraform fails on non-UTF-8


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_entry_point_imports_from_its_archive_alone(function: str, tmp_path: Path) -> None:
    folder, target = FUNCTIONS[function]
    if not (ROOT / "functions" / folder / "main.py").exists():
        pytest.skip(f"functions/{folder}/main.py is not written yet")
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(build_archive(folder, tmp_path)) as zf:
        names = set(zf.namelist())
        zf.extractall(unpacked)
    assert {"main.py", "requirements.txt", "shared/__init__.py"} <= names
    site = sysconfig.get_paths()["purelib"]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    # -I -S: no PYTHONPATH, no cwd, no .pth files (so not the repo's editable install)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(unpacked), site, target],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules: dict[str, str | None] = json.loads(proc.stdout.strip().splitlines()[-1])

    from_repo = [
        n
        for n, f in modules.items()
        if f and Path(f).is_relative_to(ROOT) and not Path(f).is_relative_to(sys.prefix)
    ]
    assert from_repo == [], f"imported from the repo, not the archive: {from_repo}"
    assert Path(modules["shared"] or "").is_relative_to(unpacked)

    allowed = _closure(unpacked / "requirements.txt")
    by_module = metadata.packages_distributions()
    missing = set()
    for name, file in modules.items():
        if file and Path(file).is_relative_to(site) and "." not in name:
            dists = {canonicalize_name(d) for d in by_module.get(name, [])}
            if dists and not dists & allowed:
                missing.add(f"{name} ({', '.join(sorted(dists))})")
    assert missing == set(), f"imported but not brought in by requirements.txt: {missing}"
