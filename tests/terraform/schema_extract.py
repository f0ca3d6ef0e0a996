"""Extract compact provider schemas from the cdktf provider wheels.

No terraform binary can run here, so ``terraform validate`` is stood in for by the
providers' own schemas: each PyPI wheel ``cdktf-cdktf-provider-<name>`` carries its
provider's schema as a jsii assembly (JSON inside ``_jsii/*.jsii.tgz``). Every
property there documents its terraform attribute name as the anchor of its registry
link (``...#<attr>``), so the schema is read from the JSON alone: no import of the
package, no Node.

One extract per provider (``<provider>_provider_schema.json`` beside this file) keeps
every resource and data-source type name, the arguments of the provider block itself
(what a root module may configure), and the full argument / block / required tree only
of the types the configuration uses with that provider (``--tf-dir``), so the vendored
files stay small. Run ``make tf-schema`` to refresh them.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_TF_DIR = ROOT / "terraform"

# provider local name -> the pinned PyPI wheel that carries its schema (the Makefile
# downloads exactly these; the extracts record which one they were made from).
WHEELS: dict[str, tuple[str, str]] = {
    "google": ("cdktf-cdktf-provider-google", "16.12.1"),  # hashicorp/google 6.50.0
    "google-beta": ("cdktf-cdktf-provider-google-beta", "16.12.1"),  # google-beta 6.50.0
    "time": ("cdktf-cdktf-provider-time", "11.0.1"),  # hashicorp/time 0.13.1
}

_LINK = re.compile(
    r"registry\.terraform\.io/providers/hashicorp/([\w-]+)/([\d.]+)/docs/"
    r"(resources|data-sources)/(\w+)(?:#(\w+))?"
)
_MAX_DEPTH = 12


def extract_path(provider: str) -> Path:
    """Where the vendored extract of a provider lives."""
    return HERE / f"{provider.replace('-', '_')}_provider_schema.json"


DEFAULT_OUT = extract_path("google")


def type_prefix(provider: str) -> str:
    """Terraform's implied provider is the first word of a type: google-beta -> google_."""
    return provider.split("-")[0] + "_"


def provider_of(tf_type: str, block: dict[str, Any]) -> str:
    """The provider a resource / data block uses: its `provider` argument, else implied."""
    explicit = block.get("provider")
    if isinstance(explicit, str) and explicit:
        return explicit.strip('"${}').split(".")[0]  # "google-beta.alias" -> google-beta
    return tf_type.split("_")[0]


def read_assembly(wheel: Path) -> dict[str, Any]:
    """The jsii assembly (a dict) inside the wheel's ``_jsii/*.jsii.tgz``."""
    with zipfile.ZipFile(wheel) as whl:
        names = [n for n in whl.namelist() if n.endswith(".jsii.tgz") and "/_jsii/" in n]
        if len(names) != 1:
            raise SystemExit(f"{wheel}: expected one _jsii/*.jsii.tgz, found {names}")
        blob = whl.read(names[0])
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        member = tar.extractfile("package/.jsii")
        if member is None:
            raise SystemExit(f"{wheel}: no package/.jsii in {names[0]}")
        assembly: dict[str, Any] = json.load(member)
    return assembly


def _doc_text(entity: dict[str, Any]) -> str:
    docs = entity.get("docs", {})
    return f"{docs.get('summary', '')} {docs.get('remarks', '')}"


def _attr_name(prop: dict[str, Any]) -> str:
    """The terraform name of a property: the anchor of its registry link."""
    for match in _LINK.finditer(_doc_text(prop)):
        if match.group(5):
            return match.group(5)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", prop["name"]).lower()


def _struct_fqn(type_ref: dict[str, Any], types: dict[str, Any]) -> str | None:
    """The datatype interface a property nests (a block), or None for a plain argument."""
    candidates = [type_ref]
    if "union" in type_ref:
        candidates = type_ref["union"]["types"]
    for cand in candidates:
        if "collection" in cand and cand["collection"]["kind"] == "array":
            cand = cand["collection"]["elementtype"]
        fqn = cand.get("fqn")
        if fqn and types.get(fqn, {}).get("datatype"):
            return str(fqn)
    return None


def _schema_of(fqn: str, types: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """args / required / blocks of one config struct, recursively."""
    if depth > _MAX_DEPTH:
        raise SystemExit(f"schema nesting too deep at {fqn}")
    args: list[str] = []
    required: list[str] = []
    blocks: dict[str, Any] = {}
    for prop in types[fqn].get("properties", []):
        name = _attr_name(prop)
        if not prop.get("optional"):
            required.append(name)
        nested = _struct_fqn(prop["type"], types)
        if nested is None:
            args.append(name)
        else:
            blocks[name] = _schema_of(nested, types, depth + 1)
    out: dict[str, Any] = {"args": sorted(args), "required": sorted(required)}
    if blocks:
        out["blocks"] = dict(sorted(blocks.items()))
    return out


def _config_fqn(cls: dict[str, Any]) -> str:
    params = cls.get("initializer", {}).get("parameters", [])
    for param in params:
        if param["name"] == "config":
            return str(param["type"]["fqn"])
    raise SystemExit(f"{cls['fqn']}: no config parameter")


def provider_name(assembly: dict[str, Any]) -> str:
    """The provider a wheel describes: its registry links name it (google, time, ...)."""
    return _first_link(assembly).group(1)


def provider_version(assembly: dict[str, Any]) -> str:
    return _first_link(assembly).group(2)


def _first_link(assembly: dict[str, Any]) -> re.Match[str]:
    for cls in assembly["types"].values():
        match = _LINK.search(_doc_text(cls))
        if match:
            return match
    raise SystemExit("no registry link found in the assembly")


def all_types(assembly: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{"resource"|"data": {terraform type name: class fqn}} for every provider type."""
    out: dict[str, dict[str, str]] = {"resource": {}, "data": {}}
    for fqn, cls in assembly["types"].items():
        base = cls.get("base")
        if base not in ("cdktf.TerraformResource", "cdktf.TerraformDataSource"):
            continue
        match = _LINK.search(_doc_text(cls))
        if match is None:
            raise SystemExit(f"{fqn}: no registry link in its docs")
        kind = "resource" if match.group(3) == "resources" else "data"
        prefix = type_prefix(match.group(1))
        name = match.group(4)  # google links say "project_service", google-beta's the full name
        out[kind][name if name.startswith(prefix) else prefix + name] = fqn
    return out


def used_types(tf_dir: Path, provider: str = "google") -> dict[str, set[str]]:
    """Resource and data-source types the configuration declares with this provider."""
    import hcl2  # python-hcl2, in the dev venv

    out: dict[str, set[str]] = {"resource": set(), "data": set()}
    for path in sorted(tf_dir.glob("*.tf")):
        with path.open() as fh:
            doc = hcl2.load(fh)
        for kind in ("resource", "data"):
            for entry in doc.get(kind, []):
                for raw_type, named in entry.items():
                    tf_type = raw_type.strip('"')
                    if any(provider_of(tf_type, blk) == provider for blk in named.values()):
                        out[kind].add(tf_type)
    return out


def build_extract(assembly: dict[str, Any], wanted: dict[str, set[str]]) -> dict[str, Any]:
    """The compact schema: all type names + full trees of the wanted types."""
    names = all_types(assembly)
    detail: dict[str, dict[str, Any]] = {"resource": {}, "data": {}}
    for kind in ("resource", "data"):
        for tf_type in sorted(wanted[kind]):
            fqn = names[kind].get(tf_type)
            if fqn is None:  # unknown type: the check reports it; nothing to extract
                continue
            detail[kind][tf_type] = _schema_of(
                _config_fqn(assembly["types"][fqn]), assembly["types"]
            )
    provider = provider_name(assembly)
    return {
        "generated_by": "tests/terraform/schema_extract.py",
        "source": f"{WHEELS[provider][0]}=={assembly['version']}",
        "provider": f"hashicorp/{provider} {provider_version(assembly)}",
        "provider_config": _schema_of(provider_config_fqn(assembly), assembly["types"]),
        "resource_types": sorted(names["resource"]),
        "data_source_types": sorted(names["data"]),
        "resources": detail["resource"],
        "data_sources": detail["data"],
    }


def provider_config_fqn(assembly: dict[str, Any]) -> str:
    """The struct of the `provider "<name>" {}` block (a root module configures it)."""
    found = [
        fqn
        for fqn in assembly["types"]
        if fqn.split(".")[-2:-1] == ["provider"] and fqn.endswith("ProviderConfig")
    ]
    if len(found) != 1:
        raise SystemExit(f"expected one provider config struct, found {found}")
    return found[0]


def dumps(extract: dict[str, Any]) -> str:
    """Stable text, so regenerating gives a byte-identical file."""
    return json.dumps(extract, indent=1, sort_keys=True) + "\n"


def extract_for(assembly: dict[str, Any], tf_dir: Path = DEFAULT_TF_DIR) -> dict[str, Any]:
    """The extract of the assembly's provider for the types tf_dir uses with it."""
    return build_extract(assembly, used_types(tf_dir, provider_name(assembly)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheel", type=Path, required=True, action="append", help="a downloaded wheel"
    )
    parser.add_argument("--tf-dir", type=Path, default=DEFAULT_TF_DIR)
    parser.add_argument("--out", type=Path, help="output file (one wheel only)")
    parser.add_argument("--docs", metavar="TYPE", nargs="*", help="print a type's docs instead")
    args = parser.parse_args(argv)
    if args.out is not None and len(args.wheel) != 1:
        parser.error("--out takes exactly one --wheel")
    for wheel in args.wheel:
        assembly = read_assembly(wheel)
        if args.docs:
            _print_docs(assembly, args.docs)
            continue
        out = args.out or extract_path(provider_name(assembly))
        out.write_text(dumps(extract_for(assembly, args.tf_dir)))
        print(f"wrote {out}")
    return 0


def _print_docs(assembly: dict[str, Any], wanted: list[str]) -> None:
    """Every property of the named types with its doc text (for reading the provider docs)."""
    names = {**all_types(assembly)["data"], **all_types(assembly)["resource"]}
    types = assembly["types"]

    def walk(fqn: str, prefix: str) -> None:
        for prop in types[fqn].get("properties", []):
            name = prefix + _attr_name(prop)
            req = "" if prop.get("optional") else " (required)"
            text = " ".join(_doc_text(prop).split())
            text = re.sub(r"Docs at Terraform Registry: \{@link [^}]*\}", "", text)
            print(f"  {name}{req}: {text[:400]}")
            nested = _struct_fqn(prop["type"], types)
            if nested:
                walk(nested, name + ".")

    for tf_type in wanted:
        if tf_type in names:
            print(f"== {tf_type}")
            walk(_config_fqn(types[names[tf_type]]), "")


if __name__ == "__main__":
    sys.exit(main())
