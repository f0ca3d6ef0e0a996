"""shared.config: the settings table, the generic loader and the derived timings."""

from __future__ import annotations

import pytest

from shared.config import ENV_VARS, EnvVar, Settings, read_env, unknown_names
from shared.errors import ConfigError, ReclaimError
from shared.jobs import JobStatus


def test_every_default_parses_and_fills_one_field() -> None:
    values = read_env(ENV_VARS, {})
    assert set(values) == {var.field for var in ENV_VARS}
    assert Settings.from_env({}) == Settings(**values)


def test_entries_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        EnvVar("X_A", "a", "1", int, "doc")


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("RECLAIM_STALE_SECONDS", "soon", "could not convert"),
        ("RECLAIM_STALE_SECONDS", "1", "must be >= 3"),
        ("RECLAIM_MAX_CONCURRENT", "0", "must be >= 1"),
        ("RECLAIM_RECORDS_BUCKET", "a/b", "without spaces or '/'"),
        ("RECLAIM_PIPELINE_MODULES", "ok, not-a.module", "dotted module name"),
        ("RECLAIM_LOG_LEVEL", "LOUD", "DEBUG, INFO, WARNING, ERROR"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: raw})
    assert f"{name}={raw!r} is invalid" in str(info.value) and says in str(info.value)


def test_values_are_stripped_and_parsed() -> None:
    s = Settings.from_env(
        {
            "RECLAIM_MAX_ATTEMPTS": " 5 ",
            "RECLAIM_PIPELINE_MODULES": "a.b, c",
            "RECLAIM_LOG_LEVEL": "debug",
        }
    )
    assert (s.max_attempts, s.pipeline_modules, s.log_level) == (5, ("a.b", "c"), "DEBUG")


def test_backoff_bounds_must_be_ordered() -> None:
    env = {"RECLAIM_BACKOFF_BASE_SECONDS": "10", "RECLAIM_BACKOFF_MAX_SECONDS": "5"}
    with pytest.raises(ConfigError, match="BACKOFF_MAX"):
        Settings.from_env(env)


def test_the_loader_reads_any_table() -> None:
    table = (
        EnvVar(name="X_PORT", field="port", default="80", parse=int, doc="a port", minimum=1),
        EnvVar(name="X_HOST", field="host", default="h", parse=str, doc="a host"),
    )
    assert read_env(table, {"X_PORT": "8080"}) == {"port": 8080, "host": "h"}
    with pytest.raises(ConfigError, match="X_PORT='0' is invalid: must be >= 1"):
        read_env(table, {"X_PORT": "0"})
    assert unknown_names(table, {"X_PORT": "1", "X_PROT": "2", "Y": "3"}, "X_") == ["X_PROT"]


def test_a_config_error_is_a_reclaim_error_and_a_value_error() -> None:
    assert issubclass(ConfigError, ReclaimError) and issubclass(ConfigError, ValueError)


def test_timings_follow_the_stale_time() -> None:
    s = Settings.from_env({}, stale_seconds=120.0, min_write_interval_seconds=1.0)
    assert s.heartbeat_seconds == 40.0
    assert s.heartbeat_tick_seconds == 0.5  # twice per write interval
    assert s.ownership_confirm_seconds == 60.0
    assert s.busy_retry_after_seconds == 30.0
    assert s.drain_interval_seconds == 30.0
    assert s.backlog_window_seconds == 120.0
    assert s.overdue_after_seconds == 60.0
    assert s.orphan_marker_grace_seconds == 240.0


def test_timings_stay_in_their_bounds() -> None:
    short = Settings.from_env({}, stale_seconds=3.0, min_write_interval_seconds=0.0)
    assert short.busy_retry_after_seconds == 1.0  # never below 1 s
    assert short.heartbeat_tick_seconds == 0.025  # the write floor of 0.05 s, halved
    slow = Settings.from_env({}, stale_seconds=3600.0, min_write_interval_seconds=60.0)
    assert slow.busy_retry_after_seconds == 30.0 and slow.heartbeat_tick_seconds == 5.0


def test_retention_is_keyed_by_terminal_status() -> None:
    s = Settings.from_env({"RECLAIM_RETENTION_DAYS_FAILED": "7"})
    assert s.retention_days == {JobStatus.DONE: 30, JobStatus.FAILED: 7, JobStatus.CANCELLED: 30}
    assert s.retention_days["failed"] == 7  # members are the stored strings
