"""The command line itself: options in either place, defaults that match the launcher."""

from __future__ import annotations

import pytest

from reclaim import cli
from reclaim.cli import context as cli_context
from reclaim.local import dev, wiring


def test_common_options_work_before_or_after_the_command() -> None:
    parser = cli.build_parser()
    before = parser.parse_args(["--json", "--bucket", "b1", "status", "j1"])
    after = parser.parse_args(["status", "j1", "--json", "--bucket", "b1"])
    for args in (before, after):
        assert (args.json, args.bucket, args.job) == (True, "b1", "j1")
    assert not hasattr(parser.parse_args(["sweep"]), "json")  # unset: settings decide


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--limit", "0"],
        ["list", "--status", "lost"],
        ["watch", "b", "--interval", "-1"],
        ["submit", "demo", "--payload", "{}", "--from", "x.jsonl"],
        ["frobnicate"],
        [],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage: reclaim" in capsys.readouterr().err


def test_a_bad_setting_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RECLAIM_MAX_ATTEMPTS", "many")
    assert cli.main(["sweep"]) == 2
    assert "RECLAIM_MAX_ATTEMPTS" in capsys.readouterr().err


def test_local_defaults_match_the_launcher_and_the_wiring() -> None:
    defaults = {var.field: var.default for var in dev.VARS}
    host = defaults["host"]
    assert f"http://{host}:{defaults['gcs_port']}" == cli_context.LOCAL_STORAGE_EMULATOR_HOST
    assert f"{host}:{defaults['pubsub_port']}" == cli_context.LOCAL_PUBSUB_EMULATOR_HOST
    assert cli_context.DEFAULT_DEAD_LETTER_SUBSCRIPTION == wiring.DEAD_LETTER_SUBSCRIPTION
