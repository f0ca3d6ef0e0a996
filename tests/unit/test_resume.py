"""The resume decision across pipeline versions (shared.resume), property- and example-tested,
and the version API of Pipeline (shared.pipelines.base)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.pipelines.base import Pipeline, StageContext, stage_version
from shared.resume import Stamp, decide, newer_than_me, revision_number, stamp_of

names = st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True)


def registered(*lists: list[str]) -> dict[str, list[str]]:
    return {stage_version(n): n for n in lists}


def stamp(old: list[str], done: int, revision: str | None = "claim-00001-abc") -> Stamp:
    return Stamp(stage_version(old), revision, done, tuple(old[:done]))


@given(names, names, st.data())
def test_a_new_version_never_reruns_a_completed_stage_nor_skips_one(
    old: list[str], new: list[str], data: st.DataObject
) -> None:
    done = data.draw(st.integers(0, len(old)))
    current = stage_version(new)
    decision = decide(stamp(old, done), current, registered(new), revision="claim-00002-xyz")
    if old == new:
        assert (decision.kind, decision.next_stage) == ("same", done)
    elif old[:done] == new[:done] and done <= len(new):
        # by name: the new list runs from the first stage not completed, so no completed
        # stage runs again and none of the new list before it is skipped
        assert (decision.kind, decision.version, decision.next_stage) == ("by name", current, done)
    else:
        # not resumable and the old version is gone, on a newer revision: ended, from 0
        assert decision.kind == "end" and decision.next_stage == 0
        assert "retry the job" in decision.reason and stage_version(old) in decision.reason


@given(names, names, st.data())
def test_a_registered_old_version_runs_the_job_to_its_end(
    old: list[str], new: list[str], data: st.DataObject
) -> None:
    done = data.draw(st.integers(0, len(old)))
    decision = decide(
        stamp(old, done), stage_version(new), registered(new, old), revision="claim-00002-xyz"
    )
    assert decision.runs
    if decision.kind == "own version":
        assert (decision.version, decision.next_stage) == (stage_version(old), done)
    else:
        assert new[: decision.next_stage] == old[:done]


def test_an_inserted_stage_resumes_by_name_after_the_completed_ones() -> None:
    decision = decide(
        stamp(["a", "b", "c"], 2),
        stage_version(["a", "b", "x", "c"]),
        registered(["a", "b", "x", "c"]),
        revision="claim-00002-xyz",
    )
    assert (decision.kind, decision.next_stage) == ("by name", 2)


def test_a_removed_completed_stage_ends_the_job_unless_the_revision_is_older() -> None:
    old, new = ["a", "b", "c"], ["a", "c"]
    args = (stamp(old, 2, "claim-00002-abc"), stage_version(new), registered(new))
    assert decide(*args, revision="claim-00003-xyz").kind == "end"
    # the job was stamped by a newer revision than this one: rollout skew, handed back
    skew = decide(*args, revision="claim-00001-xyz", pipeline="p")
    assert skew.kind == "skew" and "claim-00001-xyz" in skew.reason and "'p'" in skew.reason


def test_first_claims_and_records_made_before_versions() -> None:
    registry = registered(["a", "b"])
    current = stage_version(["a", "b"])
    assert decide(Stamp(None, None, 0, ()), current, registry, revision=None).kind == "first"
    legacy = decide(Stamp(None, None, 5, None), current, registry, revision=None)
    assert (legacy.kind, legacy.next_stage) == ("legacy", 2)  # clamped, as before versions


def test_revision_order() -> None:
    assert revision_number("claim-00012-q7z") == 12
    assert revision_number("whatever") is None
    assert newer_than_me("claim-00003-abc", "claim-00002-xyz")
    assert not newer_than_me("claim-00001-abc", "claim-00002-xyz")
    assert newer_than_me(None, "claim-00002-xyz")  # unknown order: skew, never an end
    assert not newer_than_me("same", "same")


def test_stamp_of_reads_the_checkpoint_and_the_claim() -> None:
    job = {
        "pipeline_version": "v2",
        "pipeline_revision": "claim-00002-abc",
        "checkpoint": {"next_stage": 1, "state": {}, "version": "v1", "completed": ["a"]},
    }
    assert stamp_of(job) == Stamp("v1", "claim-00002-abc", 1, ("a",))  # type: ignore[arg-type]
    claimed_only = {"pipeline_version": "v2", "checkpoint": {"next_stage": 0, "state": {}}}
    assert stamp_of(claimed_only) == Stamp("v2", None, 0, ())  # type: ignore[arg-type]
    garbage = {"checkpoint": {"next_stage": 2, "completed": ["a"]}}  # names disagree with index
    assert stamp_of(garbage).completed is None  # type: ignore[arg-type]


def _noop(ctx: StageContext) -> None:
    return None


def test_pipeline_versions_declared_derived_and_previous() -> None:
    old = Pipeline("p", stages=[("a", _noop), ("c", _noop)])
    new = Pipeline("p", stages=[("a", _noop), ("b", _noop), ("c", _noop)], previous=[old])
    assert new.version_for({}) == stage_version(["a", "b", "c"]) != old.version_for({})
    assert list(new.versions_for({})) == [new.version_for({}), old.version_for({})]
    assert Pipeline("q", stages=[("a", _noop)], version="2026-07").version_for({}) == "2026-07"
