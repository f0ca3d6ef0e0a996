"""Session fixtures: the real local cloud (fake-gcs-server and the Pub/Sub
emulator), started by the tests themselves on free ports; CI has no services.

Per-test isolation comes from unique names (buckets, topics, subscriptions). Under
pytest-xdist (`make test`) each worker is a session of its own: its own emulators on
their own ports, its own log folder.
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reclaim.local.gcs import start_fake_gcs
from reclaim.local.procs import free_port, spawn, stop, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / ".local-cloud" / "test-logs"
PROJECT = "reclaim-test"

# One seed for every generated attack (tests/fuzz): set here, before any test module
# is imported, so that the header can print it and RECLAIM_FUZZ_SEED replays a run.
FUZZ_SEED_VAR = "RECLAIM_FUZZ_SEED"
if not os.environ.get(FUZZ_SEED_VAR, "").strip():
    os.environ[FUZZ_SEED_VAR] = str(random.SystemRandom().randrange(2**32))


# Each xdist worker gives out ports from a block of its own (reclaim.local.procs.free_port), so
# that no two workers' children ever race for one. RECLAIM_PORT_LANE="i/n" first narrows a
# whole run to the i-th of n lanes, so that test runs of checkouts side by side (two
# worktrees on one machine) never share a port either; the workers split the lane.
_LANE, _LANES = (int(x) for x in os.environ.get("RECLAIM_PORT_LANE", "0/1").split("/"))
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER:
    _INDEX, _COUNT = int(_WORKER.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ["RECLAIM_PORT_BLOCK"] = f"{_LANE * _COUNT + _INDEX}/{_LANES * _COUNT}"
elif _LANES > 1:
    os.environ["RECLAIM_PORT_BLOCK"] = f"{_LANE}/{_LANES}"


# The longest modules, longest first (each module's time in a `make test` run). xdist's
# --dist loadfile hands out whole modules in collection order (with --no-loadscope-reorder,
# pyproject), so a long module left to the end would set the wall time; the rest keep
# their order. A stale entry costs only time: nothing depends on the order.
SLOW_FIRST = (
    "tests/chaos/test_fanout_chaos.py",  # a 1,000-child fan-out under kills: minutes
    "tests/library/test_install.py",
    "tests/fuzz/test_submit_api.py",
    "tests/cli/test_cli.py",
    "tests/chaos/test_chaos.py",
    "tests/integration/test_flow_control.py",
    "tests/browser/test_dashboard_browser.py",
    "tests/fuzz/test_cli_hostile.py",
    "tests/integration/test_push_deadline.py",
    "tests/integration/test_blocking_stage.py",
    "tests/local/test_cloudrun_platform.py",
    "tests/terraform/test_tf_schema.py",
    "tests/unit/test_policy_properties.py",
    "tests/fuzz/test_hostile_http.py",
    "tests/terraform/test_tf_packaging.py",
    "tests/integration/test_workflows_http.py",
    "tests/integration/test_waits_http.py",
    "tests/integration/test_queue_e2e.py",
    "tests/integration/test_handback.py",
    "tests/local/test_cloudrun_revisions.py",
    "tests/integration/test_rollout.py",
    "tests/local/test_cloud.py",
    "tests/chaos/test_rollout_fault.py",
    "tests/integration/test_submit_http.py",
    "tests/chaos/test_demo.py",
    "tests/cli/test_cli_time.py",
    "tests/integration/test_time_http.py",
    "tests/integration/test_versions_http.py",
    "tests/cli/test_dlq_short_pulls.py",
    "tests/integration/test_run_jobs.py",
    "tests/integration/test_pools_http.py",
    "tests/chaos/test_demo_pools.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _unique_node_ids(items)
    rank = {module: i for i, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def _unique_node_ids(items: list[pytest.Item]) -> None:
    """xdist schedules by node id: items sharing one would run once. schemathesis 4.32 under
    pytest 9.2 names each operation's item `test[POST /jobs]` but gives all of them the
    bare test's id; give each the id its name says. Any other clash stops the run."""
    from _pytest.nodeid import NodeId

    counts = Counter(item.nodeid for item in items)
    for item in items:
        named = f"{item.parent.nodeid}::{item.name}" if item.parent else item.nodeid
        if counts[item.nodeid] > 1 and named != item.nodeid:
            item._id = NodeId.parse(named)
    clashes = sorted(n for n, c in Counter(item.nodeid for item in items).items() if c > 1)
    if clashes:
        raise pytest.UsageError(f"tests share a node id (xdist would run one): {clashes}")


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
    """The session's log folder: one per xdist worker (gw0, gw1, ...), as each worker runs
    its own emulators and function processes under the same file names."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = LOG_DIR / worker if worker else LOG_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def pubsub_emulator(log_dir: Path) -> Iterator[str]:
    """host:port of a Pub/Sub emulator process (reclaim.local.pubsub_emulator)."""
    port = free_port()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "reclaim.local.pubsub_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log_path=log_dir / "pubsub-emulator.log",
        cwd=ROOT,
        die_with_parent=True,  # a crashed xdist worker leaves no emulator behind
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
