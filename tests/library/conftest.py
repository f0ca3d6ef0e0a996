"""One built wheel and one fresh venv with it installed, outside the repository, shared
by the tests of this folder (building and installing take a minute or two)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pin(name: str) -> str:
    """The dev set's pin of a package (the scaffold's tests need pytest)."""
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.strip()
    raise AssertionError(f"{name} is not pinned in requirements-dev.txt")


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make wheel` on a copy of the tracked tree (no stray build/ or caches of the
    checkout can leak in, and the checkout is left untouched)."""
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "src"
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT)
    for rel in filter(None, listed.stdout.split("\0")):
        source = ROOT / rel
        if source.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / rel)
    _run(
        ["make", "-s", "wheel", f"PYTHON={sys.executable}", f"DIST={base / 'dist'}"],
        cwd=tree,
        timeout=600,
    )
    (built,) = (base / "dist").glob("reclaim-*.whl")
    return built


APP_HOLDS = ("google-auth==2.59.1", "google-cloud-storage==3.15.1")
"""What the user's app already has in its venv before it installs reclaim: other minor
versions than requirements.txt pins (the floors pyproject.toml declares)."""
CLIENT_APP_HOLDS = ("google-auth==2.59.1", "requests==2.32.4")
"""The same for an app that installs the client (client/pyproject.toml's floors)."""


def versions(bin_dir: Path, *names: str) -> dict[str, str]:
    """name -> the version installed in that venv."""
    code = (
        "import sys, importlib.metadata as m; "
        "print('\\n'.join(n + '==' + m.version(n) for n in sys.argv[1:]))"
    )
    out = _run([str(bin_dir / "python"), "-c", code, *names]).stdout.split()
    return dict(line.split("==") for line in out)


def _venv(home: Path, holds: tuple[str, ...]) -> Path:
    """A fresh venv already holding an app's versions: its bin/."""
    venv.EnvBuilder(with_pip=True).create(home / "venv")
    bin_dir = home / "venv" / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *holds], timeout=900)
    return bin_dir


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv that already held other minor versions of the wheel's dependencies (an
    app's, APP_HOLDS), then got the wheel with its local cloud (`[dev]`) and pytest: its
    bin/. The app's versions stay (tests/library/test_install.py checks)."""
    home = tmp_path_factory.mktemp("user")
    bin_dir = _venv(home, APP_HOLDS)
    _run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            f"{wheel}[dev]",
            _pin("pytest"),
        ],
        cwd=home,
        timeout=900,
    )
    return bin_dir


@pytest.fixture(scope="session")
def client_installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding an app's requests and google-auth (CLIENT_APP_HOLDS), then the
    client (./client of the same tree the wheel was built from): its bin/."""
    home = tmp_path_factory.mktemp("app")
    bin_dir = _venv(home, CLIENT_APP_HOLDS)
    client = wheel.parent.parent / "src" / "client"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(client)], timeout=900)
    return bin_dir
