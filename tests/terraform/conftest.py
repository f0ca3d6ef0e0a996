"""The root module of a project `reclaim init` writes, for the checks of both callers of
the module (test_tf_roots.py, test_tf_checkov.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def project_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deploy/ of a project `reclaim init` just wrote (with its module copy)."""
    from reclaim.local import scaffold

    project = tmp_path_factory.mktemp("init") / "acme"
    scaffold.write_project(project)
    return project / "deploy"
