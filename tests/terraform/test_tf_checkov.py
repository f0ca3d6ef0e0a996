"""checkov (pinned in requirements-tf.txt, own venv .venv-tf: its pins clash with
ours) offline over the module (terraform/) and over both of its callers (this
repository's deploy/, and a `reclaim init` project's deploy/, where checkov follows the
module call into the module's copy): zero failed checks, every skip with a reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.terraform.tfhcl import ROOT, TF_DIR

CHECKOV = ROOT / ".venv-tf" / "bin" / "checkov"


def _run_checkov(tf_dir: Path) -> dict:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make tf-venv` (make test does it)"
    proc = subprocess.run(
        [
            str(CHECKOV),
            "-d",
            str(tf_dir),
            "--framework",
            "terraform",
            "--skip-download",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.stdout.strip(), proc.stderr[-2000:]
    report: dict = json.loads(proc.stdout)
    return report


@pytest.fixture(params=["the module", "this repository's deploy", "a reclaim init project"])
def tf_dir(request: pytest.FixtureRequest, project_root: Path) -> Path:
    return {
        "the module": TF_DIR,
        "this repository's deploy": ROOT / "deploy",
        "a reclaim init project": project_root,
    }[request.param]


def test_checkov_finds_nothing_and_every_skip_has_a_reason(tf_dir: Path) -> None:
    report = _run_checkov(tf_dir)
    summary, results = report["summary"], report["results"]
    failed = [(c["check_id"], c["resource"]) for c in results.get("failed_checks", [])]
    assert failed == [] and summary["failed"] == 0
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 0 and summary["resource_count"] > 0
    if tf_dir != TF_DIR:  # a caller: checkov read the resources through the module call
        resources = {c["resource"] for c in results.get("passed_checks", [])}
        assert resources and all(r.startswith("module.reclaim.") for r in resources)
    for skip in results.get("skipped_checks", []):
        reason = skip["check_result"].get("suppress_comment", "")
        assert len(reason) >= 40, f"{skip['check_id']} on {skip['resource']}: {reason!r}"
