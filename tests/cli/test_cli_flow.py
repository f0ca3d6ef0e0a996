"""`reclaim pause/resume` and bulk `cancel`: subprocesses against fake-gcs-server and the
Pub/Sub emulator (no claim service: the jobs stay queued, so what the CLI did is plain)."""

from __future__ import annotations

from typing import Any

from tests.cli.cli_support import Cloud


def test_pause_and_resume_set_and_clear_the_flag(cloud: Cloud) -> None:
    paused = cloud.ok("pause", "demo", "--json").json()
    assert paused == {"pipeline": "demo", "paused": True, "changed": True}
    assert cloud.ok("pause", "demo", "--json").json()["changed"] is False
    assert [b.name for b in cloud.store.list_blobs("paused/")] == ["paused/demo"]
    resumed = cloud.ok("resume", "demo", "--json").json()
    assert resumed["was_paused"] is True and cloud.store.list_blobs("paused/") == []


def test_pausing_an_unknown_pipeline_is_exit_2_with_a_reason(cloud: Cloud) -> None:
    result = cloud.run("pause", "no-such-pipeline")
    assert result.code == 2 and "unknown" in result.err
    assert cloud.store.list_blobs("paused/") == []


def test_bulk_cancel_counts_first_and_off_a_terminal_acts_only_with_yes(
    cloud: Cloud, fresh: Any
) -> None:
    batch = fresh("bc")
    answer = cloud.ok(
        "submit", "demo", "--batch", batch, "--from", "-", "--json", stdin="{}\n" * 3
    ).json()
    ids = sorted(j["id"] for j in answer["jobs"])
    dry = cloud.ok("cancel", "--batch", batch, "--dry-run", "--json").json()
    assert (dry["matching"], sorted(dry["jobs"])) == (3, ids)
    assert all(cloud.store.read(i).record["status"] == "queued" for i in ids)  # nothing done
    refused = cloud.run("cancel", "--batch", batch, "--pace", "100", stdin="")
    assert refused.code == 2, refused  # stdin is no terminal and no --yes: nobody agreed
    assert "3 job(s) match; nothing done: pass --yes" in refused.err, refused.err
    assert all(cloud.store.read(i).record["status"] == "queued" for i in ids)
    as_json = cloud.run("cancel", "--batch", batch, "--json", stdin="")
    assert as_json.code == 2 and as_json.json()["matching"] == 3, as_json
    done = cloud.run("cancel", "--batch", batch, "--pace", "100", "--yes", stdin="")
    assert done.code == 0 and done.out.strip() == "cancel: 3 of 3 job(s)", done
    assert all(cloud.store.read(i).record["status"] == "cancelled" for i in ids)
    again = cloud.ok("cancel", "--batch", batch, "--json").json()
    assert again["matching"] == 0  # a re-run finds nothing left


def test_bulk_refuses_what_it_cannot_mean(cloud: Cloud) -> None:
    result = cloud.run("retry", "--status", "running")
    assert result.code == 2 and "invalid choice: 'running'" in result.err  # argparse
    result = cloud.run("cancel")
    assert result.code == 2 and "name job ids" in result.err
