"""The waitpoint signing key and the completion route's address.

The key signs each waitpoint's token (HMAC-SHA256: shared.features.waits.rules.sign). It
is 32 random bytes kept in the records bucket (``waits/key``), created once by whichever
process needs it first (a create-only write: of two racing creators one wins and the
other reads the winner's), as the dashboard's CSRF key is. Who may read it could as well
write the records themselves, so it gives nobody a power they lack; what it keeps out is
everyone else, the callers of the public completion route among them.

The completion route's base URL (the waitpoints function's, terraform sets it on the
functions that create waitpoints) comes from ``RECLAIM_WAITPOINT_URL``; without it a
waitpoint has a token but no URL (the CLI, the client and the dashboard complete it).
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from typing import TYPE_CHECKING

from shared.config import EnvVar, read_env
from shared.errors import AlreadyExists, ConfigError, NotFound

if TYPE_CHECKING:
    from shared.storage import Store

KEY_BYTES = 32
KEY_NAME = "waits/key"
"""Where the key lives (an index object of the waits feature: shared.features.waits.rules)."""


def _url(raw: str) -> str:
    if raw and not raw.startswith(("https://", "http://")):
        raise ValueError("must be an http(s) URL (the waitpoints function's)")
    return raw.rstrip("/")


WAIT_ENV_VARS = (
    EnvVar(
        name="RECLAIM_WAITPOINT_URL",
        field="waitpoint_url",
        default="",
        parse=_url,
        doc="The waitpoints function's URL (terraform sets it on claim): a waitpoint's "
        "completion URL is <it>/waitpoints/<token>. Empty: waitpoints have no URL.",
    ),
)
"""Read apart from shared.config.ENV_VARS: only the functions that create waitpoints get
it, and the waitpoints function itself does not (its own URL would be a cycle)."""

_KEYS: weakref.WeakKeyDictionary[object, bytes] = weakref.WeakKeyDictionary()
"""Per store object (a process has one per deployment): a test process that opens a
fresh local cloud gets a fresh store, and so reads that cloud's key."""
_LOCK = threading.Lock()


def base_url(env: dict[str, str] | None = None) -> str | None:
    """RECLAIM_WAITPOINT_URL, or None when unset (ConfigError when malformed)."""
    value = read_env(WAIT_ENV_VARS, os.environ if env is None else env)["waitpoint_url"]
    return str(value) or None


def signing_key(store: Store, *, create: bool = True) -> bytes | None:
    """The deployment's waitpoint key, created on first use (cached per store). Without
    `create` (a completion checking a token), None when there is none yet: no token can
    have been made, and a refusal writes nothing."""
    with _LOCK:
        known = _KEYS.get(store)
    if known is not None:
        return known
    try:
        key = store.read_blob(KEY_NAME).data
    except NotFound:
        if not create:
            return None
        fresh = secrets.token_bytes(KEY_BYTES)
        try:
            store.put_blob(KEY_NAME, fresh, generation=0)
            key = fresh
        except AlreadyExists:  # another process created it first: use the winner's
            key = store.read_blob(KEY_NAME).data
    if len(key) < 16:
        raise ConfigError(f"{KEY_NAME} holds {len(key)} bytes; a key needs at least 16")
    with _LOCK:
        _KEYS[store] = key
    return key
