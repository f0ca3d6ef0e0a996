"""The README documents what the code does: every setting with its real default."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import ENV_VARS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("var", ENV_VARS, ids=lambda v: v.name)
def test_every_setting_is_documented_with_its_default(var) -> None:  # type: ignore[no-untyped-def]
    assert f"| `{var.name}` | `{var.default}` |" in README


def test_the_two_commands_are_there() -> None:
    assert "make demo" in README and "make test" in README
