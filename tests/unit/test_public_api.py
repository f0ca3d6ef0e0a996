"""The public API (`reclaim`): every name it lists resolves, each is the library's own
object, its version is the one in reclaim/VERSION, and what a pipeline author reads
(the README's example, the scaffold's templates) imports from `reclaim` alone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import reclaim
import shared.errors
import shared.pipelines

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "reclaim" / "local" / "scaffold" / "template"


def test_every_name_in_all_resolves_to_the_librarys_object() -> None:
    for name in reclaim.__all__:
        assert hasattr(reclaim, name), name
        if name == "__version__":
            continue
        origin = getattr(shared.pipelines, name, None) or getattr(shared.errors, name)
        assert getattr(reclaim, name) is origin, name
    assert {"Pipeline", "Stage", "StageContext", "register", "PermanentError", "Stopped"} <= set(
        reclaim.__all__
    )


def test_the_version_is_one_file_read_by_the_package_the_wheel_and_terraform() -> None:
    version = (ROOT / "reclaim" / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert reclaim.__version__ == version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "reclaim/VERSION"}
    assert (
        'file("${local.repo_root}/reclaim/VERSION")' in (ROOT / "terraform" / "main.tf").read_text()
    )
    assert (ROOT / "reclaim" / "py.typed").exists()
    assert f"dist/reclaim-{version}-py3-none-any.whl" in (ROOT / "README.md").read_text()


def _imports(text: str) -> set[str]:
    return set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", text, re.MULTILINE))


def test_what_a_pipeline_author_reads_imports_from_reclaim_only() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    authored = [e for e in examples if "register(" in e]
    assert authored, "the README shows no pipeline"
    for text in [*authored, *(p.read_text() for p in TEMPLATES.rglob("*.py.tmpl"))]:
        ours = {
            m
            for m in _imports(text)
            if m.split(".")[0] in {"shared", "functions"} or m.startswith("reclaim.cli")
        }
        assert ours == set(), ours
    assert "from reclaim import" in (TEMPLATES / "package" / "hello.py.tmpl").read_text()
