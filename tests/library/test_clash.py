"""A project whose own folders share reclaim's old top-level names.

The wheel installs `reclaim` and `shared` only (the CLI and the local cloud live under
reclaim), so a project's own `local/` package no longer hides anything: `make dev` and
`make test` run with it there (its __init__ raises, so any import of it would show). A
`shared/` folder of data (no __init__.py) is a namespace portion, which never wins over
the installed package. A `shared/` package of the project's own does hide reclaim's
library; then every entry gives the one error that names both folders and the fix
(reclaim.install.check_shared), never "No module named 'shared.errors'".
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.library.test_install import _endpoints, _user_env
from tests.polling import wait_for

pytestmark = pytest.mark.slow

UNIMPORTABLE = 'raise ImportError("the project\'s own package was imported")\n'


def _project(installed: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = _user_env(installed, tmp_path)
    subprocess.run(
        [str(installed / "reclaim"), "init", "acme-jobs"], cwd=tmp_path, env=env, check=True
    )
    return tmp_path / "acme-jobs", env


def test_a_projects_own_local_package_and_shared_folder_leave_dev_and_test_working(
    installed: Path, tmp_path: Path
) -> None:
    project, env = _project(installed, tmp_path)
    (project / "local").mkdir()
    (project / "local" / "__init__.py").write_text(UNIMPORTABLE)
    (project / "local" / "dev.py").write_text(UNIMPORTABLE)
    (project / "shared").mkdir()
    (project / "shared" / "errors.txt").write_text("the project's own data\n")

    ran = subprocess.run(
        ["make", "-s", "test"], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "4 passed" in ran.stdout  # the scaffold's tests, as test_install's make test

    log = (tmp_path / "dev.log").open("w")
    dev = subprocess.Popen(
        ["make", "-s", "dev"],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        doc = wait_for(
            "make dev to write its endpoints",
            lambda: _endpoints(project / ".reclaim" / "dev.json", dev),  # type: ignore[arg-type]
        )
        assert doc["endpoints"]["jobs"].startswith("http://")
    finally:
        os.killpg(dev.pid, signal.SIGTERM)
        dev.wait(timeout=60)
        log.close()


def test_a_projects_own_shared_package_gets_the_one_clear_error(
    installed: Path, tmp_path: Path
) -> None:
    project, env = _project(installed, tmp_path)
    (project / "shared").mkdir()
    (project / "shared" / "__init__.py").write_text("")
    library = installed.parent / "lib"
    for command in (["make", "-s", "test"], ["make", "-s", "dev"]):
        ran = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        out = ran.stdout + ran.stderr
        assert ran.returncode != 0, out[-2000:]
        assert "reclaim needs its own package 'shared'" in out, out[-3000:]
        assert str(project / "shared") in out and str(library) in out, out[-3000:]
        assert "No module named 'shared." not in out
