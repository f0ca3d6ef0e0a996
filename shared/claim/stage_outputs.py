"""A stage's outputs: written under outputs/<id>/<attempt>/<name>, keyed by attempt, and
refused once this owner lost the job (shared.claim.owned: a fencing proof of ownership
before each output is committed).

`ctx.outputs.write(name, data)` writes bytes, text or a dict in one call. `ctx.outputs.
open(name)` streams a large output from disk without holding it in memory: a resumable
upload (OUTPUT_CHUNK_BYTES at a time, shared.storage), created at close only if this
owner still holds the job, create-only (a second output of that name in the same attempt
is refused). Use it in a `with` block; a stream the stage leaves open, or one whose block
raised, is discarded: nothing is created. Either way an output becomes the job's only
when its stage's checkpoint commits it (shared.outputs.committed).
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from shared.claim.owned import OwnedRecord
from shared.errors import OwnerLost, Stopped
from shared.storage import OutputSink, Store


class StageOutputs:
    """Stage output writer: keyed by attempt, refused once this owner lost the job."""

    def __init__(self, store: Store, owned: OwnedRecord, job_id: str, confirm_s: float) -> None:
        self._store = store
        self._owned = owned
        self._job_id = job_id
        self._confirm_s = confirm_s
        self.written: list[str] = []
        self._open: list[OutputStream] = []

    def write(
        self, name: str, data: bytes | str | Mapping[str, Any], content_type: str | None = None
    ) -> str:
        self.confirm(name)
        body, kind = encode_output(data, content_type)
        written = self._store.write_output(self._job_id, self._owned.attempt, name, body, kind)
        self.written.append(written)
        return written

    def open(self, name: str, content_type: str | None = None) -> OutputStream:
        """A writable binary stream for a large output (see the module doc)."""
        self.confirm(name)
        kind = content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        sink = self._store.open_output(self._job_id, self._owned.attempt, name, kind)
        stream = OutputStream(self, name, sink)
        self._open.append(stream)
        return stream

    def confirm(self, name: str) -> None:
        """Prove this owner still holds the job (a fencing heartbeat when the last proof is
        old); Stopped if it lost it."""
        try:
            self._owned.confirm(self._confirm_s)
        except OwnerLost:
            raise Stopped(f"output {name!r} refused: this owner lost the job") from None

    def discard_open(self) -> list[str]:
        """Abort every stream the stage left open (none is created); their names."""
        left = [s for s in self._open if not s.closed]
        for stream in left:
            stream.abort()
        self._open.clear()
        return [s.name for s in left]

    def _committed(self, stream: OutputStream, written: str) -> None:
        self.written.append(written)
        if stream in self._open:
            self._open.remove(stream)


class OutputStream:
    """`ctx.outputs.open(name)`: write bytes to it; close() (the end of its `with` block)
    creates the output, if this owner still holds the job; an exception in the block
    discards it."""

    def __init__(self, outputs: StageOutputs, name: str, sink: OutputSink) -> None:
        self._outputs = outputs
        self.name = name
        self._sink = sink
        self.closed = False
        self.object: str | None = None
        """The object's name once closed (outputs/<id>/<attempt>/<name>)."""

    def writable(self) -> bool:
        return not self.closed

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self.closed:
            raise ValueError(f"output {self.name!r} is closed")
        self._sink.write(bytes(data))
        return len(data)

    def close(self) -> None:
        """Create the output (once); Stopped, and nothing created, if this owner lost the
        job; AlreadyExists if this attempt wrote one of that name already."""
        if self.closed:
            return
        self.closed = True
        try:
            self._outputs.confirm(self.name)
        except Stopped:
            self._sink.abort()
            raise
        self.object = self._sink.commit()
        self._outputs._committed(self, self.object)

    def abort(self) -> None:
        """Discard what was written: nothing is created."""
        if not self.closed:
            self.closed = True
            self._sink.abort()

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


def encode_output(
    data: bytes | str | Mapping[str, Any], content_type: str | None
) -> tuple[bytes, str]:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), content_type or "application/octet-stream"
    if isinstance(data, str):
        return data.encode("utf-8"), content_type or "text/plain; charset=utf-8"
    if isinstance(data, Mapping):
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
        return text.encode("utf-8"), content_type or "application/json"
    raise TypeError(f"an output must be bytes, str or a dict, not {type(data).__name__}")
