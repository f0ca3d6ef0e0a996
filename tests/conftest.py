"""Session fixtures: the real local cloud (fake-gcs-server and the Pub/Sub
emulator), started by the tests themselves on free ports; CI has no services.

Per-test isolation comes from unique names (buckets, topics, subscriptions).
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local.gcs import start_fake_gcs
from local.procs import free_port, spawn, stop, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / ".local-cloud" / "test-logs"
PROJECT = "reclaim-test"

# One seed for every generated attack (tests/fuzz): set here, before any test module
# is imported, so that the header can print it and RECLAIM_FUZZ_SEED replays a run.
FUZZ_SEED_VAR = "RECLAIM_FUZZ_SEED"
if not os.environ.get(FUZZ_SEED_VAR, "").strip():
    os.environ[FUZZ_SEED_VAR] = str(random.SystemRandom().randrange(2**32))


def pytest_report_header(config: object) -> str:
    seed = os.environ[FUZZ_SEED_VAR]
    return f"reclaim fuzz seed: {seed} (replay: {FUZZ_SEED_VAR}={seed})"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seed = os.environ[FUZZ_SEED_VAR]
    terminalreporter.write_line(f"reclaim fuzz seed: {seed} (replay: {FUZZ_SEED_VAR}={seed})")


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """Each test starts with the functions' logging (the CLI, run in process, changes it)."""
    from shared import logs

    logs.configure("INFO")
    yield
    logs.configure("INFO")


@pytest.fixture(scope="session")
def log_dir() -> Path:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return LOG_DIR


@pytest.fixture(scope="session")
def pubsub_emulator(log_dir: Path) -> Iterator[str]:
    """host:port of a Pub/Sub emulator process (local.pubsub_emulator)."""
    port = free_port()
    proc = spawn(
        [sys.executable, "-m", "local.pubsub_emulator", "--host", "127.0.0.1", "--port", str(port)],
        log_path=log_dir / "pubsub-emulator.log",
        cwd=ROOT,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def gcs_server(log_dir: Path) -> Iterator[str]:
    """http://host:port of a fake-gcs-server process (no notifications)."""
    port = free_port()
    proc = start_fake_gcs("127.0.0.1", port, log_path=log_dir / "fake-gcs.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def emulator_env(pubsub_emulator: str, gcs_server: str) -> Iterator[dict[str, str]]:
    """Point the official clients in this process at the emulators."""
    env = {
        "PUBSUB_EMULATOR_HOST": pubsub_emulator,
        "STORAGE_EMULATOR_HOST": gcs_server,
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def unique() -> Callable[[str], str]:
    """unique('jobs') -> 'jobs-3f2a...': names that no other test uses."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def gcs_client(emulator_env: dict[str, str]):  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=PROJECT, credentials=AnonymousCredentials())


@pytest.fixture
def bucket(gcs_client, unique):  # type: ignore[no-untyped-def]
    """A fresh, empty bucket on fake-gcs-server."""
    return gcs_client.create_bucket(unique("bucket"))


@pytest.fixture(scope="session")
def publisher(emulator_env: dict[str, str]):  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient()
    yield client
    client.transport.close()


@pytest.fixture(scope="session")
def subscriber(emulator_env: dict[str, str]):  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    yield client
    client.close()
