"""Which object name one Cloud Storage JSON-API request touches, as a proxy sees it.

The counting proxy (reclaim.local.faultproxy) attributes each call to the top-level prefix
of the name it reads, writes or deletes, or of the prefix it lists (``jobs/``,
``pending/``, ``outputs/``, ...), so a benchmark can say where each class A
operation of a job comes from. Pure: the proxy and its tests share it.

Where the name lives (https://cloud.google.com/storage/docs/json_api/v1/objects):
the path for reads, metadata reads, patches and deletes (URL-encoded); the
``prefix`` query parameter for a listing; the ``name`` query parameter or the
JSON metadata part of the body for an upload (the Python client sends a
multipart upload whose first part is the metadata); the destination of a
rewrite, copy or compose.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, unquote, urlsplit

UNKNOWN = "?"
"""The name of an object request whose name the proxy cannot see (a resumable
upload's later chunks, a malformed body)."""
WHOLE_BUCKET = "(bucket)"
"""The prefix of a listing without a prefix."""
NO_OBJECT = "-"
"""The prefix of a request on no object (the bucket itself, admin calls)."""


def object_name(method: str, path: str, body: bytes = b"") -> str | None:
    """The object name (a listing: its prefix) one request touches, UNKNOWN if the
    proxy cannot see it; None for bucket and admin requests."""
    split = urlsplit(path)
    query = parse_qs(split.query)
    parts = split.path.strip("/").split("/")
    if parts[:1] in (["upload"], ["download"]):
        parts = parts[1:]
    if parts[:3] != ["storage", "v1", "b"] or len(parts) < 5 or parts[4] != "o":
        return None
    if split.path.startswith("/upload/"):
        return _upload_name(query, body)
    if len(parts) == 5:  # /b/<bucket>/o: a listing (GET) or a plain insert (POST)
        if method.upper() == "GET":
            return (query.get("prefix") or [""])[0]
        return _upload_name(query, body)
    name = [unquote(p) for p in parts[5:]]
    for verb in ("rewriteTo", "copyTo"):  # <src>/rewriteTo/b/<bucket>/o/<dst>
        if verb in name:
            return "/".join(name[name.index(verb) + 4 :])
    if name[-1] == "compose":
        name = name[:-1]
    return "/".join(name)


def name_prefix(name: str | None) -> str:
    """The top-level prefix a name falls under: ``jobs/`` for ``jobs/a.json``."""
    if name is None:
        return NO_OBJECT
    if name == "":
        return WHOLE_BUCKET
    head, slash, _ = name.partition("/")
    return head + slash


def _upload_name(query: dict[str, list[str]], body: bytes) -> str:
    if query.get("name"):
        return query["name"][0]
    meta = _metadata(body)
    name = meta.get("name") if meta else None
    return name if isinstance(name, str) and name else UNKNOWN


def _metadata(body: bytes) -> dict[str, object] | None:
    """The JSON metadata of an upload: the whole body (a resumable session's start) or
    the first part of a multipart/related body."""
    text = body.decode("utf-8", "replace").lstrip()
    if text.startswith("--"):  # multipart: --boundary, headers, blank line, JSON
        _, _, rest = text.partition("\r\n\r\n")
        text = rest.split("\r\n--", 1)[0]
    try:
        meta = json.loads(text)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None
