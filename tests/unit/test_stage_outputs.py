"""A stage's outputs, streamed and listed (issue 40, "outputs you can fetch"):
ctx.outputs.open streams an output that exists only once closed by an owner that still
holds the job; the listing offers only what committed stages wrote, never a lost
attempt's."""

from __future__ import annotations

import pytest

from shared.errors import AlreadyExists, NotFound
from shared.outcome import OutcomeKind
from shared.outputs import committed
from shared.pipelines import PermanentError, StageContext, Stopped
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import handle, pipeline, settings, submit, wall

PIECE = b"0123456789abcdef" * 4096  # 64 KiB


def test_a_streamed_output_is_created_at_close_and_committed_with_its_stage() -> None:
    store = MemoryStore()
    seen: list[list[str]] = []

    def stage(ctx: StageContext) -> None:
        with ctx.outputs.open("big/data.bin") as f:
            for _ in range(20):
                f.write(PIECE)
            seen.append(store.names(f"outputs/{ctx.job_id}/"))  # nothing before the close
        ctx.result["ok"] = True

    job_id = submit(store, pipeline([("stream", stage)]))
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    assert seen == [[]]
    record = store.read(job_id).record
    assert record["outputs"] == [f"outputs/{job_id}/1/big/data.bin"]
    (out,) = committed.committed(store, record)
    assert (out.name, out.attempt, out.size) == ("big/data.bin", 1, 20 * len(PIECE))
    assert out.content_type == "application/octet-stream"
    assert out.path == f"/jobs/{job_id}/outputs/big/data.bin?attempt=1"


def test_a_stream_whose_block_raised_or_left_open_creates_nothing() -> None:
    store = MemoryStore()

    def stage(ctx: StageContext) -> None:
        ctx.outputs.open("left-open.txt").write(b"forgotten")
        with ctx.outputs.open("broken.txt") as f:
            f.write(b"half")
            raise RuntimeError("the stage broke mid-stream")

    job_id = submit(store, pipeline([("stage", stage)]))
    assert handle(job_id, store, settings(max_attempts=1)).kind == OutcomeKind.FAILED
    assert store.names(f"outputs/{job_id}/") == []


def test_a_stream_is_refused_at_close_once_the_owner_lost_the_job() -> None:
    store = MemoryStore()
    refused: list[bool] = []

    def stage(ctx: StageContext) -> None:
        f = ctx.outputs.open("late.bin")
        f.write(b"written by a zombie")
        stored = store.read(ctx.job_id)
        store.update(dict(stored.record), stored.generation)  # someone else wrote
        try:
            f.close()
        except Stopped:
            refused.append(True)
        raise PermanentError("must not be recorded")

    job_id = submit(store, pipeline([("stage", stage)]))
    # a stale time this short makes every output prove ownership first
    outcome = handle(job_id, store, settings(stale_seconds=0.0001), wall)
    assert outcome.kind == OutcomeKind.LOST and refused == [True]
    assert store.names(f"outputs/{job_id}/") == []


def test_a_stream_is_create_only_within_an_attempt() -> None:
    store = MemoryStore()
    clashes: list[bool] = []

    def stage(ctx: StageContext) -> None:
        ctx.outputs.write("same.txt", "first")
        f = ctx.outputs.open("same.txt")
        f.write(b"second")
        try:
            f.close()
        except AlreadyExists:
            clashes.append(True)

    job_id = submit(store, pipeline([("stage", stage)]))
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    assert clashes == [True]
    assert store.raw(store.bucket_name, f"outputs/{job_id}/1/same.txt").data == b"first"


def test_only_committed_outputs_are_offered_never_a_lost_attempts() -> None:
    store = MemoryStore()

    def first(ctx: StageContext) -> None:
        ctx.outputs.write("a.txt", f"a from attempt {ctx.attempt}")

    def second(ctx: StageContext) -> None:
        ctx.outputs.write("b.txt", f"b from attempt {ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("after writing b.txt: attempt 1's b.txt is never committed")

    job_id = submit(store, pipeline([("first", first), ("second", second)]))
    assert handle(job_id, store, settings()).kind == OutcomeKind.REQUEUED
    pending = store.read(job_id).record
    assert [o.name for o in committed.committed(store, pending)] == ["a.txt"]  # so far
    assert handle(job_id, store, settings()).kind == OutcomeKind.DONE
    record = store.read(job_id).record
    offered = [(o.name, o.attempt) for o in committed.committed(store, record)]
    assert offered == [("a.txt", 1), ("b.txt", 2)]
    assert f"outputs/{job_id}/1/b.txt" in store.names(f"outputs/{job_id}/")  # it exists...
    with pytest.raises(NotFound):  # ...and is never offered
        committed.locate(record, "b.txt", attempt=1)
    assert committed.locate(record, "b.txt") == f"outputs/{job_id}/2/b.txt"
    with pytest.raises(NotFound):
        committed.locate(record, "nothing.txt")


def test_committed_names_ignore_what_is_not_the_jobs() -> None:
    record = {
        "id": "j1",
        "outputs": ["outputs/j1/1/a.txt", "outputs/j2/1/theirs.txt", 7, "outputs/j1/1/a.txt"],
        "checkpoint": {"next_stage": 1, "state": {}, "outputs": ["outputs/j1/2/b.txt"]},
    }
    assert committed.committed_names(record) == ["outputs/j1/1/a.txt", "outputs/j1/2/b.txt"]
    assert committed.split_name("j1", "outputs/j1/x/a.txt") is None
    assert committed.split_name("j1", "outputs/j1/3/dir/a.txt") == (3, "dir/a.txt")
