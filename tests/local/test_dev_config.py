"""LOCAL_* settings of `make dev` (pure: no process is started)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from reclaim.local.cloud import ROOT, CloudConfig, FunctionSpec
from reclaim.local.dev import (
    LaunchConfigError,
    _prepare,
    config_from_env,
    plan,
    retired_vars,
    run,
    unknown_vars,
)


def test_defaults_are_the_documented_ports():
    c = config_from_env({})
    assert (c.pubsub_port, c.gcs_port, c.submit_port) == (8085, 4443, 8080)
    assert (c.max_instances, c.min_instances, c.concurrency) == (2, 0, 4)
    assert (c.idle_timeout_seconds, c.shutdown_grace_seconds) == (60, 10)
    assert c.pending_timeout_seconds is None and c.push_window == "adaptive"
    assert c.cloudrun_admin_port == 8087
    assert c.log_dir == ROOT / ".local-cloud" / "logs"
    assert c.topology.project == "reclaim-local"
    assert c.functions_storage_host is None


def test_overrides_reach_config_and_topology():
    c = config_from_env(
        {
            "LOCAL_PUBSUB_PORT": "0",
            "LOCAL_CLAIM_MAX_INSTANCES": "3",
            "LOCAL_CLAIM_MIN_INSTANCES": "1",
            "LOCAL_CLAIM_CONCURRENCY": "6",
            "LOCAL_IDLE_TIMEOUT_SECONDS": "5",
            "LOCAL_SHUTDOWN_GRACE_SECONDS": "2",
            "LOCAL_PENDING_TIMEOUT_SECONDS": "3",
            "LOCAL_PUSH_WINDOW": "fixed",
            "LOCAL_CLOUDRUN_ADMIN_PORT": "off",
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
    assert c.pubsub_port == 0 and c.max_instances == 3 and c.stale_seconds == 7.5
    assert (c.min_instances, c.concurrency, c.idle_timeout_seconds) == (1, 6, 5)
    assert (c.shutdown_grace_seconds, c.pending_timeout_seconds) == (2, 3)
    assert c.push_window == "fixed" and c.cloudrun_admin_port is None
    claim = c.service_config("claim")
    assert (claim.concurrency, claim.max_instances, claim.min_instances) == (6, 3, 1)
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
        ({"LOCAL_CLAIM_MAX_INSTANCES": "0"}, "max_instances"),
        ({"LOCAL_CLAIM_MAX_INSTANCES": "x"}, "LOCAL_CLAIM_MAX_INSTANCES"),
        ({"LOCAL_CLAIM_MIN_INSTANCES": "3"}, "min_instances"),
        ({"LOCAL_CLAIM_CONCURRENCY": "0"}, "concurrency"),
        ({"LOCAL_IDLE_TIMEOUT_SECONDS": "-1"}, "idle_timeout"),
        ({"LOCAL_SHUTDOWN_GRACE_SECONDS": "-1"}, "shutdown_grace"),
        ({"LOCAL_PENDING_TIMEOUT_SECONDS": "0"}, "pending_timeout"),
        ({"LOCAL_PUSH_WINDOW": "wide"}, "LOCAL_PUSH_WINDOW"),
        ({"LOCAL_STALE_SECONDS": "1"}, "stale_seconds"),
        ({"LOCAL_DUPLICATE_FRACTION": "1.5"}, "duplicate_fraction"),
        ({"LOCAL_SUBMIT_PORT": "4443"}, "ports collide"),
        ({"LOCAL_CLOUDRUN_ADMIN_PORT": "8080"}, "ports collide"),
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


def test_retired_settings_say_what_replaced_them():
    env = {"LOCAL_CLAIM_INSTANCES": "3", "LOCAL_MAX_CONCURRENT": "4"}
    assert unknown_vars(env) == []
    said = retired_vars(env)
    assert len(said) == 2 and "LOCAL_CLAIM_MAX_INSTANCES" in said[0]
    assert "LOCAL_CLAIM_CONCURRENCY" in said[1]


def test_make_dev_says_what_it_runs():
    env = {"LOCAL_CLAIM_MAX_INSTANCES": "3", "LOCAL_PUSH_WINDOW": "fixed"}
    text = plan(config_from_env(env), env)
    assert "python -m reclaim.local.pubsub_emulator" in text and "--push-window fixed" in text
    assert "claim          functions/claim/main.py:claim  concurrency 4 (THREADS)" in text
    assert "instances 0..3, timeout 1800 s" in text
    assert "sweep          functions/sweep/main.py:sweep  concurrency 1" in text
    assert "idle 60 s -> SIGTERM, 10 s grace -> SIGKILL" in text
    assert "LOCAL_CLAIM_MAX_INSTANCES=3, LOCAL_PUSH_WINDOW=fixed" in text
    assert "cron               the schedules of " in text and "schedules.json" in text


def test_help_and_stray_arguments(capsys):
    assert run(["--help"]) == 0
    assert "LOCAL_CLAIM_MAX_INSTANCES" in capsys.readouterr().out
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
                "EMULATOR_ADMIN",
                "CLOUDRUN_ADMIN",
            )
        }
        env = {**zeros, "LOCAL_SUBMIT_PORT": str(port)}
        assert _prepare([], env) == 2
    assert f"submit_port={port}" in capsys.readouterr().err
    assert isinstance(_prepare([], {**env, "LOCAL_SUBMIT_PORT": "0"}), CloudConfig)


def test_make_dev_refuses_a_bad_schedules_file_naming_the_entry(tmp_path, capsys):
    """The file terraform refuses at plan (or an entry whose pipeline the functions would
    not load) stops `make dev` at start, with the entry named."""
    path = tmp_path / "schedules.json"
    good = {"name": "hourly", "cron": "7 * * * *", "pipeline": "demo"}
    ports = ("PUBSUB", "GCS", "SUBMIT", "SUBMIT_UPLOAD", "CLAIM", "SWEEP", "EMULATOR_ADMIN")
    zeros = {f"LOCAL_{k}_PORT": "0" for k in (*ports, "CLOUDRUN_ADMIN")}
    env = {**zeros, "RECLAIM_SCHEDULES_FILE": str(path)}
    for bad, reason in (
        ({"name": "month-end", "cron": "0 0 L * *", "pipeline": "demo"}, "'L'"),
        ({"name": "gone", "cron": "7 * * * *", "pipeline": "nope"}, "'nope' is unknown"),
    ):
        path.write_text(json.dumps({"schedules": [good, bad]}))
        assert _prepare([], env) == 2
        err = capsys.readouterr().err
        assert bad["name"] in err and reason in err, err
    path.write_text(json.dumps({"schedules": [good]}))
    assert isinstance(_prepare([], env), CloudConfig)


def test_make_dev_shows_the_pools_and_refuses_a_bad_pools_file(tmp_path, capsys):
    """Each pool's claim service, topic and pipelines are said before anything starts; a
    pools file terraform would refuse stops `make dev`, naming the pool."""
    good = tmp_path / "pools.json"
    good.write_text(json.dumps({"pools": {"heavy": {"pipelines": ["demo"], "concurrency": 1}}}))
    env = {"RECLAIM_POOLS_FILE": str(good)}
    config = config_from_env(env)
    assert config.service_names()[-1] == "claim-heavy"
    assert config.service_config("claim-heavy").concurrency == 1
    text = plan(config, env)
    assert "claim-heavy" in text and "reclaim-jobs-heavy" in text
    assert "every pipeline no pool names" in text
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"pools": {"heavy": {"pipelines": ["demo"], "cpu": "0.5"}}}))
    assert _prepare([], {"RECLAIM_POOLS_FILE": str(bad)}) == 2
    err = capsys.readouterr().err
    assert "pool 'heavy': concurrency > 1 needs cpu >= 1" in err, err


def test_your_folders_follow_the_library_on_the_functions_path(tmp_path):
    """LOCAL_PYTHONPATH (reclaim dev: the project) reaches every function's PYTHONPATH,
    after the library's folder, so a project's package imports and never shadows ours."""
    from reclaim.local.cloud import LocalCloud

    c = config_from_env({"LOCAL_PYTHONPATH": f"{tmp_path}{os.pathsep}relative"})
    assert c.python_path == (tmp_path, Path("relative").resolve())
    cloud, plain = LocalCloud(c), LocalCloud(config_from_env({}))
    for unstarted in (cloud, plain):
        unstarted._resolve_ports()  # free ports only: nothing is started
    folders = cloud._function_env(threads=2)["PYTHONPATH"].split(os.pathsep)
    assert folders == [str(ROOT), str(tmp_path), str(Path("relative").resolve())]
    assert plain._function_env(threads=2)["PYTHONPATH"] == str(ROOT)


def test_the_endpoints_file_is_the_launchers_and_holds_what_a_client_needs(tmp_path):
    from reclaim.local.dev import write_endpoints

    c = config_from_env({"LOCAL_ENDPOINTS_FILE": str(tmp_path / "dev.json")})
    assert not hasattr(c, "endpoints_file")  # not the cloud's: run() writes it once up

    class Platform:
        def url(self, name):
            return f"http://127.0.0.1:3/{name}"

    class Up:
        endpoints = {"jobs": "http://127.0.0.1:1/jobs"}
        platform = Platform()

        def client_env(self):
            return {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:2"}

    write_endpoints(Up(), tmp_path / "state" / "dev.json")  # type: ignore[arg-type]
    doc = json.loads((tmp_path / "state" / "dev.json").read_text())
    assert doc["endpoints"]["jobs"] == "http://127.0.0.1:1/jobs"
    assert doc["client_env"] == {  # and where a CLI run in the project submits (its 400s)
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:2",
        "RECLAIM_SUBMIT_URL": "http://127.0.0.1:3/submit",
    }
    assert doc["pid"] == os.getpid()
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["dev.json"]  # no partial left
