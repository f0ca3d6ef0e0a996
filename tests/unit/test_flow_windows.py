"""The windows around a key's places when holders are killed, reclaimed or go silent,
pinned on the memory store (issue 46).

A place of a `max_running` key is handed from attempt to attempt by four moves: a
release (the holder gives it back: a finish, a requeue, a hand-back), a rescue (the
watchdog requeues a silent holder and frees its place), a re-claim (the drain takes a due
job, whose gate takes a place) and a take-over (a waiter's gate takes a place whose holder
no longer holds it). The chaos test (tests/chaos/test_flow_kills.py) samples their
orderings on the local cloud; here each window is driven into its worst interleaving with
the real gates, runner, owner handle and watchdog, and the rule is checked at that moment:

- a release never frees a place another attempt has taken over;
- a take-over never happens while the holder can still run a stage: a holder that is
  alive (its next write would land) keeps its place; a silent one is fenced (its record
  rescued) before its place is taken; a stage that cannot be stopped keeps the place
  until its process is gone.

"Can still run" is what the holder's own next write says: an owner whose record moved
under it stops at that write (heartbeat, checkpoint, ctx.check()).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import finish, job_queue, recovery
from shared.claim import runner
from shared.claim.drain import DrainGate, drain
from shared.claim.owned import OwnedRecord
from shared.claim.shutdown import Shutdown
from shared.claim.slots import Slots
from shared.config import Settings
from shared.errors import LostRace, OwnerLost, Stopped, Unavailable
from shared.features import flow
from shared.features import flow_policy as fp
from shared.jobs import JobStatus
from shared.logs import JobLogger
from shared.outcome import Outcome, OutcomeKind
from shared.pipelines import Pipeline, StageContext, register
from shared.queue import Queue, parse_submission
from shared.storage import Stored
from shared.stores.memory import MemoryStore
from tests.polling import wait_for
from tests.unit.unit_support import Bell, Clock

START = datetime(2026, 7, 26, 10, 0, 0, tzinfo=UTC)
STALE = 30.0
KEY = "seat"


class World:
    """One key with max_running 1 on a memory store, a settable clock, and the owners'
    handles the test keeps (an instance's running attempt)."""

    def __init__(self, **settings: Any) -> None:
        self.store = MemoryStore()
        self.bell = Bell()
        self.clock = Clock(START)
        base: dict[str, Any] = {
            "stale_seconds": STALE,
            "drain_max_jobs": 0,
            "min_write_interval_seconds": 1.0,
        }
        self.settings = Settings.from_env({}, **{**base, **settings})
        self.queue = Queue(self.store, self.bell, self.settings, clock=self.clock)
        flow._PAUSE_CACHE.clear()

    @property
    def ctx(self) -> Any:
        return self.queue.ctx

    def submit(self, job_id: str, pipeline: str = "demo") -> None:
        body = {"pipeline": pipeline, "id": job_id, "concurrency_key": KEY, "max_running": 1}
        self.queue.submit(parse_submission(body, self.settings))

    def claim(self, stored: Stored, owner: str) -> OwnedRecord:
        """The claim as the runner writes it (after the gates), and its owner's handle."""
        job = stored.record
        claimed = self.store.update(
            {**job, **job_queue.claim_fields(job, owner, self.clock())}, stored.generation
        )
        attempt = int(claimed.record["attempts"])
        return OwnedRecord(
            self.store,
            claimed,
            owner=owner,
            attempt=attempt,
            clock=self.clock,
            min_interval_s=1.0,
            heartbeat_s=STALE / 3,
            log=JobLogger(str(job["id"]), owner, attempt, None),
        )

    def take(self, job_id: str, stored: Stored | None = None) -> OwnedRecord | Outcome:
        """A delivery's gates, then its claim: the running attempt's handle, or what held
        it back."""
        stored = stored or self.store.read(job_id)
        now = self.clock()
        for gate in self.ctx.gates():
            held = gate(self.ctx, stored, now)
            if held is not None:
                return held
        try:
            return self.claim(stored, f"inst-{job_id}.{job_queue.attempts_of(stored.record) + 1}")
        except LostRace:
            return Outcome(job_id, OutcomeKind.RACED, "another owner won")

    def hold(self, job_id: str) -> OwnedRecord:
        taken = self.take(job_id)
        assert isinstance(taken, OwnedRecord), taken
        return taken

    def deliver(self, job_id: str) -> Outcome:
        """A push to another instance: the whole runner, its own shutdown."""
        return self.queue.handle_delivery(
            job_id, owner=f"inst-{job_id}", slots=Slots(4), gate=DrainGate(), shutdown=Shutdown()
        )

    def place(self) -> fp.Holder | None:
        """Who the key's one place names (None: empty)."""
        return fp.parse_holder(self.store.read_blob(fp.place_name(KEY, 0)).data)


def can_write(owned: OwnedRecord) -> bool:
    """The owner's next write lands (a heartbeat it forces now): it can still run."""
    try:
        owned.confirm(-1.0)
    except OwnerLost:
        return False
    return True


def would_land(world: World, owned: OwnedRecord) -> bool:
    """The owner's next write would land, without writing: its handle is open and the
    record is still at the generation it holds."""
    if owned.lost:
        return False
    try:
        owned.confirm(float("inf"))  # raises only once the handle is lost or closed
    except OwnerLost:
        return False
    return world.store.read(str(owned.stored.record["id"])).generation == owned.stored.generation


def probe_pipeline(probe: Callable[[StageContext], object]) -> str:
    """A one-stage pipeline whose stage is `probe` (what it returns is dropped)."""

    def stage(ctx: StageContext) -> None:
        probe(ctx)

    name = f"flow-probe-{id(probe):x}"
    register(Pipeline(name, stages=[("probe", stage)]), replace=True)
    return name


@contextlib.contextmanager
def before_next_write(store: MemoryStore, then: Callable[[], object]) -> Iterator[None]:
    """Run `then` once, just before the next write of the store (a place or a record)
    lands: another thread's write slipping in between a look and a compare-and-swap."""
    fired: list[bool] = []
    put_blob, update = store.put_blob, store.update

    def fire() -> None:
        if not fired:
            fired.append(True)
            then()

    def put_blob_after(name: str, data: bytes, *, generation: int) -> int:
        fire()
        return put_blob(name, data, generation=generation)

    def update_after(record: Any, generation: int) -> Stored:
        fire()
        return update(record, generation)

    store.put_blob = put_blob_after  # type: ignore[method-assign]
    store.update = update_after  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.put_blob, store.update = put_blob, update  # type: ignore[method-assign]
    assert fired, "the interleaving never happened: the test arranged nothing"


# ------------------------------------------------------------------ take-overs


def test_a_silent_holder_is_fenced_before_its_place_is_taken_over() -> None:
    """A holder paused or starved past the stale time (alive, not dead): the waiter that
    takes its place must first make the holder's next write fail, or both run."""
    world = World()
    seen: dict[str, bool] = {}
    world.submit("a")
    world.submit("b", probe_pipeline(lambda ctx: seen.setdefault("a_runs", can_write(a))))
    a = world.hold("a")
    world.clock.advance(STALE + 1)  # a's owner is silent past the stale time, yet alive
    assert world.deliver("b").kind == OutcomeKind.DONE  # b took the place over and ran
    assert seen == {"a_runs": False}, "b ran its stage while a could still run its own"


def test_a_claim_that_lands_after_its_place_was_taken_over_is_refused() -> None:
    """A delivery that took the place, then stalled (a pause, a slow storage call) past the
    stale time before its claim landed: once the place is taken over, that claim fails."""
    world = World()
    world.submit("a")
    world.submit("b")
    late = world.store.read("a")
    assert flow.limit_gate(world.ctx, late, world.clock()) is None  # a's gate took the place
    world.clock.advance(STALE + 1)  # ...and its claim is still on its way
    b = world.hold("b")  # b takes the place over and runs
    assert world.place() == fp.Holder("b", 1, world.clock())
    with pytest.raises(LostRace):  # a's claim, as the runner writes it
        world.claim(late, "inst-a.1")
    assert would_land(world, b)


def test_a_job_never_takes_its_place_back_from_its_own_attempt_while_that_one_is_alive() -> None:
    """The drain re-claims a's stale running record (a take-over of its own attempt) while
    a's first owner, only slow, writes a heartbeat between the gate's look and its write:
    the re-claim loses, and the place must still count for the attempt that runs."""
    world = World()
    world.submit("a")
    seen: dict[str, bool] = {}
    world.submit("b", probe_pipeline(lambda ctx: seen.setdefault("a_runs", can_write(a))))
    a = world.hold("a")
    world.clock.advance(STALE + 1)
    stale = world.store.read("a")
    with before_next_write(world.store, lambda: can_write(a)):  # a's heartbeat lands
        retaken = world.take("a", stale)
    assert isinstance(retaken, Outcome) and retaken.kind in (
        OutcomeKind.RACED,
        OutcomeKind.SKIPPED,
    ), retaken
    assert would_land(world, a)  # a is alive and still owns its record
    b = world.deliver("b")
    assert b.kind == OutcomeKind.SKIPPED or seen == {"a_runs": False}, (b, seen)


# ------------------------------------------------------------------ the owner's side


def test_a_holders_proof_of_life_counts_from_when_its_write_was_stamped() -> None:
    """A heartbeat that took 20 s to land (retries) says "alive at t" although it landed
    at t + 20: the owner must prove life again by t + stale/2, as everyone else reads it,
    or it runs on after a waiter, reading t, took its place over."""
    world = World()
    world.submit("a")
    world.submit("b")
    a = world.hold("a")
    world.clock.advance(20)
    update = world.store.update

    def lands_late(record: Any, generation: int) -> Stored:
        world.clock.advance(20)  # stamped before the call, landed 20 s later
        return update(record, generation)

    world.store.update = lands_late  # type: ignore[method-assign]
    assert can_write(a)
    world.store.update = update  # type: ignore[method-assign]
    world.clock.advance(STALE / 2 - 4)  # 11 s after it landed, 31 s after its stamp
    assert world.deliver("b").kind == OutcomeKind.DONE  # b took the place (a looks stale)
    with pytest.raises(OwnerLost):  # what a's next ctx.check() does: a proof, refused
        a.confirm(world.settings.ownership_confirm_seconds)


def test_a_holder_that_cannot_prove_life_within_its_lease_stops_at_its_next_check() -> None:
    """Storage refuses the holder's writes (a partition on its side) for most of the
    stale time: its check() must stop the stage before a waiter may take its place."""
    world = World()
    seen: dict[str, bool] = {}

    def cut_off(ctx: StageContext) -> None:
        world.store.inject_failure("write", Unavailable("cut off"), times=10_000)
        world.clock.advance(STALE * 2 / 3 + 1)  # no proof of life for most of its lease
        try:
            ctx.check()
            seen["ran_on"] = True
        except Stopped:
            seen["ran_on"] = False

    world.submit("a", probe_pipeline(cut_off))
    with contextlib.suppress(Unavailable):  # a stage that ran on fails at its final write
        world.deliver("a")
    assert seen == {"ran_on": False}, "the stage ran on without a proof of life"


# ------------------------------------------------------------------ the hand-back


def test_a_stage_handed_back_from_outside_keeps_its_place_while_it_can_run() -> None:
    """SIGTERM, and the stage neither ends nor calls check() within the first half of the
    grace: it is handed back from outside while it runs on until the SIGKILL. The place
    stays its own until then: a waiter that comes meanwhile waits."""
    world = World()
    shutdown = Shutdown(hand_back_wait_s=0.0)
    seen: dict[str, Outcome] = {}

    def one_long_call(ctx: StageContext) -> None:  # never calls ctx.check()
        shutdown.begin("SIGTERM (test)")
        wait_for(
            "the hand-back from outside",
            lambda: world.store.read("a").record["status"] == JobStatus.QUEUED,
            timeout=30,
            interval=0.01,
        )
        seen["b"] = world.deliver("b")  # a push to another instance, while this one runs

    world.submit("a", probe_pipeline(one_long_call))
    world.submit("b")
    runner.handle_delivery(
        world.ctx, "a", owner="inst-a", slots=Slots(4), gate=DrainGate(), shutdown=shutdown
    )
    assert seen["b"].kind == OutcomeKind.SKIPPED, seen["b"]  # it waited
    handed = [e for e in world.store.read("a").record["history"] if e["event"] == "handed back"]
    assert handed[-1]["stage_running"] is True  # the history says the stage ran on...
    said = datetime.fromisoformat(handed[-1]["stopped_by"])  # ...until the SIGKILL at most
    assert world.clock() < said <= world.clock() + timedelta(seconds=10)
    world.clock.advance(shutdown.hand_back_wait_s + 11)  # past the SIGKILL at the latest
    assert world.deliver("b").kind == OutcomeKind.DONE


# ------------------------------------------------------------------ every ordering

MOVES = ("release", "rescue", "re-claim", "take-over")


def _orderings() -> Iterator[tuple[str, ...]]:
    return itertools.permutations(MOVES)


@pytest.mark.parametrize("order", list(_orderings()), ids="-".join)
def test_every_ordering_around_a_hand_back_keeps_one_attempt_running(
    order: tuple[str, ...],
) -> None:
    """a holds the place and its instance is killed (SIGKILL: it never writes again); once
    a is stale, b takes the place and runs, and b's instance is reclaimed gracefully:
    b's hand-back is written. Then the four moves, in this order: b's release (and the rest
    of its hand-back: due mark, ring), the sweep's rescue of a, the drain's re-claim of a
    due job, the delivery of the waiter c. After each move, at most one attempt of the key
    can still run, and the place names it."""
    world = World(drain_max_jobs=3)
    for job_id in ("a", "b", "c"):
        world.submit(job_id)
    world.hold("a")  # then killed: its handle is never used again
    world.clock.advance(STALE + 1)
    b = world.hold("b")
    assert isinstance(world.take("c"), Outcome)  # c waits behind b (a waiter marker)
    handed = b.finish(
        lambda job: job_queue.handback_fields(job, world.clock(), max_attempts=5), "handed back"
    )
    running: dict[str, OwnedRecord] = {}

    def release() -> None:  # what _hand_back does after its write
        finish.after_requeue(world.ctx, handed.record)
        recovery.mark_due(world.store, "b", world.clock())

    def rescue() -> None:
        for job_id in ("a", "b", "c"):
            recovery.recover(world.ctx, world.store.read(job_id), world.clock())

    def reclaim() -> None:
        def take(job_id: str, stored: Stored) -> Outcome:
            taken = world.take(job_id, stored)
            if isinstance(taken, Outcome):
                return taken
            running[job_id] = taken
            return Outcome(job_id, OutcomeKind.DONE, "running")

        drain(world.store, world.settings, world.clock, take, DrainGate())

    def take_over() -> None:
        taken = world.take("c")
        if isinstance(taken, OwnedRecord):
            running["c"] = taken

    moves = {"release": release, "rescue": rescue, "re-claim": reclaim, "take-over": take_over}
    for move in order:
        moves[move]()
        alive = {j: o for j, o in running.items() if would_land(world, o)}
        assert len(alive) <= 1, (move, sorted(alive))
        for job_id, owned in alive.items():
            assert world.place() == fp.Holder(job_id, owned.attempt, world.clock()), (
                move,
                job_id,
                world.place(),
            )


# ------------------------------------------------------------------ the rules and the words

T = START


@pytest.mark.parametrize(
    ("record", "standing"),
    [
        (None, fp.Standing.GONE),  # no record: nothing can run it
        ({"status": "running", "attempts": 2, "updated_at": T.isoformat()}, fp.Standing.HOLDS),
        ({"status": "running", "attempts": 1, "updated_at": T.isoformat()}, fp.Standing.HOLDS),
        ({"status": "running", "attempts": 2, "updated_at": "2026-07-26T09:00:00+00:00"}, "silent"),
        ({"status": "queued", "attempts": 1}, fp.Standing.HOLDS),  # about to claim
        ({"status": "queued", "attempts": 2, "updated_at": T.isoformat()}, fp.Standing.GONE),
        ({"status": "done", "attempts": 2}, fp.Standing.GONE),
        ({"status": "running", "attempts": 3, "updated_at": T.isoformat()}, fp.Standing.GONE),
    ],
)
def test_a_places_holder_stands_by_its_own_jobs_record(record: Any, standing: str) -> None:
    """Holder attempt 2, read 10 s after it took the place: a fresh run of that attempt
    (or of the one before: its own re-claim lost to it) holds; a stale run is silent (fence
    it first); a later attempt, an end or a requeue is gone."""
    holder = fp.Holder("a", 2, T)
    assert fp.standing(holder, record, T + timedelta(seconds=10), STALE) == standing


def test_a_place_taken_long_ago_by_a_job_that_never_claimed_must_be_fenced() -> None:
    holder = fp.Holder("a", 2, T)
    queued = {"status": "queued", "attempts": 1}
    later = T + timedelta(seconds=STALE + 1)
    assert fp.standing(holder, queued, later, STALE) is fp.Standing.UNCLAIMED  # type: ignore[arg-type]


def test_a_place_held_until_a_time_counts_whatever_the_record_says() -> None:
    until = T + timedelta(seconds=10)
    holder = fp.Holder("a", 2, T, until)
    assert fp.parse_holder(holder.to_bytes()) == holder
    handed = {"status": "queued", "attempts": 2}
    assert fp.standing(holder, handed, until - timedelta(seconds=1), STALE) is fp.Standing.HOLDS  # type: ignore[arg-type]
    assert fp.standing(holder, handed, until, STALE) is fp.Standing.GONE  # type: ignore[arg-type]
    assert fp.standing(holder, None, until - timedelta(seconds=1), STALE) is fp.Standing.HOLDS


def test_running_until_reads_only_an_entry_whose_stage_still_ran() -> None:
    stopped: Any = {"at": T.isoformat(), "event": "handed back", "attempt": 1}
    running: Any = {**stopped, "stage_running": True, "stopped_by": "2026-07-26T10:00:10+00:00"}
    assert fp.running_until({"history": [running, stopped]}) is None
    assert fp.running_until({"history": [stopped, running]}) == T + timedelta(seconds=10)
    assert fp.running_until({}) is None


def test_the_history_says_when_a_silent_attempt_stopped() -> None:
    """A rescue and a claim over a silent owner both say its last proof of life and the
    end of its lease (the latest it ran); a hand-back from outside says its stage ran on."""
    world = World()
    world.submit("a")
    world.submit("b")
    world.hold("a")
    world.clock.advance(STALE + 1)
    recovery.recover(world.ctx, world.store.read("a"), world.clock())
    rescued = world.store.read("a").record["history"][-1]
    assert rescued["event"] == "rescued" and rescued["attempt"] == 1
    assert (rescued["last_seen"], rescued["stopped_by"]) == (
        START.isoformat(),
        (START + timedelta(seconds=STALE)).isoformat(),
    )
    world.submit("c")  # on its last attempt: the watchdog fails it, and says the same
    world.store.update(
        {**world.store.read("c").record, "max_attempts": 1}, world.store.read("c").generation
    )
    world.clock.advance(100)
    c = world.hold("c")
    world.clock.advance(STALE + 1)
    recovery.recover(world.ctx, world.store.read("c"), world.clock())
    failed = world.store.read("c").record["history"][-1]
    assert failed["event"] == "failed" and failed["last_seen"] == c.stored.record["updated_at"]
    b = world.hold("b")
    world.clock.advance(STALE + 1)  # b's owner dies; a delivery of b claims over it
    assert world.deliver("b").kind == OutcomeKind.DONE
    claims = [e for e in world.store.read("b").record["history"] if e["event"] == "claimed"]
    assert claims[-1]["took_over_from"] == b.owner
    assert claims[-1]["last_seen"] == b.stored.record["updated_at"]
    assert claims[-1]["stopped_by"] == job_queue.format_time(
        datetime.fromisoformat(b.stored.record["updated_at"]) + timedelta(seconds=STALE)
    )
