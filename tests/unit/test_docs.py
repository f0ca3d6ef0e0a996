"""The documentation says what the code does, and every document is reachable:
the README's settings table has every setting with its real default, and every
relative link in the docs points at a file that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shared.config import ENV_VARS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SETTINGS = (ROOT / "docs" / "settings.md").read_text()
README_MAX_LINES = 350  # a README, not the manual: detail lives in docs/
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "api.md",
    ROOT / "docs" / "pipelines.md",
    ROOT / "docs" / "settings.md",
    ROOT / "docs" / "platform.md",
    ROOT / "docs" / "operating.md",
    ROOT / "docs" / "proof.md",
    ROOT / "docs" / "local-cloud.md",
    ROOT / "docs" / "library.md",
    ROOT / "docs" / "time.md",
    ROOT / "docs" / "flow-control.md",
    ROOT / "docs" / "workflows.md",
    ROOT / "docs" / "seeing.md",
    ROOT / "reclaim" / "local" / "pubsub_emulator" / "README.md",
    ROOT / "terraform" / "README.md",
]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("var", ENV_VARS, ids=lambda v: v.name)
def test_every_setting_is_documented_with_its_default(var) -> None:  # type: ignore[no-untyped-def]
    assert f"| `{var.name}` | `{var.default}` |" in SETTINGS


def test_the_readme_stays_short() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES


def test_the_two_commands_are_there() -> None:
    assert "make demo" in README and "make test" in README


@pytest.mark.parametrize("doc", DOCS[1:], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_readme_links_every_document(doc: Path) -> None:
    assert f"]({doc.relative_to(ROOT).as_posix()})" in README


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    links = [t for t in _LINK.findall(doc.read_text()) if "://" not in t and not t.startswith("#")]
    assert links  # the pattern found them: this test can fail
    missing = [t for t in links if not (doc.parent / t.split("#")[0]).exists()]
    assert missing == []


_ROUTE_ROW = re.compile(r"^\|\s*(GET|POST|PUT|PATCH|DELETE)\s*\|\s*`([^`]+)`", re.MULTILINE)


def test_no_documented_route_ends_in_z() -> None:
    """Cloud Run answers some paths ending in "z" itself ("Reserved URL paths",
    https://cloud.google.com/run/docs/known-issues): no such route may be promised."""
    routes = [path for doc in DOCS for _, path in _ROUTE_ROW.findall(doc.read_text())]
    assert "/health" in routes and "/jobs" in routes  # the pattern found the API table
    assert [r for r in routes if r.rstrip("/").endswith("z")] == []
    assert [str(d.relative_to(ROOT)) for d in DOCS if "/healthz" in d.read_text()] == []


_ANSWER = re.compile(r"^# (?:->|20[02]) (\{.*\})$", re.MULTILINE)


def test_the_submit_answers_shown_in_the_docs_are_the_apis() -> None:
    """Every one-job answer of POST /jobs a document shows has the keys the API sends
    (`id`, never `job_id`)."""
    from shared.submission.create import SubmittedJob

    keys = set(SubmittedJob("j", "queued", created=True).to_json())
    shown = [
        (doc.relative_to(ROOT).as_posix(), json.loads(raw))
        for doc in DOCS
        for raw in _ANSWER.findall(doc.read_text())
        if '"batch_id"' not in raw  # the batch answer is abridged with "..."
    ]
    assert {name for name, _ in shown} >= {"README.md", "docs/api.md", "terraform/README.md"}
    optional = {"batch_id", "duplicate_of"}  # a batch member; a unique key's repeat
    wrong = [
        (name, sorted(body)) for name, body in shown if not keys <= set(body) <= keys | optional
    ]
    assert wrong == []
