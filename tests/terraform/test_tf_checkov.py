"""checkov (pinned in requirements-tf.txt, own venv .venv-tf: its pins clash with
ours) over terraform/, offline: zero failed checks, every skip with a reason."""

from __future__ import annotations

import json
import subprocess

from tests.terraform.tfhcl import ROOT, TF_DIR

CHECKOV = ROOT / ".venv-tf" / "bin" / "checkov"


def _run_checkov() -> dict:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make tf-venv` (make test does it)"
    proc = subprocess.run(
        [
            str(CHECKOV),
            "-d",
            str(TF_DIR),
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


def test_checkov_finds_nothing_and_every_skip_has_a_reason() -> None:
    report = _run_checkov()
    summary, results = report["summary"], report["results"]
    failed = [(c["check_id"], c["resource"]) for c in results.get("failed_checks", [])]
    assert failed == [] and summary["failed"] == 0
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 0 and summary["resource_count"] > 0
    for skip in results.get("skipped_checks", []):
        reason = skip["check_result"].get("suppress_comment", "")
        assert len(reason) >= 40, f"{skip['check_id']} on {skip['resource']}: {reason!r}"
