"""The client installs on its own: a fresh venv, pip install of the client's folder
(only its own pinned dependencies), then it imports, and the functions' libraries are
not there."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_installs_into_a_fresh_venv_with_only_its_dependencies(tmp_path: Path) -> None:
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(ROOT / "client")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = (
        "import importlib.util\n"
        "from reclaim_client import Client, NotFound\n"
        "Client('http://localhost:1')\n"
        "found = ('flask', 'functions_framework', 'google.cloud', 'shared')\n"
        "print([m for m in found if importlib.util.find_spec(m) is not None])\n"
    )
    ran = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]", ran.stdout  # none of the functions' libraries came along
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"reclaim-client", "google-auth", "requests"} <= names
    assert len(names) <= 14, names  # pip, google-auth, requests and their few dependencies
