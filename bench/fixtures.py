"""Large fixtures, written the fast way: built by the real code on a MemoryStore, then
either handed to fake-gcs-server as the folder it loads at start (write_data_dir, the
sweep rows' 10,000 jobs: about 4x faster than uploading them) or copied object by object
over plain keep-alive HTTP on a few threads (copy_to_gcs, into a running one).

The objects carry the names and bytes the library wrote (the sweep rows list names and
read records; nothing they measure reads metadata), without the Python client's per-call
cost. fake-gcs-server's memory backend scans a bucket's objects on every insert, under
one lock, so filling one bucket stays quadratic in its size whoever writes
(https://github.com/fsouza/fake-gcs-server/issues/2357); repeats therefore start from an
emptied bucket (clear_bucket).
Upload API: https://cloud.google.com/storage/docs/uploading-objects (a simple media
upload, ``uploadType=media``).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from shared import logs
from shared.stores.memory import MemoryStore

THREADS = 8
MEMORY_DIR = "/dev/shm"
"""Where a -data folder is written when the machine has it: a file system in memory, so
that writing (and removing) tens of thousands of small files does not wait on a disk."""
_Send = Callable[[http.client.HTTPConnection, str], None]


class Progress:
    """A counter that reports `done/total` through `show` every `every` items."""

    def __init__(self, what: str, total: int, show: Callable[[str], None], every: int) -> None:
        self.what, self.total, self.show, self.every = what, total, show, every
        self.done = 0
        self._shown = 0
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.done - self._shown >= self.every or self.done >= self.total:
                self._shown = self.done
                self.show(f"{self.what}: {self.done:,}/{self.total:,}")


def _each(gcs_url: str, names: Sequence[str], send: _Send, progress: Progress | None) -> None:
    """send(connection, name) for every name, on THREADS keep-alive connections."""
    parts = urlsplit(gcs_url)
    step = max(1, min(250, len(names) // (THREADS * 2) or 1))

    def run(chunk: Sequence[str]) -> None:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
        try:
            for name in chunk:
                send(conn, name)
        finally:
            conn.close()
        if progress is not None:
            progress.advance(len(chunk))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, [names[i : i + step] for i in range(0, len(names), step)]))


def _answer(conn: http.client.HTTPConnection, what: str, ok: tuple[int, ...]) -> None:
    resp = conn.getresponse()
    body = resp.read()
    if resp.status not in ok:
        raise RuntimeError(f"{what} answered {resp.status}: {body[:200]!r}")


def copy_to_gcs(
    store: MemoryStore, gcs_url: str, bucket: str, progress: Progress | None = None
) -> int:
    """Every object of the store's records bucket, uploaded to `bucket` at gcs_url (new
    objects only: ifGenerationMatch=0); returns how many."""
    names = store.names()

    def upload(conn: http.client.HTTPConnection, name: str) -> None:
        obj = store.raw(store.bucket_name, name)
        if obj is None:
            return
        conn.request(
            "POST",
            f"/upload/storage/v1/b/{bucket}/o?uploadType=media&ifGenerationMatch=0"
            f"&name={quote(name, safe='')}",
            body=obj.data,
            headers={"Content-Type": obj.content_type or "application/octet-stream"},
        )
        _answer(conn, f"upload of {name}", (200,))

    _each(gcs_url, names, upload, progress)
    return len(names)


def data_dir_parent() -> str | None:
    """The parent for a -data folder: MEMORY_DIR when writable, else the default temp."""
    return MEMORY_DIR if os.access(MEMORY_DIR, os.W_OK) else None


@contextlib.contextmanager
def building() -> Iterator[None]:
    """While a fixture is built in memory, the library's own INFO lines (one "job
    created" per job) are not logged: they describe the fixture, not the run."""
    project = logging.getLogger(logs.ROOT)
    level = project.level
    project.setLevel(logging.WARNING)
    try:
        yield
    finally:
        project.setLevel(level)


def write_data_dir(
    store: MemoryStore, root: Path, leave_out: Callable[[str], bool] | None = None
) -> int:
    """The store's records bucket as fake-gcs-server's -data folder (root/<bucket>/<name>),
    which it loads before it listens: one insert per object, no HTTP; returns how many.
    Objects whose names `leave_out` accepts are not written."""
    names = [n for n in store.names() if leave_out is None or not leave_out(n)]
    for name in names:
        obj = store.raw(store.bucket_name, name)
        if obj is None:
            continue
        path = root / store.bucket_name / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(obj.data)
    return len(names)


def wait_loaded(gcs_url: str, bucket: str, timeout: float) -> None:
    """Until fake-gcs-server answers a listing of `bucket`: it accepts connections while
    it is still loading its -data folder, and answers once that is done."""
    parts = urlsplit(gcs_url)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"fake-gcs-server did not load {bucket} within {timeout:.0f} s")
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=left)
        try:
            conn.request("GET", f"/storage/v1/b/{bucket}/o?maxResults=1")
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.5)


def clear_bucket(client: Any, gcs_url: str, bucket: str) -> int:
    """Delete every object of `bucket` (listed with the official client); returns how many."""
    names = [b.name for b in client.list_blobs(bucket)]

    def delete(conn: http.client.HTTPConnection, name: str) -> None:
        conn.request("DELETE", f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}")
        _answer(conn, f"delete of {name}", (200, 204, 404))

    _each(gcs_url, names, delete, None)
    return len(names)
