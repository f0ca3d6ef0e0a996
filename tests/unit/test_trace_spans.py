"""shared.traces.spans: a job's whole trace from its record alone, written by the real
policy's transitions (shared.job_queue), and the segments each attempt's end exports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared import job_queue as q
from shared import records, tracing
from shared.recovery import silent_since, with_newest
from shared.traces import spans as trace_spans
from shared.traces.spans import Span

T0 = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
REQUEST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def apply(job: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {**job, **fields}


def new_job(trace: str | None = None) -> dict[str, Any]:
    trace = trace or tracing.new_trace().traceparent
    return dict(
        records.new_record("job-1", "render", {}, T0, traceparent=trace, submit_traceparent=REQUEST)
    )


def checkpoint(job: dict[str, Any], t: float, stage: str, nxt: int, done: list[str]) -> dict:
    return apply(job, q.checkpoint_fields(job, at(t), stage, nxt, {}, completed=done))


def rescued_then_handed_back_then_done() -> dict[str, Any]:
    """Attempt 1 killed in stage 2 (rescued by the watchdog), attempt 2 handed back in
    stage 3 (SIGTERM), attempt 3 done."""
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    job = checkpoint(job, 3, "encode", 1, ["encode"])
    job = apply(job, q.heartbeat_fields(job, at(4)))  # its last sign of life
    rescue = q.requeue_fields(job, at(10), rescued=True)  # as the watchdog writes it:
    job = apply(job, with_newest(rescue, silent_since(job, 5.0)))  # last seen at 4
    job = apply(job, q.claim_fields(job, "b.1", at(11)))
    job = checkpoint(job, 14, "mux", 2, ["encode", "mux"])
    job = apply(job, q.handback_fields(job, at(15), max_attempts=3))
    job = apply(job, q.claim_fields(job, "c.1", at(16)))
    return apply(job, q.done_fields(job, at(19), {"ok": True}, stage="upload"))


def by_name(spans: list[Span] | tuple[Span, ...]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def test_a_rescued_and_handed_back_job_is_one_trace_of_every_step() -> None:
    record = rescued_then_handed_back_then_done()
    trace = trace_spans.build(record)
    assert trace is not None and trace.terminal
    context = tracing.parse(record["traceparent"])
    assert context is not None and trace.trace_id == context.trace_id
    names = by_name(trace.spans)
    assert [s.name for s in names["queued"]] == ["queued"] * 3
    assert set(names) == {
        "job render", "submit", "queued", "attempt 1", "encode", "mux", "rescued",
        "attempt 2", "upload", "handed back", "attempt 3", "done",
    }  # fmt: skip
    root = names["job render"][0]
    assert root.span_id == context.span_id and root.parent_id is None  # the logs' span
    assert (root.start, root.end) == (T0, at(19))
    # attempt 1: encode to its checkpoint, mux until the owner's last sign of life
    (a1,) = names["attempt 1"]
    assert (a1.start, a1.end, a1.error) == (at(1), at(4), "the owner went silent")
    encode = [s for s in names["encode"] if s.segment == 1]
    assert [(s.start, s.end, s.parent_id) for s in encode] == [(at(1), at(3), a1.span_id)]
    (lost_mux, mux2) = sorted(names["mux"], key=lambda s: s.start)
    silent = "the owner went silent"
    assert (lost_mux.start, lost_mux.end, lost_mux.error) == (at(3), at(4), silent)
    (rescue,) = names["rescued"]
    assert (rescue.start, rescue.end, rescue.segment) == (at(4), at(10), 1)  # the silence
    # attempt 2 resumes at mux; the hand-back at 15 cuts upload short
    (a2,) = names["attempt 2"]
    assert (mux2.start, mux2.end, mux2.parent_id) == (at(11), at(14), a2.span_id)
    uploads = sorted(names["upload"], key=lambda s: s.start)
    assert [(s.start, s.end, s.segment) for s in uploads] == [
        (at(14), at(15), 2),
        (at(16), at(19), 3),
    ]
    assert [(s.start, s.end) for s in names["queued"]] == [
        (T0, at(1)),
        (at(10), at(11)),
        (at(15), at(16)),
    ]
    (submit,) = names["submit"]
    assert submit.links == (tracing.parse(REQUEST),)  # linked to the request's own trace
    assert len({s.span_id for s in trace.spans}) == len(trace.spans)  # no two alike


def test_span_ids_are_a_function_of_the_record() -> None:
    record = rescued_then_handed_back_then_done()
    first, again = trace_spans.build(record), trace_spans.build(dict(record))
    assert first is not None and again is not None
    assert [s.span_id for s in first.spans] == [s.span_id for s in again.spans]
    # and an attempt's spans keep their ids and times as the record grows past it (a
    # stage cut short by the hand-back is named once the done entry names it)
    earlier = trace_spans.build(record_until(record, "done"))
    assert earlier is not None
    before = {s.span_id: s for s in earlier.spans}
    for span in first.segment(1) + first.segment(2):
        held = before[span.span_id]
        assert (held.start, held.end, held.parent_id) == (span.start, span.end, span.parent_id)
    renamed = {s.name: before[s.span_id].name for s in first.spans if s.span_id in before}
    assert renamed["upload"] == "stage 3"


def record_until(record: dict[str, Any], event: str) -> dict[str, Any]:
    history = record["history"]
    cut = next(i for i, e in enumerate(history) if e["event"] == event)
    return {**record, "history": history[:cut], "status": "running"}


def test_each_span_is_exported_by_exactly_one_attempts_end() -> None:
    trace = trace_spans.build(rescued_then_handed_back_then_done())
    assert trace is not None
    sent = [s.span_id for attempt in (1, 2, 3) for s in trace.segment(attempt)]
    assert sorted(sent) == sorted(s.span_id for s in trace.spans)  # all, once
    assert {s.name for s in trace.segment(1)} == {
        "submit",
        "queued",
        "attempt 1",
        "encode",
        "mux",
        "rescued",
        "job render",
    } - {"job render"}
    assert "job render" in {s.name for s in trace.segment(3)}  # the root with the end


def test_a_stage_error_a_timeout_and_their_backoff() -> None:
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    err = q.error_info(RuntimeError("boom"), stage="encode", attempt=1, now=at(2), retryable=True)
    job = apply(job, q.requeue_fields(job, at(2), delay_s=5, error=err))
    job = apply(job, q.claim_fields(job, "a.2", at(8)))
    timed = {**err, "type": "TimedOut", "message": "timed out after 3 s (stage encode)"}
    job = apply(job, q.requeue_fields(job, at(11), delay_s=0, error=timed))
    trace = trace_spans.build(job)
    assert trace is not None and not trace.terminal
    names = by_name(trace.spans)
    (requeued,) = names["requeued"]
    assert (requeued.start, requeued.end, requeued.error) == (at(2), at(7), "boom")  # backoff
    assert requeued.attributes["reclaim.backoff_s"] == 5.0
    (timed_out,) = names["timed out"]
    assert timed_out.segment == 2 and "timed out" in str(timed_out.error)
    assert [s.error for s in names["encode"]] == ["boom", "timed out after 3 s (stage encode)"]
    assert "job render" not in names  # not ended: the root waits for the end


def test_deferred_retried_and_cancelled_are_events_of_their_own() -> None:
    job = new_job()
    job = apply(job, q.deferred_fields(job, at(1), "no revision knows render"))
    job = apply(job, q.claim_fields(job, "a.1", at(2)))
    err = q.error_info(ValueError("bad"), stage="encode", attempt=1, now=at(3), retryable=False)
    job = apply(job, q.fail_fields(job, at(3), err))
    job = apply(job, q.retry_fields(job, at(4), by="cli", default_max_attempts=3))
    job = apply(job, q.cancel_fields(job, at(5), by="cli", reason="enough"))
    names = by_name(trace_spans.build(job).spans)  # type: ignore[union-attr]
    assert {"deferred", "failed", "retried", "cancelled"} <= set(names)
    assert names["deferred"][0].segment == 1 and names["retried"][0].segment == 2
    assert names["failed"][0].error == "bad"
    assert names["job render"][0].end == at(5)


def test_coalesced_checkpoints_make_one_span_of_their_stages() -> None:
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    job = checkpoint(job, 2, "b", 2, ["a", "b"])  # a's own checkpoint was coalesced away
    job = apply(job, q.done_fields(job, at(3), {}, stage="c"))
    names = by_name(trace_spans.build(job).spans)  # type: ignore[union-attr]
    (ab,) = names["a + b"]
    assert (ab.start, ab.end, ab.attributes["reclaim.stages"]) == (at(1), at(2), 2)
    assert names["c"][0].start == at(2)


def test_no_trace_without_a_traceparent_and_a_trimmed_history_still_builds() -> None:
    job = new_job()
    del job["traceparent"]
    assert trace_spans.build(job) is None
    record = rescued_then_handed_back_then_done()
    trimmed = {**record, "history": record["history"][5:], "history_dropped": 5}
    trace = trace_spans.build(trimmed)
    assert trace is not None and "submit" not in {s.name for s in trace.spans}
    assert "done" in {s.name for s in trace.spans}


def test_waterfall_rows_put_children_under_their_parents() -> None:
    trace = trace_spans.build(rescued_then_handed_back_then_done())
    assert trace is not None
    rows = trace_spans.waterfall_rows(trace.spans)
    assert len(rows) == len(trace.spans)
    assert rows[0] == (0, next(s for s in trace.spans if s.kind == "job"))
    depth = {s.span_id: d for d, s in rows}
    for span in trace.spans:
        if span.kind == "stage":
            assert depth[span.span_id] == 2  # job > attempt > stage


def test_an_attempt_a_claim_took_over_goes_out_with_the_takers_end() -> None:
    """A redelivered doorbell's claim takes a stale running job over (a rescue without
    the sweep's write): nobody exported attempt 1's end, so its spans go with attempt 2's."""
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    job = apply(job, q.checkpoint_fields(job, at(3), "encode", 1, {}, running="mux"))
    job = apply(job, q.claim_fields(job, "b.1", at(9)))  # took over from a.1
    assert job["history"][-1]["took_over_from"] == "a.1"
    job = apply(job, q.done_fields(job, at(12), {}, stage="mux"))
    trace = trace_spans.build(job)
    assert trace is not None
    assert trace.segment(1) == []
    sent = {s.name for s in trace.segment(2)}
    assert {"submit", "queued", "attempt 1", "encode", "mux", "rescued", "attempt 2"} <= sent
    (lost_mux,) = [s for s in trace.spans if s.name == "mux" and s.error]
    assert lost_mux.start == at(3)  # named by the checkpoint's running stage


def test_a_done_after_a_dropped_checkpoint_spans_every_stage_it_ran() -> None:
    """The last stages' checkpoint was coalesced and the done write drops it: the done
    entry's stage count makes one span of the stages since the last checkpoint."""
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    job = checkpoint(job, 2, "a", 1, ["a"])
    job = apply(job, q.done_fields(job, at(3), {}, stage="c", stages=3))
    names = by_name(trace_spans.build(job).spans)  # type: ignore[union-attr]
    (bc,) = names["stage 2 + c"]
    assert (bc.start, bc.end, bc.attributes["reclaim.stages"]) == (at(2), at(3), 2)


def test_a_stages_own_span_hangs_under_the_span_its_stage_was_coalesced_into() -> None:
    job = new_job()
    job = apply(job, q.claim_fields(job, "a.1", at(1)))
    job = apply(job, q.done_fields(job, at(3), {}, stage="b", stages=2))
    trace = trace_spans.build(job)
    assert trace is not None
    (ab,) = [s for s in trace.spans if s.kind == "stage"]
    context = trace.context
    own = Span(
        "encode", "user", "00000000000000aa",
        trace_spans.stage_span_id(context, "job-1", 1, 1),  # stage b's: not a span here
        at(2), at(2.5), 1, {"reclaim.stage_index": 1},
    )  # fmt: skip
    (adopted,) = trace_spans.adopt(trace.spans, [own])
    assert adopted.parent_id == ab.span_id
