"""The one reader of the numbers and page tokens a caller sends (pure).

Every route reads its integers, its seconds and its page tokens here, so one rule holds
everywhere: ASCII digits only, within bounds, and a clear InvalidInput naming the
parameter. Python's own readers are too lenient for text from the wire: ``str.isdigit()``
is true for ``"²"`` while ``int("²")`` refuses it (a 500 where a 400 belongs), ``int()``
and ``float()`` take Arabic-Indic digits, underscores (``"1_0"``), spaces and
``"infinity"``, and a thousand-digit number costs quadratic time to convert.

A page token is opaque to the caller, URL-safe, and bound to the query that gave it: it
carries a digest of that query's filters, so a token from another listing (another
batch, another status) is refused with a 400 instead of ending a listing early or
skipping jobs. It is not a secret (whoever holds it could run the same query), only a
receipt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence

from shared.errors import InvalidInput

_DIGITS = re.compile(r"[0-9]{1,19}")
_DECIMAL = re.compile(r"[0-9]{1,6}(?:\.[0-9]{0,6})?|\.[0-9]{1,6}")
TOKEN_MAX = 600
"""The longest page token read (shared/openapi.json says so too): a source and a key of at
most 300 characters fit."""
_TOKEN = re.compile(rf"[A-Za-z0-9_-]{{1,{TOKEN_MAX}}}")
_BINDING_CHARS = 16


def shown(text: str, limit: int = 24) -> str:
    """A caller's text as an error may quote it: short, and with no lone surrogate (which
    could not be encoded into the JSON answer)."""
    cut = text[:limit]
    return repr(cut.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"))


def integer(text: str, name: str, *, low: int, high: int) -> int:
    """`text` as an integer in low..high, written in ASCII digits (no sign, no spaces,
    no underscores); InvalidInput naming `name` otherwise."""
    if not isinstance(text, str) or not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        got = shown(text) if isinstance(text, str) else type(text).__name__
        raise InvalidInput(f"{name} must be an integer from {low} to {high}, got {got}", name)
    return int(text)


def seconds(text: str, name: str, *, high: float) -> float:
    """`text` as seconds in 0..high: ASCII digits with an optional decimal part of up to
    six digits ("2", "2.5", ".25"); InvalidInput naming `name` otherwise."""
    match = _DECIMAL.fullmatch(text) if isinstance(text, str) else None
    value = float(match.group(0)) if match else -1.0
    if not 0 <= value <= high:
        got = shown(text) if isinstance(text, str) else type(text).__name__
        raise InvalidInput(f"{name} must be seconds from 0 to {high:g}, got {got}", name)
    return value


def binding(filters: Sequence[object]) -> str:
    """A short digest of what a token is bound to (a query's filters, in a fixed order)."""
    raw = json.dumps([None if f is None else str(f) for f in filters], ensure_ascii=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:_BINDING_CHARS]


def encode_token(parts: Sequence[str], bound_to: str) -> str:
    """An opaque, URL-safe token carrying `parts`, bound to `bound_to` (binding())."""
    raw = json.dumps([*parts, bound_to], separators=(",", ":"), ensure_ascii=True)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str, name: str, *, bound_to: str, size: int) -> list[str]:
    """The `size` parts of a token encode_token made for the same binding; InvalidInput
    naming `name` for anything else (another query's token, a forged or cut one)."""
    parts: object = None
    if isinstance(token, str) and _TOKEN.fullmatch(token):
        try:
            parts = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (ValueError, binascii.Error):
            parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != size + 1
        or not all(isinstance(p, str) for p in parts)
        or parts[-1] != bound_to
    ):
        raise InvalidInput(f"{name} is not one this query gave; start without it", name)
    return [str(p) for p in parts[:-1]]
