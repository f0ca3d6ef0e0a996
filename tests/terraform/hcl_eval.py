"""Evaluate the HCL expressions of variable validations, without a terraform binary.

python-hcl2 parses an expression into a Lark tree; this walks that tree for the subset
terraform/variables.tf and the locals of terraform/uploads.tf, pools.tf and run_jobs.tf
use (literals, string templates, objects, var.x.y and local.x, comparison, logic and
arithmetic operators, conditionals, tuple and object `for`, and the functions in
FUNCTIONS), with terraform's semantics where they matter here: `&&` and `||` evaluate
both sides (an error on either side is an error), `can`/`try` catch errors, `regex`
fails when nothing matches, a function given the wrong type of argument and a `for`
over a string are errors. Anything outside the subset raises Unsupported, so a new
construct cannot pass unevaluated.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

import hcl2
from lark import Token, Tree


class EvalError(Exception):
    """The expression fails at run time (terraform would report an error)."""


class Unsupported(Exception):
    """A construct this evaluator does not implement: extend it, never skip."""


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def evaluate(
    expression: str, variables: Mapping[str, Any], local: Mapping[str, Any] | None = None
) -> Any:
    """The value of one expression (python-hcl2's '${...}' form or bare) with `var` (and
    `local`, when given)."""
    text = (
        expression[2:-1] if expression.startswith("${") and expression.endswith("}") else expression
    )
    tree = hcl2.parses_to_tree(f"x = {text}\n")
    attribute = next(tree.find_data("attribute"))
    scope = {"var": _normal(dict(variables))}
    if local is not None:
        scope["local"] = _normal(dict(local))
    return _Evaluator(scope).eval(attribute.children[-1])


def _normal(value: Any) -> Any:
    """Numbers as floats (HCL has one number type), recursively."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvalError(f"a number is required, got {value!r}")
    return float(value)


def _string(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        raise EvalError(f"a string is required, got {value!r}")
    if isinstance(value, int | float):
        return format(value, "g")
    if not isinstance(value, str):
        raise EvalError(f"a string is required, got {value!r}")
    return value


def _tonumber(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = _string(value)
    if not re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", text):
        raise EvalError(f"cannot convert {text!r} to a number")
    return float(text)


def _regex(pattern: Any, text: Any) -> Any:
    match = re.search(_string(pattern), _string(text))
    if match is None:
        raise EvalError("pattern did not match any part of the given string")
    groups = match.groups()
    return list(groups) if groups else match.group(0)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError(f"a bool is required, got {value!r}")
    return value


def _tostring(value: Any) -> Any:
    """terraform's tostring: a string as is, a number or bool as its text, null stays
    null; a list or object is an error."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return _string(value)


def _keys(mapping: Any) -> list[str]:
    if not isinstance(mapping, Mapping):
        raise EvalError(f"keys() needs a map or object, got {mapping!r}")
    return sorted(mapping)


def _sum(items: Any) -> float:
    values = [_number(v) for v in items]
    if not values:
        raise EvalError("cannot sum an empty list")
    return float(sum(values))


def _flatten(items: Any) -> list[Any]:
    """terraform's flatten: nested lists, at any depth, become one list."""
    out: list[Any] = []
    for item in items:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "alltrue": lambda items: all(_bool(i) for i in items),
    "basename": lambda path: posixpath.basename(_string(path)),
    "anytrue": lambda items: any(_bool(i) for i in items),
    "concat": lambda *lists: [v for one in lists for v in one],
    "contains": lambda items, value: value in items,
    "distinct": lambda items: [v for i, v in enumerate(items) if v not in items[:i]],
    "endswith": lambda text, suffix: _string(text).endswith(_string(suffix)),
    "flatten": lambda items: _flatten(items),
    "join": lambda sep, items: _string(sep).join(_string(i) for i in items),
    "keys": _keys,
    "lower": lambda text: _string(text).lower(),
    "setintersection": lambda a, b: [v for v in a if v in b],
    "startswith": lambda text, prefix: _string(text).startswith(_string(prefix)),
    "strcontains": lambda text, part: _string(part) in _string(text),
    "floor": lambda n: float(math.floor(_number(n))),
    "length": lambda v: float(len(v)),
    "range": lambda *bounds: [float(i) for i in range(*(int(_number(b)) for b in bounds))],
    "regex": _regex,
    "split": lambda sep, text: _string(text).split(_string(sep)),
    "sum": _sum,
    "tonumber": _tonumber,
    "tostring": _tostring,
    "trimspace": lambda text: _string(text).strip(),
    "trimsuffix": lambda text, suffix: (
        _string(text)[: -len(suffix)] if suffix and _string(text).endswith(suffix) else text
    ),
    "values": lambda mapping: [mapping[k] for k in sorted(mapping)],
}

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "%": lambda a, b: math.fmod(a, b),
}


class _Evaluator:
    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope

    def eval(self, node: Any) -> Any:
        if isinstance(node, Token):
            raise Unsupported(f"bare token {node.type}")
        handler = getattr(self, f"_{node.data}", None)
        if handler is None:
            raise Unsupported(f"HCL construct {node.data!r}")
        return handler(node)

    def _children(self, node: Tree) -> list[Any]:
        """Children without punctuation tokens and comments."""
        return [
            c
            for c in node.children
            if isinstance(c, Tree) and c.data not in ("new_line_or_comment", "binary_operator")
        ]

    def _expr_term(self, node: Tree) -> Any:
        (inner,) = self._children(node)
        return self.eval(inner)

    def _int_lit(self, node: Tree) -> float:
        return float(str(node.children[0]))

    _float_lit = _int_lit

    def _literal_value(self, node: Tree) -> Any:
        return {"true": True, "false": False, "null": None}[str(node.children[0])]

    def _string(self, node: Tree) -> str:
        out = []
        for part in self._children(node):
            (token,) = part.children
            if isinstance(token, Tree) and token.data == "interpolation":
                (inner,) = self._children(token)
                out.append(_string(self.eval(inner)))
                continue
            if not isinstance(token, Token) or token.type != "STRING_CHARS":
                raise Unsupported("string template part")
            out.append(re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), token))
        return "".join(out)

    def _object(self, node: Tree) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for elem in self._children(node):
            key_node, value = self._children(elem)
            (key_expr,) = self._children(key_node)
            (inner,) = self._children(key_expr)
            key = str(inner.children[0]) if inner.data == "identifier" else self.eval(key_expr)
            out[_string(key)] = self.eval(value)
        return out

    def _identifier(self, node: Tree) -> Any:
        name = str(node.children[0])
        if name not in self.scope:
            raise Unsupported(f"reference {name!r}")
        return self.scope[name]

    def _get_attr_expr_term(self, node: Tree) -> Any:
        base, get_attr = self._children(node)
        value = self.eval(base)
        (ident,) = self._children(get_attr)
        key = str(ident.children[0])
        if not isinstance(value, Mapping) or key not in value:
            raise EvalError(f"no attribute {key!r}")
        return value[key]

    def _index_expr_term(self, node: Tree) -> Any:
        base, index = self._children(node)
        value, (key_expr,) = self.eval(base), self._children(index)
        key = self.eval(key_expr)
        try:
            return value[int(key)] if isinstance(value, list) else value[_string(key)]
        except (IndexError, KeyError, TypeError, ValueError):
            raise EvalError(f"no element {key!r}") from None

    def _tuple(self, node: Tree) -> list[Any]:
        return [self.eval(c) for c in self._children(node)]

    def _function_call(self, node: Tree) -> Any:
        ident, *rest = self._children(node)
        name = str(ident.children[0])
        args = self._children(rest[0]) if rest else []
        if name == "can":
            (arg,) = args
            try:
                self.eval(arg)
            except EvalError:
                return False
            return True
        if name == "try":
            for arg in args:
                try:
                    return self.eval(arg)
                except EvalError:
                    continue
            raise EvalError("no argument of try() could be evaluated")
        if name not in FUNCTIONS:
            raise Unsupported(f"function {name}()")
        values = [self.eval(a) for a in args]
        try:
            return FUNCTIONS[name](*values)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # a wrong argument type (length(null), contains(1, x), ...): terraform's error
            raise EvalError(f"{name}(): {exc}") from None

    def _unary_op(self, node: Tree) -> Any:
        op, operand = node.children
        value = self.eval(operand)
        return (not _bool(value)) if str(op) == "!" else -_number(value)

    def _binary_op(self, node: Tree) -> Any:
        left, term = self._children(node)
        (operator,) = [
            c for c in term.children if isinstance(c, Tree) and c.data == "binary_operator"
        ]
        op = str(operator.children[0])
        (right,) = self._children(term)
        a, b = self.eval(left), self.eval(right)  # both sides, as HCL does
        if op in ("&&", "||"):
            return (_bool(a) and _bool(b)) if op == "&&" else (_bool(a) or _bool(b))
        if op in ("==", "!="):
            return (a == b) == (op == "==") if type(a) is type(b) else op == "!="
        if op in _COMPARE:
            return _COMPARE[op](_number(a), _number(b))
        if op in _ARITHMETIC:
            try:
                return _ARITHMETIC[op](_number(a), _number(b))
            except ZeroDivisionError:
                raise EvalError("division by zero") from None
        raise Unsupported(f"operator {op}")

    def _conditional(self, node: Tree) -> Any:
        cond, yes, no = self._children(node)
        return self.eval(yes) if _bool(self.eval(cond)) else self.eval(no)

    def _for_object_expr(self, node: Tree) -> dict[str, Any]:
        intro, key, value, *cond = self._children(node)
        out: dict[str, Any] = {}
        for inner in self._iterations(intro, cond):
            name = _string(inner.eval(key))
            if name in out:
                raise EvalError(f"duplicate object key {name!r}")
            out[name] = inner.eval(value)
        return out

    def _for_tuple_expr(self, node: Tree) -> list[Any]:
        intro, body, *cond = self._children(node)
        return [inner.eval(body) for inner in self._iterations(intro, cond)]

    def _iterations(self, intro: Tree, cond: list[Any]) -> list[_Evaluator]:
        """One evaluator per element the `for` keeps, its names bound."""
        names = [str(i.children[0]) for i in self._children(intro) if i.data == "identifier"]
        (source,) = [c for c in self._children(intro) if c.data != "identifier"]
        items = self.eval(source)
        if not isinstance(items, Mapping | list):  # a string, number or null: an error
            raise EvalError(f"a for expression cannot iterate over {items!r}")
        pairs = items.items() if isinstance(items, Mapping) else enumerate(items)
        out = []
        for key, value in pairs:
            scope = dict(self.scope)
            if len(names) == 2:
                scope[names[0]], scope[names[1]] = (
                    (float(key) if isinstance(key, int) else key),
                    value,
                )
            else:
                scope[names[0]] = value
            inner = _Evaluator(scope)
            if cond and not _bool(inner.eval(self._children(cond[0])[0])):
                continue
            out.append(inner)
        return out
