"""Build each function archive the way terraform/functions.tf does, unpack it, and
import the entry point from the unpacked archive alone: catches a missing shared/
module or a package the code needs that requirements.txt does not bring in. The
deployment's own pipelines (pipelines/, outside the library) ship in every archive;
from the unpacked archive alone, with RECLAIM_PIPELINE_MODULES set, the example
pipeline registers at start, submit accepts and checks its payloads, and its stages
run through the library's pipeline API on the in-memory store."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.terraform.test_tf_config import FUNCTIONS
from tests.terraform.tfhcl import ROOT, config, unquote

_PROBE = """
import json, sys
archive, site, target = sys.argv[1:4]
sys.path[:0] = [archive]
sys.path.append(site)
import main
assert callable(getattr(main, target)), target
print(json.dumps({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}))
"""


def _skip_patterns() -> list[str]:
    return [unquote(s) for s in config()["locals"]["_skip"]]


def _files(base: Path, skip: list[str]) -> dict[str, Path]:
    """fileset(base, "**") minus what terraform's local._skip leaves out."""
    out = {}
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and not any(s in rel for s in skip):
            out[rel] = path
    return out


PIPELINES_DIR = ROOT / "pipelines"  # terraform's default (var.pipelines_dir = "")
EXAMPLE_MODULE = "pipelines.csv_summary"


def archive_members(
    source: str, library: Path = ROOT, pipelines: Path = PIPELINES_DIR
) -> dict[str, Path]:
    """archive path -> file, in terraform's merge order (later entries win); `library`
    is var.library_dir (this repository, or a project's copy of the installed reclaim)."""
    skip = _skip_patterns()
    members = {"requirements.txt": library / "requirements.txt"}
    members.update({f"shared/{k}": v for k, v in _files(library / "shared", skip).items()})
    api = [unquote(f) for f in config()["locals"]["api_files"]]
    members.update({f"reclaim/{f}": library / "reclaim" / f for f in api})
    package = pipelines.name
    members.update({f"{package}/{k}": v for k, v in _files(pipelines, skip).items()})
    members.update(_files(library / "functions" / source, skip))
    return members


def build_archive(source: str, dest: Path, **where: Path) -> Path:
    """The zip terraform's archive_file makes (file() reads each as UTF-8 text)."""
    zpath = dest / f"{source}.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in archive_members(source, **where).items():
            zf.writestr(name, path.read_text(encoding="utf-8"))
    return zpath


def _closure(requirements: Path) -> set[str]:
    """Canonical names of the distributions requirements.txt installs, transitively."""
    todo = [
        Requirement(line.split("#")[0].strip())
        for line in requirements.read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        for sub in metadata.distribution(name).requires or []:
            sub_req = Requirement(sub)
            if sub_req.marker is None or sub_req.marker.evaluate({"extra": ""}):
                todo.append(sub_req)
    return seen


def test_skip_patterns_leave_no_binary_file_in_an_archive() -> None:
    for folder in {src for src, _ in FUNCTIONS.values()}:
        for name, path in archive_members(folder).items():
            assert not fnmatch.fnmatch(name, "*.py[co]"), name
            path.read_text(encoding="utf-8")  # file() in terraform fails on non-UTF-8


def _unpack(folder: str, tmp_path: Path, **where: Path) -> tuple[Path, set[str]]:
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(build_archive(folder, tmp_path, **where)) as zf:
        names = set(zf.namelist())
        zf.extractall(unpacked)
    return unpacked, names


def _run_clean(probe: str, unpacked: Path, tmp_path: Path, *args: str, **env: str) -> str:
    """Run a probe in a clean interpreter that sees only the archive and site-packages.

    -I -S: no PYTHONPATH, no cwd, no .pth files (so not the repo's editable install).
    """
    site = sysconfig.get_paths()["purelib"]
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(unpacked), site, *args],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _assert_loaded_from(modules: dict[str, str | None], unpacked: Path) -> None:
    """Nothing came from the repository checkout: only the archive and site-packages."""
    from_repo = [
        n
        for n, f in modules.items()
        if f and Path(f).is_relative_to(ROOT) and not Path(f).is_relative_to(sys.prefix)
    ]
    assert from_repo == [], f"imported from the repo, not the archive: {from_repo}"


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_entry_point_imports_from_its_archive_alone(function: str, tmp_path: Path) -> None:
    folder, target = FUNCTIONS[function]
    if not (ROOT / "functions" / folder / "main.py").exists():
        pytest.skip(f"functions/{folder}/main.py is not written yet")
    unpacked, names = _unpack(folder, tmp_path)
    assert {"main.py", "requirements.txt", "shared/__init__.py"} <= names
    site = sysconfig.get_paths()["purelib"]
    modules: dict[str, str | None] = json.loads(
        _run_clean(_PROBE, unpacked, tmp_path, target, RECLAIM_PIPELINE_MODULES=EXAMPLE_MODULE)
    )
    assert EXAMPLE_MODULE in modules, "the entry point did not import RECLAIM_PIPELINE_MODULES"
    _assert_loaded_from(modules, unpacked)
    assert Path(modules["shared"] or "").is_relative_to(unpacked)
    assert Path(modules[EXAMPLE_MODULE] or "").is_relative_to(unpacked)

    allowed = _closure(unpacked / "requirements.txt")
    by_module = metadata.packages_distributions()
    missing = set()
    for name, file in modules.items():
        if file and Path(file).is_relative_to(site) and "." not in name:
            dists = {canonicalize_name(d) for d in by_module.get(name, [])}
            if dists and not dists & allowed:
                missing.add(f"{name} ({', '.join(sorted(dists))})")
    assert missing == set(), f"imported but not brought in by requirements.txt: {missing}"


# --- your own pipelines -------------------------------------------------------------------

_PIPELINE_PROBE = r"""
import json, os, sys
archive, site, target = sys.argv[1:4]
sys.path[:0] = [archive]
sys.path.append(site)
import main  # the function's start imports RECLAIM_PIPELINE_MODULES
assert callable(getattr(main, target)), target
assert "pipelines.csv_summary" in sys.modules, "not imported at start"

from shared.queue import parse_submission
from shared.config import Settings
from shared.logs import JobLogger
from shared.pipelines import StageContext, get_pipeline
from shared.stores.memory import MemoryStore
from shared.submission.create import InvalidSubmission

settings = Settings.from_env()
pipeline = get_pipeline("csv-summary")
payload = {"bucket": "acme-uploads", "name": "sales/2026-11.csv"}

# submit: the name is known and the payload is checked by the pipeline's validator
parse_submission({"pipeline": "csv-summary", "payload": payload}, settings)
try:
    parse_submission({"pipeline": "csv-summary", "payload": {"bucket": "b"}}, settings)
except InvalidSubmission as exc:
    refused = exc.reason
else:
    raise AssertionError("a payload without a name was accepted")

# claim: the stages, in order, over one context, on the in-memory store
store = MemoryStore()
csv_bytes = b"region,amount,note\nnorth,10,first\nsouth,32.5,\n,-4,last\n"
store.put_object("acme-uploads", "sales/2026-11.csv", csv_bytes, "text/csv")


class Outputs:
    def write(self, name, data, content_type=None):
        body = json.dumps(data, sort_keys=True).encode()
        return store.write_output("job-1", 1, name, body, content_type or "application/json")


ctx = StageContext("job-1", payload, {}, 1, JobLogger("job-1"), Outputs(), store)
stages = [name for name, _ in pipeline.stages_for(payload)]
for _name, stage in pipeline.stages_for(payload):
    stage(ctx)
summary = json.loads(store.raw(store.bucket_name, ctx.result["summary"]).data)
print(json.dumps({
    "stages": stages,
    "refused": refused,
    "result": ctx.result,
    "summary": summary,
    "modules": {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())},
}))
"""


def test_every_archive_carries_your_pipelines_folder() -> None:
    ours = {f"pipelines/{k}" for k in _files(PIPELINES_DIR, _skip_patterns())}
    assert {"pipelines/__init__.py", "pipelines/csv_summary.py"} <= ours
    for folder in {src for src, _ in FUNCTIONS.values()}:
        assert ours <= set(archive_members(folder)), folder


@pytest.mark.parametrize("function", ["claim", "submit"])
def test_your_pipeline_registers_and_runs_from_the_archive_alone(
    function: str, tmp_path: Path
) -> None:
    folder, target = FUNCTIONS[function]
    unpacked, names = _unpack(folder, tmp_path)
    assert {"pipelines/__init__.py", "pipelines/csv_summary.py", "main.py"} <= names
    out = json.loads(
        _run_clean(
            _PIPELINE_PROBE, unpacked, tmp_path, target, RECLAIM_PIPELINE_MODULES=EXAMPLE_MODULE
        )
    )
    _assert_loaded_from(out["modules"], unpacked)
    assert Path(out["modules"][EXAMPLE_MODULE]).is_relative_to(unpacked)
    assert out["stages"] == ["profile", "report"]
    assert "payload.name must be a non-empty string" in out["refused"]
    assert out["result"] == {"summary": "outputs/job-1/1/summary.json", "rows": 3, "columns": 3}
    columns = {c["name"]: c for c in out["summary"]["columns"]}
    assert columns["amount"] == {
        "name": "amount",
        "filled": 3,
        "empty": 0,
        "numeric": 3,
        "min": -4.0,
        "max": 32.5,
        "mean": 38.5 / 3,
    }
    assert columns["region"]["filled"] == 2 and columns["region"]["empty"] == 1
    assert columns["region"]["numeric"] == 0 and "mean" not in columns["region"]
    assert columns["note"]["empty"] == 1
    assert out["summary"]["source"] == "gs://acme-uploads/sales/2026-11.csv"


def test_without_the_setting_the_archive_does_not_know_your_pipeline(tmp_path: Path) -> None:
    """The pipeline is registered by RECLAIM_PIPELINE_MODULES, not by being present."""
    unpacked, _names = _unpack("claim", tmp_path)
    probe = (
        "import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2]); import main\n"
        "from shared.pipelines import pipeline_names\n"
        "print(sorted(pipeline_names()), 'pipelines.csv_summary' in sys.modules)"
    )
    assert _run_clean(probe, unpacked, tmp_path) == "['demo', 'upload-digest', 'webhook'] False"


_OPENAPI_PROBE = r"""
import json, sys
archive, site = sys.argv[1:3]
sys.path[:0] = [archive]
sys.path.append(site)
import flask
import main

with flask.Flask("probe").test_request_context("/openapi.json"):
    answer = main.submit(flask.request)
print(json.dumps({"status": answer.status_code, "document": answer.get_json()}))
"""


def test_submit_serves_its_openapi_document_from_the_archive_alone(tmp_path: Path) -> None:
    folder, _target = FUNCTIONS["submit"]
    unpacked, names = _unpack(folder, tmp_path)
    assert "shared/openapi.json" in names
    out = json.loads(_run_clean(_OPENAPI_PROBE, unpacked, tmp_path))
    assert out["status"] == 200
    assert out["document"] == json.loads((ROOT / "shared" / "openapi.json").read_text())


_SCHEDULES_PROBE = r"""
import json, sys
archive, site = sys.argv[1:3]
sys.path[:0] = [archive]
sys.path.append(site)
from shared.cron import schedules

path = schedules.schedules_file()
print(json.dumps({"path": str(path), "names": [s.name for s in schedules.load(path)]}))
"""


def test_the_function_reads_the_schedules_file_terraform_made_the_jobs_from(
    tmp_path: Path,
) -> None:
    """RECLAIM_SCHEDULES_FILE as terraform sets it, resolved inside the archive whatever
    the working directory (the probe runs from elsewhere)."""

    setting = unquote(config()["locals"]["reclaim_env"]["RECLAIM_SCHEDULES_FILE"])
    value = setting.replace("${local.pipelines_package}", PIPELINES_DIR.name)
    unpacked, names = _unpack(FUNCTIONS["submit"][0], tmp_path)
    assert value in names  # shipped
    out = json.loads(_run_clean(_SCHEDULES_PROBE, unpacked, tmp_path, RECLAIM_SCHEDULES_FILE=value))
    assert out["path"] == str(unpacked / value)
    shipped = json.loads((PIPELINES_DIR / "schedules.json").read_text())
    assert out["names"] == [s["name"] for s in shipped["schedules"]]


# --- a project of your own: the installed library's copy plus your package ------------

_PROJECT_PROBE = r"""
import json, sys
archive, site, target = sys.argv[1:4]
sys.path[:0] = [archive]
sys.path.append(site)
import main  # imports RECLAIM_PIPELINE_MODULES at start
assert callable(getattr(main, target)), target
from reclaim import StageContext, get_pipeline
from shared.logs import JobLogger
from shared.stores.memory import MemoryStore

store = MemoryStore()
class Outputs:
    def write(self, name, data, content_type=None):
        body = json.dumps(data).encode()
        return store.write_output("job-1", 1, name, body, content_type or "application/json")

pipeline = get_pipeline("acme-hello")
try:
    pipeline.check_payload({"name": ""})
except ValueError as exc:
    refused = str(exc)
ctx = StageContext("job-1", {"name": "Ada"}, {}, 1, JobLogger("job-1"), Outputs(), store)
for _name, stage in pipeline.stages_for(ctx.payload):
    stage(ctx)
print(json.dumps({
    "refused": refused,
    "result": ctx.result,
    "modules": {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())},
}))
"""


def test_a_scaffolded_projects_archive_runs_its_pipeline_on_the_copied_library(
    tmp_path: Path,
) -> None:
    """`reclaim init`'s deploy/ archives the copy `reclaim tf-module` wrote (var.library_dir
    defaults to the folder above the module) plus the project's package."""
    from reclaim.local import scaffold

    project = tmp_path / "acme"
    scaffold.write_project(project)
    library = project / scaffold.MODULE_COPY
    unpacked, names = _unpack("claim", tmp_path, library=library, pipelines=project / "acme")
    assert {
        "reclaim/__init__.py",
        "reclaim/install.py",
        "reclaim/VERSION",
        "acme/hello.py",
        "acme/schedules.json",
    } <= names
    out = json.loads(
        _run_clean(
            _PROJECT_PROBE, unpacked, tmp_path, "claim", RECLAIM_PIPELINE_MODULES="acme.hello"
        )
    )
    _assert_loaded_from(out["modules"], unpacked)
    for module in ("reclaim", "shared", "acme.hello"):
        assert Path(out["modules"][module]).is_relative_to(unpacked), module
    assert "payload.name must be a non-empty string" in out["refused"]
    assert out["result"] == {"greeting": "Hello, Ada!", "report": "outputs/job-1/1/greeting.json"}
