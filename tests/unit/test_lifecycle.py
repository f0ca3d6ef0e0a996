"""shared.lifecycle installs every feature's hooks and gates into shared.finish and
shared.gates: each module that ends or claims jobs imports it, checked in a fresh
interpreter (an import here would hide a module that forgot)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shared import finish, gates, lifecycle
from tests.unit.test_docs import ROOT

CHECK = (
    "import importlib, sys; importlib.import_module(sys.argv[1]); "
    "from shared import finish, gates, lifecycle; "
    "assert finish.HOOKS is lifecycle.HOOKS and gates.GATES is lifecycle.GATES; "
    "assert finish.REQUEUE_HOOKS is lifecycle.REQUEUE_HOOKS"
)


@pytest.mark.parametrize(
    "module",
    [
        "shared.claim.runner",
        "shared.recovery",
        "shared.control",
        "shared.sweeper",
        "shared.submission",
        "shared.delayed",
        "shared.queue",
    ],
)
def test_a_module_that_ends_or_claims_jobs_installs_them(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, module], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_them_nothing_ends_blind_and_nothing_is_claimed(monkeypatch) -> None:
    from shared.storage_memory import MemoryStore

    monkeypatch.setattr(finish, "HOOKS", None)
    store = MemoryStore()
    store.add_pending("j1")
    assert finish.after_terminal(store, None, {"id": "j1", "status": "done"}) is False
    assert store.names("pending/") == ["pending/j1"]  # left for the sweep
    monkeypatch.setattr(gates, "GATES", None)
    with pytest.raises(RuntimeError, match="lifecycle"):
        gates.check(None)  # type: ignore[arg-type]


def test_install_keeps_what_is_installed(monkeypatch) -> None:
    mine = (lambda store, bell, record: None,)
    monkeypatch.setattr(finish, "HOOKS", mine)
    lifecycle.install()
    assert finish.HOOKS is mine and gates.GATES is lifecycle.GATES
