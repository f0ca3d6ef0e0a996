"""Waits on the MemoryStore, through the front door (shared.queue.Queue): sleeps through
the time index, waitpoints completed once whoever races (before the park, many at once, a
timeout), fan-outs created once and joined once, and the pure rules. The same flows run
over HTTP on the local cloud in tests/integration/test_waits_http.py."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.claim.drain import DrainGate
from shared.claim.shutdown import Shutdown
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import IllegalTransition, InvalidInput, Parked
from shared.features.waits import release, rules
from shared.jobs import JobStatus
from shared.outcome import OutcomeKind
from shared.pipelines import StageContext
from shared.queue import Queue, parse_submission
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, pipeline

START = datetime(2026, 7, 26, 10, 0, tzinfo=UTC)
SEEN: dict[str, list[Any]] = {}


def make_queue(**kw: Any) -> tuple[Queue, MemoryStore, Bell, Clock]:
    store, bell, clock = MemoryStore(), Bell(), Clock(START)
    base = {"stale_seconds": 30.0, "drain_max_jobs": 0, "min_write_interval_seconds": 0.0}
    settings = Settings.from_env({}, **{**base, **kw})
    return Queue(store, bell, settings, clock=clock), store, bell, clock


def submit(queue: Queue, body: dict[str, Any]) -> str:
    return queue.submit(parse_submission(body, queue.settings)).jobs[0].job_id


def run(queue: Queue, job_id: str) -> OutcomeKind:
    outcome = queue.handle_delivery(
        job_id, owner="t", slots=Slots(4), gate=DrainGate(), shutdown=Shutdown()
    )
    return outcome.kind


def status(queue: Queue, job_id: str) -> str:
    return str(queue.read(job_id)["status"])


def run_all(queue: Queue, bell: Bell, limit: int = 10_000) -> None:
    """Answer every doorbell rung so far, as the claim function would (in order)."""
    done = 0
    while done < len(bell.rung) and done < limit:
        run(queue, bell.rung[done])
        done += 1


# ------------------------------------------------------------------ pipelines


def _sleepy_first(ctx: StageContext) -> None:
    ctx.state["before"] = True
    ctx.sleep(float(ctx.payload.get("seconds", 90)))


def _after(ctx: StageContext) -> None:
    SEEN.setdefault(ctx.job_id, []).append(ctx.waited)
    ctx.result.update(waited=ctx.waited, state=dict(ctx.state))


SLEEPY = pipeline([("first", _sleepy_first), ("after", _after)])


def _wait_first(ctx: StageContext) -> None:
    wp = ctx.waitpoint(timeout=ctx.payload.get("timeout"))
    SEEN.setdefault(ctx.job_id + ":wp", []).append(wp)
    hook = ctx.payload.get("complete_first")
    if hook:  # a provider that answers before the stage waits
        hook_queue: Queue = HOOKS[hook]
        hook_queue.complete_waitpoint(wp.token, {"early": True}, by="provider")
    ctx.wait(wp)


WAITER = pipeline([("ask", _wait_first), ("after", _after)])
HOOKS: dict[str, Queue] = {}


def _fan(ctx: StageContext) -> None:
    n = int(ctx.payload["n"])
    kids = [{"pipeline": KID, "payload": {"i": i}} for i in range(n)]
    ctx.fan_out(kids, on_child_failure=ctx.payload.get("policy", "fail"))


def _join(ctx: StageContext) -> None:
    seen: list[dict[str, Any]] = []
    token = None
    while True:
        page = ctx.children(page_token=token, page_size=7)
        seen += page["children"]
        token = page["next_page_token"]
        if token is None:
            break
    SEEN.setdefault(ctx.job_id + ":join", []).append(len(seen))
    ctx.result.update(children=len(seen), statuses=sorted({c["status"] for c in seen}))


def _kid(ctx: StageContext) -> None:
    if ctx.payload.get("i") in ctx.payload.get("fail", []):
        from shared.errors import PermanentError

        raise PermanentError(f"kid {ctx.payload['i']} broke")
    ctx.result["i"] = ctx.payload["i"]


KID = pipeline([("kid", _kid)])
FAN = pipeline([("fan", _fan), ("join", _join)])


# ------------------------------------------------------------------ sleep


def test_a_sleep_parks_the_job_and_the_time_index_resumes_it_at_the_next_stage() -> None:
    queue, store, bell, clock = make_queue()
    job_id = submit(queue, {"pipeline": SLEEPY, "payload": {"seconds": 90}})
    assert run(queue, job_id) == OutcomeKind.PARKED
    record = queue.read(job_id)
    assert record["status"] == JobStatus.WAITING and record["owner"] is None
    assert record["park"]["kind"] == "sleep" and record["checkpoint"]["next_stage"] == 1
    assert record["max_attempts"] == queue.settings.max_attempts + 1  # no attempt spent
    assert queue.get(job_id).features["waiting_for"].startswith("sleeping until")
    assert run(queue, job_id) == OutcomeKind.SKIPPED  # a stray doorbell claims nothing
    queue.sweep_once()
    assert status(queue, job_id) == "waiting"  # not due yet
    clock.advance(91)
    result = queue.sweep_once()  # the time pass, or the pending pass's check: one of them
    assert result.released + result.resumed == 1 and status(queue, job_id) == "queued"
    assert bell.rung[-1] == job_id
    assert run(queue, job_id) == OutcomeKind.DONE
    done = queue.read(job_id)
    assert done["result"]["waited"]["status"] == "slept"
    assert done["result"]["state"] == {"before": True}
    assert [e["event"] for e in done["history"]][-4:] == ["parked", "resumed", "claimed", "done"]
    assert not store.list_blobs("scheduled/")  # its entry went with the release


def test_a_sleep_of_zero_resumes_at_once() -> None:
    queue, _store, bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": SLEEPY, "payload": {"seconds": 0}})
    assert run(queue, job_id) == OutcomeKind.PARKED
    assert status(queue, job_id) == "queued" and bell.rung.count(job_id) == 2


# ------------------------------------------------------------------ waitpoints


def test_a_waitpoint_completion_resumes_the_job_with_the_data_once() -> None:
    queue, _store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    assert run(queue, job_id) == OutcomeKind.PARKED
    wp = SEEN[job_id + ":wp"][-1]
    view = queue.get(job_id).features
    assert view["park"]["token"] == wp.token and "waitpoint" in view["waiting_for"]
    done = queue.complete_waitpoint(wp.token, {"frames": 12}, by="farm")
    assert done.state == "resumed" and status(queue, job_id) == "queued"
    again = queue.complete_waitpoint(wp.token, {"frames": 99}, by="farm")
    assert again.state == "already" and not again.won
    run(queue, job_id)
    record = queue.read(job_id)
    assert record["status"] == JobStatus.DONE
    assert record["result"]["waited"]["data"] == {"frames": 12}
    assert record["result"]["waited"]["by"] == "farm"
    gone = queue.complete_waitpoint(wp.token, {}, by="late")
    assert gone.state in ("already", "gone")


def test_a_completion_before_the_park_resumes_the_job_once() -> None:
    queue, store, _bell, _clock = make_queue()
    HOOKS["q"] = queue
    job_id = submit(queue, {"pipeline": WAITER, "payload": {"complete_first": "q"}})
    assert run(queue, job_id) == OutcomeKind.PARKED  # the park read the kept completion
    record = queue.read(job_id)
    assert record["status"] == JobStatus.QUEUED
    assert record["waited"]["data"] == {"early": True}
    assert [e["event"] for e in record["history"]].count("resumed") == 1
    assert not store.list_blobs(rules.DONE_ROOT)  # the kept completion went
    run(queue, job_id)
    assert status(queue, job_id) == "done"


def test_a_hundred_concurrent_completions_resume_it_once() -> None:
    queue, _store, bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    token = SEEN[job_id + ":wp"][-1].token
    states: list[str] = []
    barrier = threading.Barrier(100)

    def go(i: int) -> None:
        barrier.wait()
        states.append(queue.complete_waitpoint(token, {"n": i}, by=f"c{i}").state)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert states.count("resumed") == 1 and states.count("already") == 99
    history = queue.read(job_id)["history"]
    assert [e["event"] for e in history].count("resumed") == 1
    assert bell.rung.count(job_id) == 2  # submit, the one release


def test_a_timeout_racing_completions_settles_to_exactly_one() -> None:
    queue, _store, _bell, clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER, "payload": {"timeout": 30}})
    run(queue, job_id)
    token = SEEN[job_id + ":wp"][-1].token
    clock.advance(31)
    outcomes: list[str] = []
    barrier = threading.Barrier(9)

    def complete() -> None:
        barrier.wait()
        outcomes.append(queue.complete_waitpoint(token, {"late": True}, by="p").state)

    def sweep() -> None:
        barrier.wait()
        queue.sweep_once()

    threads = [threading.Thread(target=complete) for _ in range(8)]
    threads.append(threading.Thread(target=sweep))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = queue.read(job_id)
    assert [e["event"] for e in record["history"]].count("resumed") == 1
    how = record["waited"]["status"]
    assert how in ("completed", "timed_out")
    assert outcomes.count("resumed") == (1 if how == "completed" else 0)


def test_a_timeout_fires_through_the_time_index_and_the_stage_sees_timed_out() -> None:
    queue, store, _bell, clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER, "payload": {"timeout": 120}})
    run(queue, job_id)
    assert store.list_blobs("scheduled/")  # the timeout's entry
    queue.sweep_once()
    assert status(queue, job_id) == "waiting"
    clock.advance(121)
    swept = queue.sweep_once()
    assert swept.released + swept.resumed == 1
    run(queue, job_id)
    assert queue.read(job_id)["result"]["waited"]["status"] == "timed_out"
    token = SEEN[job_id + ":wp"][-1].token
    assert queue.complete_waitpoint(token, {}, by="late").state in ("already", "gone")


def test_a_forged_or_foreign_token_is_refused() -> None:
    queue, _store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    token = SEEN[job_id + ":wp"][-1].token
    head, tag = token.split(".")
    forged = head + "." + ("A" if tag[0] != "A" else "B") + tag[1:]
    for bad in (forged, "nope", "", "a.b.c", token + "x"):
        with pytest.raises(InvalidInput):
            queue.complete_waitpoint(bad, {}, by="x")
    other, other_store, _b, _c = make_queue()  # another deployment, no key yet
    with pytest.raises(InvalidInput):
        other.complete_waitpoint(token, {}, by="x")
    assert other_store.names("waits/") == []  # the refusal wrote nothing, not even a key
    with pytest.raises(InvalidInput):
        queue.complete_waitpoint(token, {"big": "x" * 20_000}, by="x")
    assert status(queue, job_id) == "waiting"


def test_an_operator_completes_the_waitpoint_a_job_is_parked_on() -> None:
    queue, _store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    done = queue.complete_job(job_id, {"approved": False}, by="ann@example.com")
    assert done.state == "resumed"
    assert queue.read(job_id)["waited"]["data"] == {"approved": False}
    with pytest.raises(IllegalTransition):
        queue.complete_job(job_id, {}, by="ann")  # not parked any more


def test_a_parked_job_can_be_cancelled() -> None:
    queue, _store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    queue.cancel(job_id, by="ann")
    token = SEEN[job_id + ":wp"][-1].token
    assert queue.complete_waitpoint(token, {}, by="late").state == "gone"
    assert queue.pending() == []


# ------------------------------------------------------------------ fan-out


def test_a_fan_out_creates_each_child_once_and_the_last_child_releases_the_parent() -> None:
    queue, store, bell, _clock = make_queue()
    parent = submit(queue, {"pipeline": FAN, "payload": {"n": 20}, "tags": ["night"]})
    assert run(queue, parent) == OutcomeKind.PARKED
    record = queue.read(parent)
    fanout = record["park"]["fanout"]
    kids = store.list_batch(fanout)
    assert len(kids) == 20 and kids[0] == f"{parent}-s0-00000"
    child = queue.read(kids[3])
    assert child["parent_job"]["id"] == parent and child["tags"] == ["night"]
    assert child["traceparent"].split("-")[1] == record["traceparent"].split("-")[1]
    assert queue.get(parent).features["waiting_for"] == "waiting for 20 of 20 children"
    run_all(queue, bell)
    done = queue.read(parent)
    assert done["status"] == JobStatus.DONE
    assert done["result"] == {"children": 20, "statuses": ["done"]}
    assert [e["event"] for e in done["history"]].count("resumed") == 1
    assert SEEN[parent + ":join"] == [20]
    assert not store.list_blobs(rules.open_prefix(fanout))


def test_a_rerun_of_the_fan_out_stage_creates_nothing_twice() -> None:
    queue, store, bell, _clock = make_queue()
    parent = submit(queue, {"pipeline": FAN, "payload": {"n": 9}})
    from shared.features.waits import fanout as fan

    record = queue.read(parent)
    job = {**record, "id": parent, "status": JobStatus.RUNNING, "attempts": 1}
    with pytest.raises(Parked):  # a first run that created the children
        fan_tools = queue.ctx.stage_tools(job, 1, 0, "fan")["waits"]
        fan_tools.fan_out(  # type: ignore[attr-defined]
            [{"pipeline": KID, "payload": {"i": i}} for i in range(9)], "fail", None
        )
    first = sorted(store.list_batch(rules.fanout_id(parent, 0)))
    run(queue, first[0])  # one child ends before the rerun
    assert fan.rules.fanout_id(parent, 0) == rules.fanout_id(parent, 0)
    assert run(queue, parent) == OutcomeKind.PARKED  # the real run: a rerun of the stage
    assert sorted(store.list_batch(rules.fanout_id(parent, 0))) == first
    run_all(queue, bell)
    assert status(queue, parent) == "done"
    assert queue.read(parent)["result"]["children"] == 9


def test_a_failed_child_under_fail_cancels_its_siblings_and_fails_the_parent() -> None:
    queue, store, bell, _clock = make_queue()
    parent = submit(queue, {"pipeline": FAN, "payload": {"n": 6}})
    run(queue, parent)
    fanout = queue.read(parent)["park"]["fanout"]
    kids = sorted(store.list_batch(fanout))
    broken = queue.read(kids[2])
    store.update({**broken, "payload": {"i": 2, "fail": [2]}}, store.read(kids[2]).generation)
    run(queue, kids[0])
    run(queue, kids[2])  # fails for good
    record = queue.read(parent)
    assert record["status"] == JobStatus.FAILED and kids[2] in record["error"]["message"]
    assert record["error"]["type"] == "ChildFailed"
    statuses = {k: status(queue, k) for k in kids}
    assert statuses[kids[0]] == "done" and statuses[kids[2]] == "failed"
    assert all(statuses[k] == "cancelled" for k in kids if k not in (kids[0], kids[2]))
    run_all(queue, bell)
    assert status(queue, parent) == "failed"


def test_under_continue_every_child_ends_and_the_join_sees_the_failure() -> None:
    queue, store, bell, _clock = make_queue()
    parent = submit(queue, {"pipeline": FAN, "payload": {"n": 4, "policy": "continue"}})
    run(queue, parent)
    kids = sorted(store.list_batch(queue.read(parent)["park"]["fanout"]))
    broken = queue.read(kids[1])
    store.update({**broken, "payload": {"i": 1, "fail": [1]}}, store.read(kids[1]).generation)
    run_all(queue, bell)
    assert queue.read(parent)["result"] == {"children": 4, "statuses": ["done", "failed"]}


def test_max_running_throttles_the_children_of_one_parent() -> None:
    queue, store, bell, _clock = make_queue()
    name = pipeline([("fan", _fan_limited), ("join", _join)])
    parent = submit(queue, {"pipeline": name, "payload": {"n": 5}})
    run(queue, parent)
    kids = sorted(store.list_batch(queue.read(parent)["park"]["fanout"]))
    assert queue.read(kids[0])["max_running"] == 2
    run_all(queue, bell)
    assert status(queue, parent) == "done"


def _fan_limited(ctx: StageContext) -> None:
    kids = [{"pipeline": KID, "payload": {"i": i}} for i in range(int(ctx.payload["n"]))]
    ctx.fan_out(kids, on_child_failure="continue", max_running=2)


def test_the_sweep_releases_a_parent_whose_last_child_hook_was_cut_short() -> None:
    queue, store, _bell, _clock = make_queue()
    parent = submit(queue, {"pipeline": FAN, "payload": {"n": 2}})
    run(queue, parent)
    fanout = queue.read(parent)["park"]["fanout"]
    for kid in store.list_batch(fanout):  # the children end, but no hook runs (a crash)
        stored = store.read(kid)
        store.update({**stored.record, "status": JobStatus.DONE}, stored.generation)
        store.delete_blob(rules.open_name(fanout, kid))
    assert status(queue, parent) == "waiting"
    queue.sweep_once()  # terminal children's markers: their hooks run again
    assert status(queue, parent) == "queued"


# ------------------------------------------------------------------ pure rules


def test_tokens_verify_only_with_their_key_and_name_their_waitpoint() -> None:
    key = b"k" * 32
    token = rules.sign(key, "job-1", "3.1.2")
    assert rules.verify(key, token) == ("job-1", "3.1.2")
    assert rules.verify(b"x" * 32, token) is None
    assert rules.verify(key, token.replace(".", "..")) is None
    assert rules.verify(key, None) is None
    with pytest.raises(InvalidInput):
        rules.sign(key, "job-1", "not-a-ref")


def test_child_ids_are_derived_from_parent_stage_and_index() -> None:
    assert rules.child_id("p", 2, 7) == "p-s2-00007"
    long = "x" * 120
    assert rules.child_id(long, 0, 1).startswith(rules.fanout_id(long, 0))
    assert rules.child_id(long, 0, 1) == rules.child_id(long, 0, 1)
    with pytest.raises(ValueError):
        rules.child_id("p", 0, rules.MAX_CHILDREN)


def test_park_and_release_fields() -> None:
    now = START
    job: dict[str, Any] = {"id": "j", "status": "running", "attempts": 2, "owner": "o"}
    park = {
        **rules.base_park("sleep", "s", 1, now),
        "until": (now + timedelta(seconds=5)).isoformat(),
    }
    parked = {**job, **rules.park_fields(job, now, park, 3)}  # type: ignore[arg-type]
    assert parked["status"] == "waiting" and parked["max_attempts"] == 4
    assert rules.is_parked(parked) and rules.wake_at(parked) == now + timedelta(seconds=5)
    released = {**parked, **rules.release_fields(parked, now, rules.outcome("slept", now))}  # type: ignore[arg-type]
    assert released["status"] == "queued" and released["park"] is None
    assert released["waited"]["status"] == "slept"
    with pytest.raises(ValueError):
        rules.release_fields(released, now, {})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rules.park_fields(released, now, park, 3)  # type: ignore[arg-type]


def test_release_due_is_none_for_records_that_are_not_parked() -> None:
    assert release.park_due({"status": "queued"}, START) == START + release.RECHECK


def test_an_upload_carrying_the_token_completes_the_wait_once() -> None:
    from shared.events import UploadedObject

    queue, _store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    token = SEEN[job_id + ":wp"][-1].token
    obj = UploadedObject("uploads", "proofs/a.pdf", 7, "application/pdf", 12, {UPLOAD_KEY: token})
    routed = queue.submit_upload(obj)
    assert routed.job is None and routed.to_json()["waitpoint"]["state"] == "resumed"
    again = queue.submit_upload(obj)  # a redelivered notification
    assert again.to_json()["waitpoint"]["state"] == "already"
    waited = queue.read(job_id)["waited"]
    assert waited["data"]["name"] == "proofs/a.pdf" and waited["by"].startswith("upload gs://")
    forged = UploadedObject("uploads", "x", 8, None, 1, {UPLOAD_KEY: "nope.nope"})
    assert queue.submit_upload(forged).to_json()["ignored"] is True


UPLOAD_KEY = "reclaim-waitpoint"


def test_the_sweep_releases_a_job_whose_early_completion_its_park_did_not_see() -> None:
    """A completer killed between keeping its completion and its second look, the park
    having looked before the completion was kept: the sweep's pass releases the job."""
    queue, store, _bell, _clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    park = queue.read(job_id)["park"]
    body = b'{"status": "completed", "at": "2026-07-26T10:00:00+00:00", "data": {"k": 1}}'
    store.put_blob(rules.done_name(job_id, park["ref"]), body, generation=0)
    assert status(queue, job_id) == "waiting"
    swept = queue.sweep_once()
    assert swept.resumed == 1 and status(queue, job_id) == "queued"
    assert queue.read(job_id)["waited"]["data"] == {"k": 1}
    assert not store.list_blobs(rules.DONE_ROOT)


def test_a_parked_job_the_sweep_reads_is_marked_due_ahead_and_counted_parked() -> None:
    from shared import metrics

    queue, store, _bell, clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    queue.sweep_once()
    (entry,) = store.list_pending()
    assert entry.due is not None and entry.due > clock()  # the sweep's one look marked it
    gauges = metrics.queue_gauges([queue.read(job_id)], clock(), pipelines=[WAITER])
    assert gauges[WAITER].parked == 1 and gauges[WAITER].queued == 0


def test_the_sweep_marks_a_parked_marker_once_per_look_ahead_not_each_run() -> None:
    queue, store, _bell, clock = make_queue()
    job_id = submit(queue, {"pipeline": WAITER})
    run(queue, job_id)
    marks: list[str] = []
    plain = store.mark_due

    def counted(job: str, due: datetime, **kw: Any) -> None:
        marks.append(job)
        plain(job, due, **kw)

    store.mark_due = counted  # type: ignore[method-assign]
    for _ in range(3):  # a small index: every record is read each run
        queue.sweep_once()
        clock.advance(60)
    assert marks == [job_id]
    clock.advance(release.RECHECK.total_seconds())
    queue.sweep_once()  # an hour on: marked ahead again
    assert marks == [job_id, job_id]


def test_the_waits_indexes_are_noted_on_the_index_board_before_they_are_written() -> None:
    """An idle sweep lists only what the board says may hold an entry
    (shared.hints.index_board): a sleep's time entry and a kept completion must be noted
    first, or a board made before them would hide them from the sweep."""
    from shared.hints import index_board

    queue, store, _bell, clock = make_queue()
    HOOKS["q"] = queue
    queue.sweep_once()  # the board's first whole check: every index empty
    assert index_board.read(store).entries == {}
    job_id = submit(queue, {"pipeline": SLEEPY, "payload": {"seconds": 7200}})
    assert run(queue, job_id) == OutcomeKind.PARKED
    (entry,) = store.list_blobs("scheduled/")
    slot, hour = entry.name.rsplit("/", 2)[:2]
    board = index_board.read(store)
    assert board.may_hold(slot + "/") and board.entries[slot + "/"].since == hour
    waiter = submit(queue, {"pipeline": WAITER, "payload": {"complete_first": "q"}})
    run(queue, waiter)  # the completion was kept (waits/repair/done/) before the park
    assert index_board.read(store).may_hold(rules.REPAIR_ROOT)
    clock.advance(7201)
    queue.sweep_once()
    assert status(queue, job_id) == "queued"
