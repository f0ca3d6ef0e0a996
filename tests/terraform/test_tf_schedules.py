"""terraform/schedules.tf read with python-hcl2: the cron jobs refuse, at plan, what Cloud
Scheduler refuses (the same dialect as shared/cron/dialect.py), each precondition names
the entry, and the functions are told the file terraform read."""

from __future__ import annotations

import re

import pytest

from shared.cron import dialect as cron_dialect
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import block, config, resources, unquote


def _hcl_string(value: str) -> str:
    """A quoted HCL literal as the string terraform sees (\\\\ -> \\)."""
    return unquote(value).replace("\\\\", "\\")


def _terraform_pattern() -> str:
    """local.cron_pattern as terraform computes it: join(" ", replace(template, "@A", a))."""
    locals_ = config()["locals"]
    expr = unquote(locals_["cron_pattern"])
    assert (
        'join(" ", [for a in local.cron_atoms : replace(local.cron_field_template, "@A", a)])'
        in expr
    )
    atoms = [_hcl_string(a) for a in locals_["cron_atoms"]]
    template = _hcl_string(locals_["cron_field_template"])
    return "^" + " ".join(template.replace("@A", a) for a in atoms) + "$"


def test_terraform_and_the_code_hold_the_same_cron_dialect() -> None:
    assert _terraform_pattern() == cron_dialect.PATTERN


@pytest.mark.parametrize(
    ("cron", "ok"),
    [
        ("7 * * * *", True),
        ("*/5 * * * *", True),
        ("0 9-17/2 * * MON-FRI", True),
        ("0 0 1 JAN,JUL *", True),
        ("0 0 * * 7", True),  # 7 is Sunday too
        ("0 0 L * *", False),  # "does not support L"
        ("0 0 5L * *", False),
        ("0 0 * * MON#2", False),
        ("0 0 15W * *", False),
        ("0 0 ? * *", False),
        ("@hourly", False),
        ("0 0 0 * * *", False),  # six fields
        ("60 * * * *", False),
        ("0 24 * * *", False),
        ("*/0 * * * *", False),
    ],
)
def test_the_plan_refuses_what_cloud_scheduler_refuses(cron: str, ok: bool) -> None:
    # terraform's regex() is RE2; the pattern uses only what RE2 and re share
    assert bool(re.fullmatch(_terraform_pattern(), cron)) is ok
    assert (cron_dialect.problem(cron) is None) is ok


def test_each_cron_job_checks_its_entry_at_plan_and_names_it() -> None:
    job = resources("google_cloud_scheduler_job")["cron"]
    preconditions = block(job, "lifecycle")["precondition"]
    conditions = [unquote(p["condition"]) for p in preconditions]
    assert any("local.cron_pattern" in c and "each.value.cron" in c for c in conditions)
    for p in preconditions:
        assert "each.key" in unquote(p["error_message"]), "the message names the entry"
    assert unquote(job["time_zone"]) == 'lookup(each.value, "time_zone", "Etc/UTC")'


def test_the_functions_read_the_file_terraform_made_the_jobs_from() -> None:
    locals_ = config()["locals"]
    chosen = unquote(locals_["schedules_file"])  # var.schedules_file, else the package's
    assert chosen.startswith('(var.schedules_file == "" ? "${local.pipelines_dir}/schedules.json"')
    # shipped as <package>/schedules.json, whichever file it is (functions.tf archives)
    shipped = unquote(locals_["package_settings_files"])
    assert '"schedules.json" = local.schedules_file' in shipped and "fileexists(path)" in shipped
    assert '"${local.pipelines_package}/${f}" => path' in unquote(locals_["archives"])
    env = locals_["reclaim_env"]
    assert unquote(env["RECLAIM_SCHEDULES_FILE"]) == "${local.pipelines_package}/schedules.json"


@pytest.mark.parametrize(
    ("pipeline", "ok"),
    [("demo", True), ("csv-summary", True), ("csv-sumary", False), ("", False), (None, False)],
)
def test_the_plan_refuses_a_schedule_of_a_pipeline_no_function_knows(
    pipeline: str | None, ok: bool
) -> None:
    """The second pass's gap: a misspelt pipeline got a Scheduler job whose every tick is
    a 400. Known is built in (the code's own list) or named in a module the archives carry."""
    from shared.pipelines import builtin_pipeline_names

    # the built-ins alone: the registry also holds what other tests of this worker registered
    assert sorted(_literal_list("builtin_pipelines")) == builtin_pipeline_names()
    job = resources("google_cloud_scheduler_job")["cron"]
    (check,) = [
        unquote(p["condition"])
        for p in block(job, "lifecycle")["precondition"]
        if "builtin_pipelines" in unquote(p["condition"])
    ]
    entry = {"name": "x", "cron": "* * * * *", **({"pipeline": pipeline} if pipeline else {})}
    local = {
        "builtin_pipelines": _literal_list("builtin_pipelines"),
        "upload_module_text": 'NAME = "csv-summary"\n',
        "each_value": entry,
    }
    assert evaluate(check.replace("each.value", "local.each_value"), {}, local) is ok


def _literal_list(name: str) -> list[str]:
    return [unquote(v) for v in config()["locals"][name]]
