"""The local side of the upload routes: which file `make dev` reads, and the one
notification fake-gcs-server gets for the (bucket, prefix) set terraform would make."""

from __future__ import annotations

from pathlib import Path

from reclaim.local.dev import config_from_env
from reclaim.local.wiring import notification_scope

ROOT = Path(__file__).resolve().parents[2]


def test_make_dev_reads_the_routes_of_the_pipelines_package_or_the_setting() -> None:
    assert config_from_env({}).uploads_file is None  # no pipelines: no routes
    found = config_from_env({"RECLAIM_PIPELINE_MODULES": "pipelines.csv_summary"}).uploads_file
    assert found == ROOT / "pipelines" / "uploads.json"
    chosen = config_from_env({"RECLAIM_UPLOADS_FILE": "/tmp/routes.json"}).uploads_file
    assert chosen == Path("/tmp/routes.json")


def test_fake_gcs_gets_the_bucket_and_common_prefix_of_the_needed_notifications() -> None:
    assert notification_scope([]) is None
    assert notification_scope([("up", "")]) == ("up", "")
    assert notification_scope([("up", "reports/a/"), ("up", "reports/b/")]) == ("up", "reports/")
    assert notification_scope([("up", "img/"), ("up", "in/")]) == ("up", "i")  # a string prefix
    assert notification_scope([("up", "a/"), ("inbox", "b/")]) == (None, "")  # every bucket
