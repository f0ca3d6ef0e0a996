"""reclaim.local.gcs_names (pure): the object name, and so the prefix, each JSON-API request
touches, as the counting proxy sees it on the wire."""

from __future__ import annotations

import json

import pytest

from reclaim.local.gcs_names import NO_OBJECT, UNKNOWN, WHOLE_BUCKET, name_prefix, object_name


def _multipart(meta: dict[str, str]) -> bytes:
    """A multipart/related upload body as the Python client sends it: metadata first."""
    return (
        b"--==0==\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n"
        + json.dumps(meta).encode()
        + b"\r\n--==0==\r\ncontent-type: application/json\r\n\r\n{}\r\n--==0==--"
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "name"),
    [
        ("GET", "/download/storage/v1/b/bk/o/jobs%2Fa.json?alt=media", b"", "jobs/a.json"),
        ("GET", "/storage/v1/b/bk/o/jobs%2Fa.json?projection=noAcl", b"", "jobs/a.json"),
        ("GET", "/storage/v1/b/bk/o?prefix=pending%2F&maxResults=15", b"", "pending/"),
        ("GET", "/storage/v1/b/bk/o?maxResults=15", b"", ""),
        (
            "POST",
            "/upload/storage/v1/b/bk/o?uploadType=multipart&ifGenerationMatch=0",
            _multipart({"name": "pending/a", "contentType": "text/plain"}),
            "pending/a",
        ),
        (
            "POST",
            "/upload/storage/v1/b/bk/o?uploadType=media&name=outputs%2Fx",
            b"raw",
            "outputs/x",
        ),
        ("POST", "/upload/storage/v1/b/bk/o?uploadType=resumable", b'{"name": "jobs/r"}', "jobs/r"),
        ("PUT", "/upload/storage/v1/b/bk/o?uploadType=resumable&upload_id=x", b"chunk", UNKNOWN),
        ("PATCH", "/storage/v1/b/bk/o/pending%2Fa", b"{}", "pending/a"),
        ("POST", "/storage/v1/b/bk/o/jobs%2Fa/rewriteTo/b/bk/o/outputs%2Fb", b"", "outputs/b"),
        ("POST", "/storage/v1/b/bk/o/outputs%2Fc/compose", b"{}", "outputs/c"),
        ("DELETE", "/storage/v1/b/bk/o/pending%2Fa", b"", "pending/a"),
        ("GET", "/storage/v1/b/bk?projection=noAcl", b"", None),
        ("POST", "/storage/v1/b?project=p", b"", None),
        ("GET", "/healthz", b"", None),
    ],
)
def test_object_name(method: str, path: str, body: bytes, name: str | None) -> None:
    assert object_name(method, path, body) == name


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("jobs/a.json", "jobs/"),
        ("ended/failed/20261202/a", "ended/"),
        ("pending/", "pending/"),
        ("sweep-cursor", "sweep-cursor"),
        ("", WHOLE_BUCKET),
        (None, NO_OBJECT),
        (UNKNOWN, UNKNOWN),
    ],
)
def test_name_prefix(name: str | None, prefix: str) -> None:
    assert name_prefix(name) == prefix
