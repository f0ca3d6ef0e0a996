"""An emulator instance of our own, with the admin port, for stats and fault tests.

The shared session emulator (tests/conftest.py::pubsub_emulator) has no admin
port and must stay fault-free; this one is ours to reconfigure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulator.emulator_support import AdminEmulator, Recorder, run_emulator


@pytest.fixture(scope="session")
def admin_emulator(log_dir: Path) -> Iterator[AdminEmulator]:
    with run_emulator(log_dir) as emulator:
        yield emulator


@pytest.fixture
def faults(admin_emulator: AdminEmulator) -> Iterator[AdminEmulator]:
    """The admin emulator, with its fault knobs reset to off afterwards."""
    try:
        yield admin_emulator
    finally:
        admin_emulator.set_faults(duplicate_fraction=0.0, drop_publish_fraction=0.0)


@pytest.fixture
def recorder() -> Iterator[Callable[[Callable[[dict[str, Any]], int]], Recorder]]:
    made: list[Recorder] = []

    def make(respond: Callable[[dict[str, Any]], int] = lambda _: 200) -> Recorder:
        made.append(Recorder(respond))
        return made[-1]

    yield make
    for r in made:
        r.httpd.shutdown()
        r.httpd.server_close()
