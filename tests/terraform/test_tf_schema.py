"""The provider-schema check, standing in for `terraform validate` (no binary here).

Every resource / data-source type, argument and nested block in terraform/ must
exist in the provider it uses (hashicorp/google or google-beta 6.50.0, hashicorp/time
0.13.1), and every required argument must be set; the schemas come from the jsii
assemblies of the cdktf provider wheels (see schema_extract.py), vendored as
<provider>_provider_schema.json. versions.tf must declare and bound each of them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

from tests.terraform import schema_extract
from tests.terraform.tfhcl import META_ARGS, TF_DIR, body, config, is_block, parse_file, unquote

SCHEMA_PATH = Path(schema_extract.DEFAULT_OUT)
WHEEL_CACHE = schema_extract.ROOT / ".cache" / "tf"
ARCHIVE_VERSION = "2.4.2"  # the docs page ARCHIVE_SCHEMA below was read from

# hashicorp/archive is not in the google wheel: its one data source, from the provider's
# docs page registry.terraform.io/providers/hashicorp/archive/2.4.2/docs/data-sources/file.
ARCHIVE_SCHEMA: dict[str, Any] = {
    "archive_file": {
        "args": sorted(
            [
                "type",
                "output_path",
                "source_content",
                "source_content_filename",
                "source_file",
                "source_dir",
                "excludes",
                "exclude_symlink_directories",
                "output_file_mode",
            ]
        ),
        "required": ["output_path", "type"],
        "blocks": {
            "source": {"args": ["content", "filename"], "required": ["content", "filename"]}
        },
    }
}


def _schema(provider: str = "google") -> dict[str, Any]:
    return dict(json.loads(schema_extract.extract_path(provider).read_text()))


def _checked_version(provider: str) -> str:
    if provider == "archive":
        return ARCHIVE_VERSION
    found = re.search(r"[\d.]+$", _schema(provider)["provider"])
    assert found is not None
    return found.group(0)


def _used_providers() -> set[str]:
    return {
        schema_extract.provider_of(rtype, blk)
        for kind in ("resource", "data")
        for rtype, named in config()[kind].items()
        for blk in named.values()
    }


def _errors(where: str, blk: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Unknown arguments / blocks and missing required ones, recursively."""
    errs: list[str] = []
    args, blocks = set(schema["args"]), schema.get("blocks", {})
    present: set[str] = set()
    for key, value in blk.items():
        if key in META_ARGS:
            continue
        if key == "dynamic":
            for dyn in value:
                for name, dyn_body in dyn.items():
                    name = unquote(name)
                    present.add(name)
                    if name not in blocks:
                        errs.append(f"{where}: unknown dynamic block {name!r}")
                        continue
                    for content in body(dyn_body).get("content", []):
                        errs += _errors(f"{where}.{name}", body(content), blocks[name])
            continue
        present.add(key)
        if is_block(value):
            if key not in blocks:
                errs.append(f"{where}: {key!r} is not a block of this type")
                continue
            for item in value:
                errs += _errors(f"{where}.{key}", body(item), blocks[key])
        elif key not in args:
            hint = " (it is a block)" if key in blocks else ""
            errs.append(f"{where}: unknown argument {key!r}{hint}")
    errs += [f"{where}: required {r!r} is missing" for r in schema["required"] if r not in present]
    return errs


def _check_all(kind: str) -> list[str]:
    errs: list[str] = []
    for rtype, named in config()[kind].items():
        for name, blk in named.items():
            provider = schema_extract.provider_of(rtype, blk)
            where = f"{kind}.{rtype}.{name}"
            if provider == "archive":
                schema = ARCHIVE_SCHEMA.get(rtype)
                if schema is None:
                    errs.append(f"{where}: archive has no {kind} type {rtype!r}")
                    continue
            else:
                if provider not in schema_extract.WHEELS:
                    errs.append(f"{where}: no vendored schema for provider {provider!r}")
                    continue
                extract = _schema(provider)
                known = extract["resource_types" if kind == "resource" else "data_source_types"]
                detail = extract["resources" if kind == "resource" else "data_sources"]
                if rtype not in known:
                    errs.append(f"{where}: {kind} type {rtype!r} does not exist in {provider}")
                    continue
                if rtype not in detail:
                    errs.append(
                        f"{where}: not in the vendored {provider} extract; `make tf-schema`"
                    )
                    continue
                schema = detail[rtype]
            errs += _errors(where, blk, schema)
    return errs


def test_every_resource_argument_and_block_exists_in_the_provider() -> None:
    assert _check_all("resource") == []


def test_every_data_source_argument_and_block_exists_in_the_provider() -> None:
    assert _check_all("data") == []


def test_a_type_from_the_wrong_provider_is_caught() -> None:
    """google_project_service_identity is google-beta only in 6.x: without `provider`
    it would be checked against (and missing from) hashicorp/google."""
    assert "google_project_service_identity" not in _schema("google")["resource_types"]
    assert "google_project_service_identity" in _schema("google-beta")["resource_types"]
    assert schema_extract.provider_of("google_project_service_identity", {}) == "google"
    assert schema_extract.provider_of("x", {"provider": "google-beta"}) == "google-beta"
    assert schema_extract.provider_of("x", {"provider": "${google-beta.eu}"}) == "google-beta"
    assert schema_extract.provider_of("time_sleep", {}) == "time"


def test_the_check_catches_typos_and_missing_required_arguments() -> None:
    schema = _schema()["resources"]["google_pubsub_subscription"]
    good = {
        "name": '"x"',
        "topic": '"t"',
        "push_config": [{"push_endpoint": '"u"', "__is_block__": True}],
    }
    assert _errors("s", good, schema) == []
    typo = {**good, "ack_deadline_second": 10}
    assert _errors("s", typo, schema) == ["s: unknown argument 'ack_deadline_second'"]
    nested = {
        **good,
        "push_config": [
            {"push_endpoint": '"u"', "oidc": [{"__is_block__": True}], "__is_block__": True}
        ],
    }
    assert _errors("s", nested, schema) == ["s.push_config: 'oidc' is not a block of this type"]
    missing = {"name": '"x"'}
    assert _errors("s", missing, schema) == ["s: required 'topic' is missing"]


def test_versions_tf_declares_and_bounds_every_provider_used() -> None:
    doc = parse_file(TF_DIR / "versions.tf")
    required = body(doc["terraform"][0]["required_providers"][0])
    declared = {
        name: {k: unquote(v) for k, v in body(spec).items()} for name, spec in required.items()
    }
    used = _used_providers()
    assert set(declared) == used, f"declared {sorted(declared)}, used {sorted(used)}"
    for name, spec in declared.items():
        assert spec["source"] == f"hashicorp/{name}", name
        constraint = spec["version"]
        assert "<" in constraint and ">=" in constraint, f"{name}: bound it both ways"
        spec_set = SpecifierSet(constraint.replace(" ", "").replace("~>", "~="))
        checked = _checked_version(name)
        assert spec_set.contains(checked), f"{name}: {constraint} excludes the checked {checked}"
        assert f">={checked}" in constraint.replace(" ", ""), f"{name}: start at {checked}"
    assert _checked_version("google") == _checked_version("google-beta") == "6.50.0"
    assert "provider" not in doc, "a module configures no provider (test_tf_roots.py)"


def test_the_makefile_downloads_exactly_the_pinned_wheels() -> None:
    makefile = (schema_extract.ROOT / "Makefile").read_text()
    listed = set(re.findall(r"cdktf_cdktf_provider_(\w+)-([\d.]+)-py3-none-any\.whl", makefile))
    pinned = {
        (name.replace("-", "_"), version)
        for name, (_wheel, version) in schema_extract.WHEELS.items()
    }
    assert listed == pinned
    for provider, (wheel, version) in schema_extract.WHEELS.items():
        extract = _schema(provider)
        assert extract["source"] == f"{wheel}=={version}", provider


def _wheels() -> list[Path]:
    env = os.environ.get("RECLAIM_TF_SCHEMA_WHEEL")
    if env:
        return [Path(w) for w in env.split(os.pathsep)]
    return sorted(WHEEL_CACHE.glob("cdktf_cdktf_provider_*.whl"))


def test_vendored_extracts_match_the_wheels() -> None:
    """Regenerates each extract when its wheel is at hand (`make tf-check` fetches them)."""
    wheels = _wheels()
    if not wheels:
        pytest.skip("provider wheels not downloaded; `make tf-check` fetches them into .cache/tf")
    seen = set()
    for wheel in wheels:
        assembly = schema_extract.read_assembly(wheel)
        provider = schema_extract.provider_name(assembly)
        seen.add(provider)
        fresh = schema_extract.dumps(schema_extract.extract_for(assembly, TF_DIR))
        path = schema_extract.extract_path(provider)
        assert fresh == path.read_text(), f"{path.name} is stale: run `make tf-schema`"
    assert seen == set(schema_extract.WHEELS), f"wheels for {sorted(seen)} only"
