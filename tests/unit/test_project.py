"""A project of your own (reclaim.cli.project, reclaim.local.scaffold and tf_module): what
`reclaim init` writes and refuses, the [tool.reclaim] table every command reads, what
`reclaim dev` sets before it starts the local cloud, and the terraform module's copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reclaim.cli import main
from reclaim.cli.context import CliError
from reclaim.cli.project import Project, dev_env, load, use_current
from reclaim.local import scaffold, tf_module

ROOT = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_init_writes_a_project_that_names_its_own_package(tmp_path: Path, capsys) -> None:
    assert main(["init", str(tmp_path / "Acme Jobs")]) == 0
    project = tmp_path / "Acme Jobs"
    files = set(_tree(project))
    assert {
        "README.md",
        "Makefile",
        "pyproject.toml",
        ".gitignore",
        "acme_jobs/__init__.py",
        "acme_jobs/hello.py",
        "acme_jobs/schedules.json",
        "tests/conftest.py",
        "tests/test_hello.py",
        "deploy/main.tf",
        "deploy/versions.tf",
        "deploy/variables.tf",
        "deploy/outputs.tf",
        "deploy/terraform.tfvars.example",
        ".reclaim/module/terraform/main.tf",
        ".reclaim/module/shared/queue.py",
        ".reclaim/module/reclaim/VERSION",
    } <= files
    text = "\n".join(v.decode() for k, v in _tree(project).items() if not k.startswith(".reclaim"))
    assert "{{" not in text, "a template token was left unfilled"
    found = load(project)
    assert found == Project(project.resolve(), ("acme_jobs.hello",), project.resolve())
    schedules = json.loads((project / "acme_jobs" / "schedules.json").read_text())
    assert [s["pipeline"] for s in schedules["schedules"]] == ["acme-jobs-hello"]
    assert f'reclaim_version = "{tf_module.version()}"' in (project / "deploy/main.tf").read_text()
    assert "make dev" in capsys.readouterr().out


def test_a_folder_that_is_not_empty_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys
) -> None:
    project = tmp_path / "acme"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    before = _tree(project)
    assert main(["init", str(project)]) == 2
    err = capsys.readouterr().err
    assert "is not empty (notes.txt)" in err and "--force" in err
    assert _tree(project) == before


def test_force_adds_the_files_and_never_overwrites_one(tmp_path: Path) -> None:
    project = tmp_path / "acme"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    written = scaffold.write_project(project, force=True)
    assert (project / "notes.txt").read_text() == "mine"
    assert project / "acme" / "hello.py" in written
    (project / "deploy" / "main.tf").write_text("# edited by hand\n")
    before = _tree(project)
    with pytest.raises(
        scaffold.ScaffoldError, match=r"already has .*README.md.*nothing was written"
    ):
        scaffold.write_project(project, force=True)
    assert _tree(project) == before


@pytest.mark.parametrize(
    ("folder", "package", "reason"),
    [
        ("3d-prints", None, "letters first"),
        ("json", None, "standard library"),
        ("acme", "shared", "collide with reclaim's"),
        ("acme", "Acme-Jobs", "lowercase Python identifier"),
        ("acme", "class", "lowercase Python identifier"),
    ],
)
def test_a_name_that_cannot_be_a_package_is_refused(
    tmp_path: Path, folder: str, package: str | None, reason: str
) -> None:
    with pytest.raises(scaffold.ScaffoldError, match=reason):
        scaffold.write_project(tmp_path / folder, package)
    assert not (tmp_path / folder).exists()


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ('pipeline_modules = "acme.hello"', "list of dotted module names"),
        ('pipeline_modules = ["acme/hello"]', "list of dotted module names"),
        ('app_dir = "src"', "app_dir must name a folder"),
        ("modules = []", "unknown keys"),
    ],
)
def test_a_bad_tool_reclaim_table_is_named(tmp_path: Path, table: str, reason: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.reclaim]\n{table}\n")
    with pytest.raises(CliError, match=reason):
        load(tmp_path)


def test_no_table_is_no_project_and_the_current_folder_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load(tmp_path) is None
    monkeypatch.chdir(tmp_path)
    env: dict[str, str] = {}
    path: list[str] = []
    use_current(env, path)
    assert env == {} and path == [str(tmp_path)]


def test_a_project_lends_its_modules_unless_the_environment_names_some(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.reclaim]\npipeline_modules = ["acme.hello"]\napp_dir = "src"\n'
    )
    project = load(tmp_path)
    assert project is not None
    env: dict[str, str] = {}
    path = ["/elsewhere"]
    project.apply(env, path)
    assert env == {"RECLAIM_PIPELINE_MODULES": "acme.hello"}
    assert path == [str(tmp_path / "src"), "/elsewhere"]
    explicit = {"RECLAIM_PIPELINE_MODULES": "other.mod"}
    project.apply(explicit, path)
    assert explicit["RECLAIM_PIPELINE_MODULES"] == "other.mod" and path.count(path[0]) == 1


def test_dev_serves_the_project_from_its_folder(tmp_path: Path) -> None:
    project = Project(tmp_path, ("acme.hello",), tmp_path / "src")
    env: dict[str, str] = {"RECLAIM_PIPELINE_MODULES": "from.env"}
    dev_env(project, None, env, [])
    assert env["RECLAIM_PIPELINE_MODULES"] == "from.env"  # the environment over the project
    assert env["LOCAL_PYTHONPATH"] == str(tmp_path / "src")
    assert env["LOCAL_LOG_DIR"] == str(tmp_path / ".reclaim" / "logs")
    assert env["LOCAL_ENDPOINTS_FILE"] == str(tmp_path / ".reclaim" / "dev.json")
    flagged = {"LOCAL_LOG_DIR": "my-logs"}
    dev_env(project, ["a.b", "c"], flagged, [])
    assert flagged["RECLAIM_PIPELINE_MODULES"] == "a.b,c"  # a flag over both
    assert flagged["LOCAL_LOG_DIR"] == str(tmp_path / "my-logs")  # relative: the project's


def test_dev_refuses_a_folder_that_does_not_exist(tmp_path: Path, capsys) -> None:
    assert main(["dev", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_the_module_copy_is_the_library_laid_out_as_terraform_reads_it(tmp_path: Path) -> None:
    dest = tf_module.copy_module(tmp_path / "module")
    for tf in (ROOT / "terraform").glob("*.tf"):
        assert (dest / "terraform" / tf.name).read_bytes() == tf.read_bytes()
    shipped = {str(p.relative_to(dest)) for p in dest.rglob("*.py")}
    library = {
        str(p.relative_to(ROOT))
        for folder in ("shared", "functions")
        for p in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert library | {"reclaim/__init__.py", "reclaim/install.py"} == shipped
    assert (dest / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()
    assert (dest / "reclaim" / "VERSION").read_text().strip() == tf_module.version()
    assert not list(dest.rglob("__pycache__")) and not (dest / "terraform" / "build").exists()


def test_the_module_copy_replaces_its_own_and_never_a_folder_it_did_not_write(
    tmp_path: Path, capsys
) -> None:
    dest = tmp_path / "module"
    tf_module.copy_module(dest)
    (dest / "terraform" / "stale.tf").write_text("# from an older reclaim\n")
    assert main(["tf-module", str(dest)]) == 0
    assert not (dest / "terraform" / "stale.tf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["module"]  # no staging left
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "main.tf").write_text("# mine\n")
    capsys.readouterr()
    assert main(["tf-module", str(foreign)]) == 2
    assert "was not written by `reclaim tf-module`" in capsys.readouterr().err
    assert (foreign / "main.tf").read_text() == "# mine\n"
