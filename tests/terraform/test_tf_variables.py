"""Variable validations, evaluated: python-hcl2 parses each condition and hcl_eval
runs it on good and bad values. Where a terraform binary is on PATH, the same
cases also go through a real `terraform plan` of variables.tf alone, which proves
the evaluator reads the conditions as terraform does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.terraform.hcl_eval import EvalError, evaluate
from tests.terraform.tfhcl import TF_DIR, config, optional_defaults, unquote, variable_default

PUSHES = ("claim_push", "submit_upload_push")

# (variable, override of its fields, accepted?)
CASES: list[tuple[str, Any, bool]] = [
    *[
        case
        for push in PUSHES
        for case in [
            (push, {}, True),
            (push, {"minimum_backoff": "0s", "maximum_backoff": "0s"}, True),
            (push, {"minimum_backoff": "0s", "maximum_backoff": "600s"}, True),
            (push, {"minimum_backoff": "2.5s", "maximum_backoff": "2.5s"}, True),
            (push, {"minimum_backoff": "601s"}, False),  # above 600 s
            (push, {"maximum_backoff": "600.5s"}, False),
            (push, {"maximum_backoff": "900s"}, False),
            (push, {"minimum_backoff": "-1s"}, False),  # below 0 s
            (push, {"minimum_backoff": "10"}, False),  # not a duration
            (push, {"maximum_backoff": "10m"}, False),
            (push, {"minimum_backoff": "ten s"}, False),
            (push, {"minimum_backoff": "60s", "maximum_backoff": "30s"}, False),  # min > max
            (push, {"minimum_backoff": "600s", "maximum_backoff": "599.9s"}, False),
        ]
    ],
    ("soft_delete_days", {"records": 0, "uploads": 0}, True),
    ("soft_delete_days", {"records": 90}, True),
    ("soft_delete_days", {"records": 3}, False),  # 0 or 7..90 days
    ("soft_delete_days", {"uploads": 91}, False),
    ("soft_delete_days", {"records": 7.5}, False),
    ("iam_propagation_seconds", 0, True),
    ("record_shards", 1, True),
    ("record_shards", 4, True),
    ("record_shards", 0, False),
    ("record_shards", 65, False),
    ("record_shards", 1.5, False),
    ("iam_propagation_seconds", 901, False),
    ("iam_propagation_seconds", -1, False),
    ("pipelines_dir", "../acme_jobs", True),
    ("pipelines_dir", "/srv/pipelines/", True),
    ("pipelines_dir", "../my-pipelines", False),  # not an importable package name
    ("pipelines_dir", "../shared", False),  # would shadow the library
    ("pipelines_dir", "../reclaim", False),  # would shadow the public API
    ("reclaim_version", "", True),  # any
    ("reclaim_version", "0.9.0", True),
    ("reclaim_version", "1.10.2rc1", True),
    ("reclaim_version", "v0.9", False),
    ("schedules_file", "../acme/schedules.json", True),
    ("schedules_file", "../acme/schedules.yaml", False),
    ("uploads_file", "/srv/acme/uploads.json", True),
    ("uploads_file", "uploads", False),
    ("submit_function", {"timeout_seconds": 3601}, False),
    ("submit_function", {"timeout_seconds": 180}, True),
]


def _value(variable: str, override: Any) -> Any:
    """The variable's value as terraform sees it: object defaults filled in."""
    if isinstance(override, dict):
        return {**optional_defaults(variable), **override}
    return override


def _conditions(variable: str) -> list[str]:
    return [unquote(v["condition"]) for v in config()["variable"][variable]["validation"]]


def accepted(variable: str, override: Any) -> bool:
    """Every validation of the module's variable passes for this value."""
    results = [evaluate(c, {variable: _value(variable, override)}) for c in _conditions(variable)]
    assert all(isinstance(r, bool) for r in results), results
    return all(results)


@pytest.mark.parametrize(("variable", "override", "ok"), CASES)
def test_validation(variable: str, override: Any, ok: bool) -> None:
    assert accepted(variable, override) is ok


def test_every_backoff_of_both_pushes_is_validated() -> None:
    for push in PUSHES:
        fields = optional_defaults(push)
        assert {"minimum_backoff", "maximum_backoff"} <= set(fields)
        conditions = " ".join(_conditions(push))
        for field in ("minimum_backoff", "maximum_backoff"):
            assert conditions.count(f"var.{push}.{field}") >= 2, f"{push}.{field}"
        # each field alone out of range is refused (not only when both are)
        for field in ("minimum_backoff", "maximum_backoff"):
            assert not accepted(push, {field: "601s"}), f"{push}.{field}"


def test_every_default_passes_every_validation() -> None:
    for name, var in config()["variable"].items():
        if "validation" not in var:
            continue
        default = unquote(var.get("default"))
        value = "my-project-1" if name == "project_id" else default
        value = _value(name, value) if isinstance(value, dict) else value
        if isinstance(value, list):  # a list of strings, as python-hcl2 quotes them
            value = [v.strip('"') if isinstance(v, str) else v for v in value]
        for condition in _conditions(name):
            assert evaluate(condition, {name: value}) is True, (name, condition)


def test_the_evaluator_refuses_what_it_does_not_know() -> None:
    with pytest.raises(EvalError):
        evaluate('tonumber("ten")', {})
    assert evaluate('can(regex("^a$", "b"))', {}) is False
    assert evaluate('try(tonumber("x"), -1) == -1', {}) is True
    assert evaluate('false && can(tonumber("x"))', {}) is False


# --- the same cases through terraform itself, when a binary is at hand -------------------


def _terraform() -> str | None:
    return os.environ.get("RECLAIM_TERRAFORM") or shutil.which("terraform")


def _hcl(value: Any) -> str:
    """A value as an HCL literal for -var."""
    return json.dumps(value) if not isinstance(value, str) else json.dumps(value)[1:-1]


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = _terraform()
    if binary is None:
        pytest.skip("no terraform binary on PATH: the evaluator above is the check here")
    work = tmp_path_factory.mktemp("variables")
    shutil.copy(TF_DIR / "variables.tf", work / "variables.tf")
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "CHECKPOINT_DISABLE": "1"}
    subprocess.run(
        [binary, "init", "-backend=false", "-input=false"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return work


@pytest.mark.parametrize(("variable", "override", "ok"), CASES)
def test_terraform_agrees(plan_dir: Path, variable: str, override: Any, ok: bool) -> None:
    binary = _terraform()
    assert binary is not None
    args = ["-var", "project_id=my-project-1", "-var", f"{variable}={_hcl(override)}"]
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "CHECKPOINT_DISABLE": "1"}
    proc = subprocess.run(
        [binary, "plan", "-input=false", "-no-color", "-lock=false", *args],
        cwd=plan_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:
        assert proc.returncode != 0 and "Invalid value for variable" in proc.stderr, proc.stderr
    assert variable_default("name_prefix")  # variables.tf parsed by both readers
