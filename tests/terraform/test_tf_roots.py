"""The module's callers, checked offline as `terraform validate` would: this repository's
own deployment (deploy/) and the root module `reclaim init` writes (a project's
deploy/, calling the copy of the module `reclaim tf-module` made). Each configures the
providers the module needs (the module configures none), within the module's bounds,
with arguments the provider has; passes the module only variables it declares, every
required one among them, literal values its validations accept; and outputs only what
the module outputs. checkov runs over both (test_tf_checkov.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

from tests.terraform import schema_extract
from tests.terraform.test_tf_variables import accepted
from tests.terraform.tfhcl import META_ARGS, ROOT, TF_DIR, body, config, unquote

MODULE_META = META_ARGS | {"source", "version", "providers"}
_VAR = re.compile(r"^\$\{var\.(\w+)\}$")


@pytest.fixture(params=["this repository", "a reclaim init project"])
def root(request: pytest.FixtureRequest, project_root: Path) -> Path:
    return ROOT / "deploy" if request.param == "this repository" else project_root


def _call(root: Path) -> tuple[dict[str, Any], Path]:
    """The root's one call of the reclaim module, and the module's folder."""
    modules = config(root)["module"]
    assert list(modules) == ["reclaim"], modules
    call = modules["reclaim"]
    return call, (root / unquote(call["source"])).resolve()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {unquote(k): _plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return unquote(value)


def test_the_module_configures_no_provider() -> None:
    assert config()["provider"] == {}, "a module must not configure providers: its caller does"


def test_the_root_calls_the_reclaim_module_and_holds_nothing_else(root: Path) -> None:
    _call_body, source = _call(root)
    assert source.is_dir(), source
    assert config(root)["resource"] == {} and config(root)["data"] == {}
    ours = {p.name: p.read_text() for p in TF_DIR.glob("*.tf")}
    assert {p.name: p.read_text() for p in source.glob("*.tf")} == ours
    if root != ROOT / "deploy":  # a project's copy: the library beside the module
        library = source.parent
        assert (library / "reclaim" / "VERSION").read_text() == (
            ROOT / "reclaim" / "VERSION"
        ).read_text()
        assert (library / "shared" / "queue.py").is_file()


def test_the_root_passes_only_declared_variables_and_every_required_one(root: Path) -> None:
    call, source = _call(root)
    module_vars = config(source)["variable"]
    args = {k for k in call if k not in MODULE_META}
    assert args - set(module_vars) == set(), "unknown module arguments"
    required = {n for n, v in module_vars.items() if "default" not in v}
    assert required - args == set(), "required module arguments missing"
    root_vars = config(root)["variable"]
    used = set(re.findall(r"var\.(\w+)", repr(dict(config(root)))))
    assert used <= set(root_vars), "a reference to an undeclared root variable"
    assert set(root_vars) <= used, "a root variable nothing uses"


def test_literal_arguments_pass_the_modules_validations(root: Path) -> None:
    call, source = _call(root)
    assert config(source) == config(), "the copy is the module these validations belong to"
    for name, raw in call.items():
        if name in MODULE_META or "${" in repr(raw):
            continue
        if "validation" in config()["variable"][name]:
            assert accepted(name, _plain(raw)), (name, raw)


def test_the_example_tfvars_set_root_variables_the_module_accepts(root: Path) -> None:
    """terraform.tfvars.example is what a first-time user copies."""
    with (root / "terraform.tfvars.example").open() as fh:
        example = _plain(hcl2.load(fh))
    call, _source = _call(root)
    root_vars = config(root)["variable"]
    assert example and "project_id" in example
    for name, value in example.items():
        assert name in root_vars, f"{name} is not a variable of {root}"
        forwarded = _VAR.match(call.get(name, ""))
        assert forwarded and forwarded.group(1) == name, f"{name} is not passed to the module"
        if "validation" in config()["variable"][name]:
            assert accepted(name, value), (name, value)


def test_the_root_pins_and_configures_the_providers_the_module_requires(root: Path) -> None:
    ((module_tf,),) = [[b for b in config()["terraform"] if "required_providers" in b]]
    (root_tf,) = [b for b in config(root)["terraform"] if "required_providers" in b]
    assert unquote(root_tf["required_version"]) == unquote(module_tf["required_version"])
    assert _plain(root_tf["required_providers"]) == _plain(module_tf["required_providers"])
    providers = config(root)["provider"]
    assert set(providers) == {"google", "google-beta"}
    for name, (block,) in providers.items():
        schema = _provider_schema(name)
        unknown = set(block) - set(schema["args"]) - set(schema.get("blocks", {}))
        assert unknown == set(), f"provider {name}: unknown arguments {unknown}"
        assert unquote(block["project"]) == "var.project_id"
        assert unquote(block["region"]) == "var.region"


def test_every_output_is_one_the_module_has(root: Path) -> None:
    _call_body, source = _call(root)
    module_outputs = set(config(source)["output"])
    outputs = config(root)["output"]
    assert outputs and "submit_url" in outputs
    for name, out in outputs.items():
        found = re.fullmatch(r"module\.reclaim\.(\w+)", unquote(out["value"]))
        assert found and found.group(1) in module_outputs, name


def test_a_project_pins_the_reclaim_it_was_made_with(project_root: Path) -> None:
    call, _source = _call(project_root)
    version = (ROOT / "reclaim" / "VERSION").read_text().strip()
    assert unquote(call["reclaim_version"]) == version
    (output,) = [o for o in config()["output"].values() if "precondition" in o]
    condition = unquote(body(output["precondition"][0])["condition"])
    assert "var.reclaim_version" in condition and "local.reclaim_version" in condition


def _provider_schema(name: str) -> dict[str, Any]:
    extract = json.loads(schema_extract.extract_path(name).read_text())
    return dict(extract["provider_config"])
