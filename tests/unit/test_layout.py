"""The layout holds: what import-linter's contracts (pyproject.toml, `make lint`) cannot say.

shared/ keeps at most FLAT_CAP modules directly in it (a new feature gets a room), its
import graph has no circle and at most MAX_LEVELS levels, counting every import (module
level, inside functions, under TYPE_CHECKING: grimp, the graph under import-linter, reads
them all), and the wheel's top-level packages are exactly `reclaim` and `shared`. Each
check is also run on a small package built here that breaks it, so none of them can pass
by reading nothing.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

from tests.unit.test_docs import ROOT

FLAT_CAP = 36
"""Modules directly in shared/ (docs/layout.md: the core; everything else has a room)."""
MAX_LEVELS = 11
"""The longest chain of imports inside shared/, in modules."""


def flat_modules(package: Path) -> list[str]:
    return sorted(p.stem for p in package.glob("*.py") if p.name != "__init__.py")


def import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports, every import counted."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path of imports (the graph has no circle), top module first."""
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            below = [chain(n) for n in sorted(graph.get(node, ())) if n != node]
            best[node] = [node, *max(below, key=len, default=[])]
        return best[node]

    return max((chain(n) for n in sorted(graph)), key=len, default=[])


def top_level_packages() -> set[str]:
    """The wheel's top-level import names, as setup.py lists its packages."""
    listed = runpy.run_path(str(ROOT / "setup.py"), run_name="layout_check")
    return {p.split(".")[0] for p in listed["PACKAGES"]}


# --- the repository


def test_shared_keeps_at_most_the_cap_of_modules_flat() -> None:
    flat = flat_modules(ROOT / "shared")
    assert len(flat) <= FLAT_CAP, f"{len(flat)} modules flat in shared/: give the new ones a room"


def test_shared_has_no_import_circle_counting_every_import() -> None:
    assert circles(import_graph("shared")) == []


def test_shared_is_at_most_max_levels_deep() -> None:
    chain = longest_chain(import_graph("shared"))
    assert len(chain) <= MAX_LEVELS, " -> ".join(chain)


def test_the_wheels_top_level_packages_are_reclaim_and_shared() -> None:
    assert top_level_packages() == {"reclaim", "shared"}


# --- each check fails on a package that breaks it


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[Path]:
    """An importable package `layoutprobe` the test fills; unloaded afterwards."""
    root = tmp_path / "layoutprobe"
    root.mkdir()
    (root / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        yield root
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == "layoutprobe"]:
            del sys.modules[name]


def test_a_module_added_flat_past_the_cap_is_counted(probe: Path) -> None:
    for i in range(FLAT_CAP + 1):
        (probe / f"m{i}.py").write_text("")
    (probe / "room").mkdir()
    (probe / "room" / "__init__.py").write_text("")
    (probe / "room" / "inside.py").write_text("")
    assert len(flat_modules(probe)) == FLAT_CAP + 1  # the room's module is not flat


@pytest.mark.parametrize(
    "closing",
    [
        "def later() -> None:\n    from layoutprobe import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from layoutprobe.a import X\n",
    ],
    ids=["inside a function", "under TYPE_CHECKING"],
)
def test_a_circle_closed_out_of_sight_is_found(probe: Path, closing: str) -> None:
    (probe / "a.py").write_text("from layoutprobe import b\nX = 1\n")
    (probe / "b.py").write_text("from layoutprobe import c\n")
    (probe / "c.py").write_text(closing)
    assert circles(import_graph("layoutprobe")) == [
        ["layoutprobe.a", "layoutprobe.b", "layoutprobe.c"]
    ]


def test_a_chain_deeper_than_the_limit_is_measured(probe: Path) -> None:
    depth = MAX_LEVELS + 1
    for i in range(depth):
        below = f"from layoutprobe import m{i + 1}\n" if i + 1 < depth else ""
        (probe / f"m{i}.py").write_text(below)
    chain = longest_chain(import_graph("layoutprobe"))
    assert len(chain) == depth and chain[0] == "layoutprobe.m0"
