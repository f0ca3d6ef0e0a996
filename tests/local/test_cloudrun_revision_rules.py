"""The local Cloud Run's revision rules (pure): names, environments, the contract's variables."""

from __future__ import annotations

import random
import re

import pytest

from reclaim.local.cloudrun.config import ConfigError
from reclaim.local.cloudrun.revision import RESERVED_ENV, Revision, merged_env, revision_name


def test_names_are_service_sequence_and_a_random_suffix() -> None:
    names = {revision_name("claim", 2, random.Random(seed)) for seed in range(20)}
    assert all(re.fullmatch(r"claim-00002-[a-z]{3}", n) for n in names)
    assert len(names) > 1  # the suffix is random
    assert revision_name("submit", 123).startswith("submit-00123-")


def test_a_deploy_changes_the_previous_environment() -> None:
    previous = {"A": "1", "B": "2"}
    assert merged_env(previous, {"B": "3", "C": "4"}) == {"A": "1", "B": "3", "C": "4"}
    assert merged_env(previous, {"A": None, "Z": None}) == {"B": "2"}
    assert merged_env(previous, None) == previous and previous == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    "changes",
    [{name: "x"} for name in RESERVED_ENV] + [{"1A": "x"}, {"A-B": "x"}, {"A": 1}, {"A": True}],
)
def test_a_deploy_may_not_set_the_contracts_variables_or_bad_ones(changes: dict) -> None:
    with pytest.raises(ConfigError):
        merged_env({}, changes)


def test_an_instance_sees_its_revision_and_the_contracts_variables_last() -> None:
    rev = Revision("claim", 2, {"X": "rev", "K_REVISION": "forged"}, lambda *_: None, 0.0)  # type: ignore[arg-type,return-value]
    env = rev.instance_env({"X": "base", "Y": "base", "PORT": "1"}, 8080)
    assert env["X"] == "rev" and env["Y"] == "base"
    assert (env["PORT"], env["K_SERVICE"], env["K_REVISION"], env["K_CONFIGURATION"]) == (
        "8080",
        "claim",
        rev.name,
        "claim",
    )
    with pytest.raises(ConfigError):
        Revision("claim", 3, {}, lambda *_: None, 0.0, drain_timeout_s=-1)  # type: ignore[arg-type,return-value]
