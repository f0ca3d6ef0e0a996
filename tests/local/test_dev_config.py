"""LOCAL_* settings of `make dev` (pure: no process is started)."""

from __future__ import annotations

import socket

import pytest

from local.cloud import ROOT, CloudConfig, FunctionSpec
from local.dev import LaunchConfigError, _prepare, config_from_env, run, unknown_vars


def test_defaults_are_the_documented_ports():
    c = config_from_env({})
    assert (c.pubsub_port, c.gcs_port, c.submit_port) == (8085, 4443, 8080)
    assert c.claim_instances == 2 and c.max_concurrent == 4
    assert c.log_dir == ROOT / ".local-cloud" / "logs"
    assert c.topology.project == "reclaim-local"
    assert c.functions_storage_host is None


def test_overrides_reach_config_and_topology():
    c = config_from_env(
        {
            "LOCAL_PUBSUB_PORT": "0",
            "LOCAL_CLAIM_INSTANCES": "3",
            "LOCAL_STALE_SECONDS": "7.5",
            "LOCAL_RECORDS_BUCKET": "r1",
            "LOCAL_UPLOADS_BUCKET": "u1",
            "LOCAL_PROJECT": "p1",
            "LOCAL_EMULATOR_ADMIN_PORT": "off",
            "LOCAL_SEED": "42",
            "LOCAL_LOG_DIR": "/tmp/x",
            "LOCAL_FUNCTION_ENV": "RECLAIM_MAX_ATTEMPTS=5, RECLAIM_LOG_LEVEL=DEBUG",
            "LOCAL_FUNCTION_SOURCES": "claim=tests/local/fake_functions.py:echo",
        }
    )
    assert c.pubsub_port == 0 and c.claim_instances == 3 and c.stale_seconds == 7.5
    assert (c.topology.project, c.topology.records_bucket, c.topology.uploads_bucket) == (
        "p1",
        "r1",
        "u1",
    )
    assert c.emulator_admin_port is None and c.seed == 42 and str(c.log_dir) == "/tmp/x"
    assert c.function_env == {"RECLAIM_MAX_ATTEMPTS": "5", "RECLAIM_LOG_LEVEL": "DEBUG"}
    assert c.functions["claim"] == FunctionSpec("tests/local/fake_functions.py", "echo")
    assert c.functions["submit"].target == "submit"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LOCAL_PUBSUB_PORT": "abc"}, "LOCAL_PUBSUB_PORT"),
        ({"LOCAL_GCS_PORT": "70000"}, "LOCAL_GCS_PORT"),
        ({"LOCAL_CLAIM_INSTANCES": "0"}, "LOCAL_CLAIM_INSTANCES"),
        ({"LOCAL_STALE_SECONDS": "1"}, "stale_seconds"),
        ({"LOCAL_DUPLICATE_FRACTION": "1.5"}, "duplicate_fraction"),
        ({"LOCAL_SUBMIT_PORT": "4443"}, "ports collide"),
        ({"LOCAL_CLAIM_BASE_PORT": "8084", "LOCAL_CLAIM_INSTANCES": "3"}, "ports collide"),
        ({"LOCAL_UPLOADS_BUCKET": "reclaim-records"}, "buckets must differ"),
        ({"LOCAL_FUNCTION_ENV": "JUSTAKEY"}, "LOCAL_FUNCTION_ENV"),
        ({"LOCAL_FUNCTION_SOURCES": "nope=a.py:b"}, "LOCAL_FUNCTION_SOURCES"),
        ({"LOCAL_MIN_BACKOFF_SECONDS": "20", "LOCAL_MAX_BACKOFF_SECONDS": "5"}, "backoffs"),
    ],
)
def test_bad_values_name_the_problem(env, named):
    with pytest.raises(LaunchConfigError, match=named):
        config_from_env(env)


def test_unknown_local_vars_are_reported():
    assert unknown_vars({"LOCAL_PUBSUB_PROT": "1", "LOCAL_GCS_PORT": "1", "HOME": "/"}) == [
        "LOCAL_PUBSUB_PROT"
    ]


def test_help_and_stray_arguments(capsys):
    assert run(["--help"]) == 0
    assert "LOCAL_CLAIM_INSTANCES" in capsys.readouterr().out
    assert run(["start"]) == 2
    assert "no arguments expected" in capsys.readouterr().err


def test_a_busy_port_is_refused_before_anything_starts(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        zeros = {
            f"LOCAL_{k}_PORT": "0"
            for k in (
                "PUBSUB",
                "GCS",
                "SUBMIT_UPLOAD",
                "CLAIM",
                "SWEEP",
                "CLAIM_BASE",
                "EMULATOR_ADMIN",
            )
        }
        env = {**zeros, "LOCAL_SUBMIT_PORT": str(port)}
        assert _prepare([], env) == 2
    assert f"submit_port={port}" in capsys.readouterr().err
    assert isinstance(_prepare([], {**env, "LOCAL_SUBMIT_PORT": "0"}), CloudConfig)
