"""A job's outputs over HTTP: GET /jobs/<id>/outputs and GET /jobs/<id>/outputs/<name>.

The submit function serves both (docs/api.md, "Outputs"), the dashboard the download (its
job page links each output). Only committed outputs are offered (shared.outputs.committed).

A download on GCP is a redirect (302) to a V4 signed URL of the object, good for
SIGNED_URL_SECONDS: the bytes go from Cloud Storage to the caller, never through the
function, whatever their size (shared.stores.gcs.GcsStore.output_url says how a Cloud Run
service account signs without a key file). Where no URL can be signed (the local cloud's
fake-gcs-server, a memory store), the function streams the object itself, in chunks, with
its type and length: the same path answers the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

import flask

from shared import params
from shared.errors import InvalidInput, NotFound
from shared.http.edge import Refusal, answer
from shared.outputs import committed

if TYPE_CHECKING:
    from shared.queue import Queue

SIGNED_URL_SECONDS = 900.0
"""How long a download's signed URL works (15 minutes: enough to start a large download,
short enough that a leaked link soon stops working)."""
STREAM_PIECE_BYTES = 1024 * 1024
"""What a streamed download reads and sends at a time."""


def listing(queue: Queue, job_id: str) -> flask.Response:
    """GET /jobs/<id>/outputs: the committed outputs, each with its size, attempt and
    download path."""
    record = queue.read(job_id)
    found = committed.committed(queue.store, record)
    return answer(200, {"job_id": job_id, "outputs": [o.to_json() for o in found]})


def download(queue: Queue, request: flask.Request, job_id: str, name: str) -> flask.Response:
    """GET /jobs/<id>/outputs/<name>[?attempt=N]: a redirect to a signed URL, or the bytes."""
    unknown = sorted(set(request.args) - {"attempt"})
    if unknown:
        raise InvalidInput(f"unknown parameters {', '.join(u[:40] for u in unknown[:5])}", "query")
    attempt = _attempt(request.args.get("attempt"))
    record = queue.read(job_id)
    try:
        obj = committed.locate(record, name, attempt)
        url = queue.store.output_url(job_id, obj, SIGNED_URL_SECONDS)
        if url is not None:
            headers = {"Location": url, "Cache-Control": "no-store"}
            return flask.Response(status=302, headers=headers)
        stream, info = queue.store.read_output(job_id, obj)
    except NotFound as exc:
        raise Refusal(404, "not found", str(exc)) from None
    filename = name.rsplit("/", 1)[-1].replace('"', "")
    return flask.Response(
        _pieces(stream),
        mimetype=info.content_type or "application/octet-stream",
        headers={
            "Content-Length": str(info.size),
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
        direct_passthrough=True,
    )


def _attempt(value: str | None) -> int | None:
    """`?attempt=`, read by the one reader of integers (shared.params)."""
    return None if value is None else params.integer(value, "attempt", low=0, high=10**9)


def _pieces(stream: BinaryIO) -> Iterator[bytes]:
    try:
        while piece := stream.read(STREAM_PIECE_BYTES):
            yield piece
    finally:
        stream.close()
