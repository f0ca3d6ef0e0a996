"""The provider-schema check, standing in for `terraform validate` (no binary here).

Every resource / data-source type, argument and nested block in terraform/ must
exist in hashicorp/google 6.50.0, and every required argument must be set; the
schema comes from the jsii assembly of cdktf-cdktf-provider-google (see
schema_extract.py), vendored as google_provider_schema.json.
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


def _schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_PATH.read_text()))


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


def _check_all(kind: str, known: list[str], detail: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    for rtype, named in config()[kind].items():
        schema = ARCHIVE_SCHEMA.get(rtype) if not rtype.startswith("google_") else None
        if schema is None:
            if rtype not in known:
                errs.append(f"{kind} type {rtype!r} does not exist in the provider")
                continue
            if rtype not in detail:
                errs.append(f"{rtype}: not in the vendored extract; run `make tf-schema`")
                continue
            schema = detail[rtype]
        for name, blk in named.items():
            errs += _errors(f"{kind}.{rtype}.{name}", blk, schema)
    return errs


def test_every_resource_argument_and_block_exists_in_the_provider() -> None:
    schema = _schema()
    assert _check_all("resource", schema["resource_types"], schema["resources"]) == []


def test_every_data_source_argument_and_block_exists_in_the_provider() -> None:
    schema = _schema()
    assert _check_all("data", schema["data_source_types"], schema["data_sources"]) == []


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


def test_versions_tf_allows_the_checked_provider_version() -> None:
    doc = parse_file(TF_DIR / "versions.tf")
    google = doc["terraform"][0]["required_providers"][0]["google"]
    constraint = unquote(google["version"])
    assert "<" in constraint, "the provider version must be bounded above"
    spec = SpecifierSet(constraint.replace(" ", "").replace("~>", "~="))
    checked = re.search(r"[\d.]+$", _schema()["provider"])
    assert checked is not None and checked.group(0) == "6.50.0"
    assert spec.contains(checked.group(0)), f"{constraint} excludes the checked 6.50.0"


def _wheel() -> Path | None:
    env = os.environ.get("RECLAIM_TF_SCHEMA_WHEEL")
    if env:
        return Path(env)
    found = sorted(WHEEL_CACHE.glob("cdktf_cdktf_provider_google-*.whl"))
    return found[-1] if found else None


def test_vendored_extract_matches_the_wheel() -> None:
    """Regenerates the extract when the wheel is at hand (`make tf-schema` fetches it)."""
    wheel = _wheel()
    if wheel is None:
        pytest.skip("provider wheel not downloaded; `make tf-check` fetches it into .cache/tf")
    assembly = schema_extract.read_assembly(wheel)
    fresh = schema_extract.dumps(
        schema_extract.build_extract(assembly, schema_extract.used_types(TF_DIR))
    )
    assert fresh == SCHEMA_PATH.read_text(), "vendored schema is stale: run `make tf-schema`"
