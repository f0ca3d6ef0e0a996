"""Read terraform/ with python-hcl2 into plain dicts the terraform tests can query."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parent.parent.parent
TF_DIR = ROOT / "terraform"

# Keys that are terraform's own, not the provider's (the schema check skips them).
META_ARGS = frozenset(
    {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}
)


def unquote(value: Any) -> Any:
    """'"text"' -> 'text'; '${expr}' -> 'expr'; anything else unchanged."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return value[1:-1]
        if value.startswith("${") and value.endswith("}"):
            return value[2:-1]
    return value


def is_block(value: Any) -> bool:
    """python-hcl2 gives blocks as lists of dicts flagged __is_block__."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
    )


def body(value: dict[str, Any]) -> dict[str, Any]:
    """A block's attributes without the parser's markers (__is_block__, __comments__)."""
    return {k: v for k, v in value.items() if not k.startswith("__")}


@functools.cache
def parse_file(path: Path) -> dict[str, Any]:
    with path.open() as fh:
        doc: dict[str, Any] = hcl2.load(fh)
    return doc


@functools.cache
def config(tf_dir: Path = TF_DIR) -> dict[str, Any]:
    """Every top-level block of <tf_dir>/*.tf (default: the module, terraform/), keyed by
    kind, type and name.

    resource/data -> {type: {name: body}}; variable/output/module -> {name: body};
    provider -> {local name: [body, ...]}; terraform -> [body, ...];
    locals -> merged {name: value}.
    """
    out: dict[str, Any] = {
        "resource": {},
        "data": {},
        "variable": {},
        "output": {},
        "module": {},
        "provider": {},
        "terraform": [],
        "locals": {},
    }
    for path in sorted(tf_dir.glob("*.tf")):
        doc = parse_file(path)
        for kind in ("resource", "data"):
            for entry in doc.get(kind, []):
                for rtype, named in entry.items():
                    for name, blk in named.items():
                        out[kind].setdefault(unquote(rtype), {})[unquote(name)] = body(blk)
        for kind in ("variable", "output", "module"):
            for entry in doc.get(kind, []):
                for name, blk in entry.items():
                    out[kind][unquote(name)] = body(blk)
        for entry in doc.get("provider", []):
            for name, blk in entry.items():
                out["provider"].setdefault(unquote(name), []).append(body(blk))
        out["terraform"] += [body(entry) for entry in doc.get("terraform", [])]
        for entry in doc.get("locals", []):
            out["locals"].update(body(entry))
    return out


def resources(rtype: str) -> dict[str, dict[str, Any]]:
    return dict(config()["resource"].get(rtype, {}))


def block(parent: dict[str, Any], name: str) -> dict[str, Any]:
    """The single nested block `name` of parent (AssertionError if absent or repeated)."""
    value: Any = parent.get(name)
    assert is_block(value) and len(value) == 1, f"expected one {name} block, got {value!r}"
    return body(value[0])


def variable_default(name: str) -> Any:
    return config()["variable"][name].get("default")


def optional_defaults(var_name: str) -> dict[str, Any]:
    """{attr: default} from a variable's `object({a = optional(type, default)})` type."""
    type_expr = unquote(config()["variable"][var_name]["type"])
    pairs = re.findall(r"(\w+)\s*=\s*optional\(\s*\w+\s*,\s*(\"[^\"]*\"|[-\d.]+)\s*\)", type_expr)
    out: dict[str, Any] = {}
    for key, raw in pairs:
        out[key] = raw[1:-1] if raw.startswith('"') else float(raw)
    return out


def all_text() -> str:
    return "\n".join(p.read_text() for p in sorted(TF_DIR.glob("*.tf")))


_REF = re.compile(r"\b(data\.)?([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\b")


def addresses() -> set[str]:
    """Every resource ("type.name") and data source ("data.type.name") declared."""
    cfg = config()
    return {f"{t}.{n}" for t, named in cfg["resource"].items() for n in named} | {
        f"data.{t}.{n}" for t, named in cfg["data"].items() for n in named
    }


def references(value: Any, _seen_locals: frozenset[str] = frozenset()) -> set[str]:
    """Addresses an expression (or a whole block) refers to, through locals too."""
    text = repr(value)
    known = addresses()
    out: set[str] = set()
    for data, rtype, name in _REF.findall(text):
        if rtype == "local" and name not in _seen_locals:
            expr = config()["locals"].get(name)
            if expr is not None:
                out |= references(expr, _seen_locals | {name})
            continue
        address = f"{data}{rtype}.{name}"
        if address in known:
            out.add(address)
    return out


def block_of(address: str) -> dict[str, Any]:
    """The body of a resource or data source by its address."""
    kind, rest = ("data", address[5:]) if address.startswith("data.") else ("resource", address)
    rtype, name = rest.split(".")
    return dict(config()[kind][rtype][name])


def dependencies(address: str) -> set[str]:
    """Everything an address waits for: references and depends_on, transitively."""
    todo, seen = [address], set()
    while todo:
        for dep in references(block_of(todo.pop())):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen
