"""The chaos test: 120 jobs or more over up to 3 claim instances while all goes wrong.

Claim runs on the local Cloud Run platform (scaled from zero, at most 3 instances
x concurrency 4, idle ones scaled in). At random (seeded; the seed is printed and
in every failure message; set RECLAIM_CHAOS_SEED to replay one), and each fault only
once the state it needs exists (never after a wall-clock delay, which a slow machine
outruns; more jobs are submitted while faults are due and the work runs low): the
platform reclaims instances holding a job past its first checkpoint, twice gracefully
(SIGTERM, the grace, SIGKILL: a rollout or host maintenance; their jobs are handed
back) and twice hard (SIGKILL: a host failure; their jobs wait for the staleness
rescue), and the autoscaler starts replacements as demand calls for them; one
instance holding two running jobs is SIGSTOPped and unrouted past stale_s and
SIGCONTed only after its jobs were re-claimed (the zombie); the Pub/Sub emulator
duplicates deliveries and drops doorbell publishes; the fault proxy in front of
fake-gcs-server answers 503/429 to a fraction of requests and loses the answer of a
few it forwarded; and a rollout: submit's new revision learns a new pipeline before
claim's does (its jobs are handed back, no attempt spent), then claim's next release
(one more demo stage) is deployed mid-pipeline with its old revision drained at once
(tests/chaos/rollout_fault.py).

Then, reading the bucket through the queue's front door: every job terminal, no
unreadable record, attempts <= the job's budget (which grows by one per hand-back
only), every done job's result written by its final owner and attempt (history
never goes back to an older attempt, so no zombie commit), every output the result
names exists and was written by the attempt it names, no job of a gracefully
reclaimed instance left to the staleness rescue, no pending marker left over.

Workflows ride along: each batch names an on_complete callback and every tenth job
depends on the job before it. Every batch's callback fires exactly once, no child is
claimed before its parent is done, and a child of a failed parent is cancelled unrun.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.cloud import LocalCloud
from reclaim.local.faultproxy import FaultProxy
from reclaim.local.observe import (
    Watch,
    all_terminal,
    counts_by_status,
    emulator_stats,
    handed_back_at,
    instance_pids,
    parse_at,
    reclaimed_at,
    running_on,
    topic_count,
)
from reclaim.local.procs import free_port
from shared.job_queue import TERMINAL_STATUSES
from tests.chaos.rollout_fault import RolloutFault
from tests.chaos.rollout_fault import check as check_rollout

N_JOBS = 120
BATCH = 30
INSTANCES = 3
MAX_CONCURRENT = 4
IDLE_S = 5.0
STALE_S = 6.0
SWEEP_S = 2.0
MAX_ATTEMPTS = 6
RECLAIMS = ("graceful", "hard", "graceful", "hard")  # shuffled by the seed
EXTENSIONS = 6
"""At most this many extra batches of BATCH jobs, submitted while a planned fault still
waits for the work it needs (a fast machine can finish the first N_JOBS before it)."""
ENDINGS = ("done", "requeued", "failed")
"""History events by which an owner ends its own attempt."""
LOW_WATER = INSTANCES * MAX_CONCURRENT // 2
"""Extend the work once fewer jobs than this are unfinished with faults still due."""
DEADLINE_S = 150.0
CHILD_EVERY = 10  # every tenth job depends on the job before it (same batch: BATCH % 10 == 0)
CALLBACK = {"pipeline": "demo", "payload": {"stages": 2, "sleep_s": 1.5}}
"""Each batch's callback is real work at the storm's tail (3 s): a platform reclaim due
late still finds a serving instance, and it may land on a callback."""

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]


@dataclass
class Chaos:
    """What the storm did, for the assertions and the failure messages."""

    seed: int
    plan: list[str] = field(default_factory=list)
    kills: list[tuple[int, str]] = field(default_factory=list)
    handed: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Jobs running on a gracefully reclaimed instance: (owner, attempt) at the SIGTERM."""
    zombie: int | None = None
    zombie_jobs: dict[str, tuple[str, int]] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)
    paused_at: float | None = None
    paused_wall: datetime | None = None
    """When the zombie was stopped, on the clock the functions stamp history with."""
    resumed_at: float | None = None
    extensions: int = 0
    rollout: RolloutFault = field(default_factory=RolloutFault)
    """Submit, then claim, deployed mid-storm (tests/chaos/rollout_fault.py)."""

    def faults_due(self) -> int:
        """Planned faults that have not struck yet (reclaims, the zombie's pause, the
        rollout)."""
        return len(RECLAIMS) - len(self.kills) + (self.zombie is None) + (not self.rollout.done)

    def say(self, what: str) -> str:
        return f"[chaos seed {self.seed}] {what}"


# ----------------------------------------------------------------- the workload


def _jobs(rng: random.Random, count: int = N_JOBS) -> list[dict[str, Any]]:
    """Mostly healthy jobs with outputs, some that fail once, a few that fail for good."""
    jobs: list[dict[str, Any]] = []
    for _ in range(count):
        sleeps = [round(rng.uniform(0.2, 0.9), 2) for _ in range(3)]
        payload: dict[str, Any] = {"stages": 3, "sleep_s": sleeps, "output": True}
        roll = rng.random()
        if roll < 0.12:
            payload.update(fail_at=rng.randrange(3), fail_attempts=1)
        elif roll < 0.18:
            payload.update(fail_at=rng.randrange(3), permanent=True)
        jobs.append(
            {"id": f"chaos-{rng.getrandbits(64):016x}", "pipeline": "demo", "payload": payload}
        )
        if len(jobs) % CHILD_EVERY == 0:  # workflows: wait for the job before
            jobs[-1]["depends_on"] = [jobs[-2]["id"]]
    return jobs


def _submit(url: str, jobs: list[dict[str, Any]], chaos: Chaos) -> list[str]:
    """POST one batch; a 503 (storage faults outlasted the retry) is replayed: ids make
    it idempotent."""
    body = json.dumps({"jobs": jobs, "on_complete": CALLBACK}).encode()
    for _ in range(10):
        req = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                answer = json.loads(resp.read())
                chaos.batches.append(str(answer["batch_id"]))
                return [str(j["id"]) for j in answer["jobs"]]
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise AssertionError(
                    chaos.say(f"submit answered {exc.code}: {exc.read()!r}")
                ) from None
            time.sleep(0.5)
    raise AssertionError(chaos.say("submit kept answering 503"))


# ----------------------------------------------------------------- the storm


def _storm(
    cloud: LocalCloud,
    watch: Watch,
    jobs: list[dict[str, Any]],
    ids: list[str],
    rng: random.Random,
    chaos: Chaos,
) -> dict[str, dict[str, Any]]:
    """Kill, pause and resume instances until every job is terminal (or the deadline).

    Every fault waits for the state it needs, never for a time: a reclaim for a serving
    instance holding a job past its first checkpoint, the pause for one holding two
    running jobs. While faults are still due and the work runs low, more is submitted
    (`jobs` and `ids` grow), so a machine of any speed meets every planned fault."""
    t0 = time.monotonic()
    records: dict[str, dict[str, Any]] = {}
    while time.monotonic() - t0 < DEADLINE_S:
        records = watch.snapshot(ids + chaos.rollout.fresh_ids)
        now = time.monotonic() - t0
        _maybe_pause(cloud, watch, records, chaos, now)
        _maybe_resume(cloud, records, chaos, now)
        _maybe_kill(cloud, records, rng, chaos, now)
        _maybe_roll_out(cloud, watch, records, chaos, now)
        if _maybe_extend(cloud, records, jobs, ids, rng, chaos):
            continue
        if all_terminal(records) and chaos.resumed_at is not None and not chaos.faults_due():
            return records
        time.sleep(0.3)
    return records


def _maybe_roll_out(
    cloud: LocalCloud, watch: Watch, records: dict[str, Any], chaos: Chaos, now: float
) -> None:
    """The rollout's next step: submit learns a new pipeline first; claim's next release
    (one more demo stage) is deployed once the zombie is awake again (a stopped process
    cannot hand back) and a job is mid-pipeline, its old revision drained at once."""
    line = chaos.rollout.step(
        cloud,
        watch,
        ready=lambda: (
            chaos.resumed_at is not None
            and any(_checkpointed(r) for r in records.values() if r.get("status") == "running")
        ),
    )
    if line:
        print(chaos.say(f"t={now:.1f}s {line}"))


def _maybe_extend(
    cloud: LocalCloud,
    records: dict[str, Any],
    jobs: list[dict[str, Any]],
    ids: list[str],
    rng: random.Random,
    chaos: Chaos,
) -> bool:
    """Submit another batch if faults are due and little work is left for them."""
    unfinished = sum(r.get("status") not in TERMINAL_STATUSES for r in records.values())
    if not chaos.faults_due() or unfinished >= LOW_WATER or chaos.extensions >= EXTENSIONS:
        return False
    more = _jobs(rng, BATCH)
    ids += _submit(cloud.endpoints["jobs"], more, chaos)
    jobs += more
    chaos.extensions += 1
    print(chaos.say(f"{chaos.faults_due()} faults still due, {unfinished} jobs left: +{BATCH}"))
    return True


def _maybe_pause(
    cloud: LocalCloud, watch: Watch, records: dict[str, Any], chaos: Chaos, now: float
) -> None:
    if chaos.zombie is not None:
        return
    busy = {i: running_on(records, pids) for i, pids in instance_pids(cloud).items()}
    index = max(busy, key=lambda i: len(busy[i]), default=None)
    if index is None or len(busy[index]) < 2:
        return
    claim = cloud.service("claim")
    claim.pause(index, unroute=True)  # returns once every process of it is stopped
    paused_wall = datetime.now(UTC)
    after = watch.snapshot(busy[index])
    held = {
        j: (owner, attempt)
        for j, (owner, attempt) in busy[index].items()
        if after[j].get("status") == "running" and after[j].get("owner") == owner
    }
    if not held:  # everything it held finished meanwhile: not a zombie yet, try again
        claim.resume(index)
        return
    chaos.zombie, chaos.zombie_jobs, chaos.paused_at = index, held, now
    chaos.paused_wall = paused_wall
    print(chaos.say(f"t={now:.1f}s SIGSTOP claim-{index} holding {sorted(held)}"))


def _maybe_resume(cloud: LocalCloud, records: dict[str, Any], chaos: Chaos, now: float) -> None:
    if chaos.zombie is None or chaos.resumed_at is not None or chaos.paused_at is None:
        return
    taken = all(
        reclaimed_at(records[j], attempt) is not None
        or records[j].get("status") in ("done", "failed")
        for j, (_owner, attempt) in chaos.zombie_jobs.items()
    )
    if now - chaos.paused_at > STALE_S and taken:
        _forget_ended_before_pause(records, chaos)
        cloud.service("claim").resume(chaos.zombie)
        if not chaos.zombie_jobs:  # it had ended them all itself: not a zombie, once more
            print(chaos.say(f"t={now:.1f}s SIGCONT claim-{chaos.zombie}: it held nothing"))
            chaos.zombie, chaos.paused_at, chaos.paused_wall = None, None, None
            return
        chaos.resumed_at = now
        print(chaos.say(f"t={now:.1f}s SIGCONT claim-{chaos.zombie}: its jobs were re-claimed"))
    elif now - chaos.paused_at > 60:
        raise AssertionError(chaos.say("the zombie's jobs were not re-claimed within 60 s"))


def _forget_ended_before_pause(records: dict[str, Any], chaos: Chaos) -> None:
    """Forget zombie jobs whose attempt the zombie itself ended with a write stamped
    before its SIGSTOP: that write was on the wire when the process stopped and landed
    after the snapshot that chose the jobs. A write stamped later cannot land before
    the SIGCONT, and by then each job was re-claimed (a new generation): any commit of
    the zombie after this stays a zombie commit and fails the test."""
    assert chaos.paused_wall is not None
    for job_id, (_owner, attempt) in list(chaos.zombie_jobs.items()):
        for entry in records[job_id].get("history") or []:
            if not isinstance(entry, dict) or entry.get("attempt") != attempt:
                continue
            at = parse_at(entry.get("at"))
            if entry.get("event") in ENDINGS and at is not None and at <= chaos.paused_wall:
                print(chaos.say(f"{job_id}: attempt {attempt} ended just before the SIGSTOP"))
                del chaos.zombie_jobs[job_id]
                break


def _checkpointed(record: dict[str, Any]) -> bool:
    """The job's current attempt has written a checkpoint (it is past its first stage)."""
    attempt = record.get("attempts")
    return any(
        isinstance(e, dict) and e.get("event") == "checkpoint" and e.get("attempt") == attempt
        for e in record.get("history") or []
    )


def _maybe_kill(
    cloud: LocalCloud, records: dict[str, Any], rng: random.Random, chaos: Chaos, now: float
) -> None:
    """The next planned reclaim, once a serving instance holds a job past its first
    checkpoint, and once the previous victim has left (a replacement carries the work)."""
    if len(chaos.kills) >= len(RECLAIMS):
        return
    views = cloud.service("claim").instances()
    if chaos.kills and any(v["id"] == chaos.kills[-1][0] for v in views):
        return
    serving = {v["id"] for v in views if v["state"] == "serving" and not v["paused"]}
    live = {i: p for i, p in instance_pids(cloud).items() if i in serving and i != chaos.zombie}
    busy = {i: running_on(records, pids) for i, pids in live.items()}
    ready = sorted(i for i, held in busy.items() if any(_checkpointed(records[j]) for j in held))
    if not ready:
        return
    index = rng.choice(ready)
    mode = chaos.plan[len(chaos.kills)]
    cloud.service("claim").reclaim(index, graceful=mode == "graceful")
    if mode == "graceful":
        chaos.handed.update(busy[index])
    chaos.kills.append((index, mode))
    signal = "SIGTERM (a graceful" if mode == "graceful" else "SIGKILL (a hard"
    print(chaos.say(f"t={now:.1f}s {signal} platform reclaim) claim-{index} {sorted(busy[index])}"))


# ----------------------------------------------------------------- the checks


def _history_attempts(record: dict[str, Any]) -> list[int]:
    return [
        e["attempt"]
        for e in record.get("history") or []
        if isinstance(e, dict) and isinstance(e.get("attempt"), int)
    ]


def _check_done(job_id: str, rec: dict[str, Any], watch: Watch, chaos: Chaos) -> None:
    """The result was built by the final attempt; every output it names is real."""
    attempts, result = rec["attempts"], rec.get("result") or {}
    assert result.get("attempt") == attempts, chaos.say(f"{job_id}: result by another attempt")
    done = [e for e in rec["history"] if e.get("event") == "done"]
    assert len(done) == 1, chaos.say(f"{job_id}: {len(done)} done events")
    assert done[0]["owner"] == rec["owner"] and done[0]["attempt"] == attempts, chaos.say(
        f"{job_id}: done written by {done[0]} but the final owner is {rec['owner']}/{attempts}"
    )
    claims = [e for e in rec["history"] if e.get("event") == "claimed"]
    assert claims and claims[-1]["owner"] == rec["owner"], chaos.say(f"{job_id}: owner mismatch")
    completed = result.get("completed") or []
    assert [c["stage"] for c in completed] == [0, 1, 2], chaos.say(f"{job_id}: {completed}")
    if not result.get("receipt"):  # the release's added stage may be the final attempt's own
        last = completed[-1]["attempt"]
        assert last == attempts, chaos.say(f"{job_id}: last stage by old attempt")
    assert all(c["attempt"] <= attempts for c in completed)
    outputs = result.get("outputs") or []
    assert len(outputs) == 3, chaos.say(f"{job_id}: outputs {outputs}")
    for stage, (entry, name) in enumerate(zip(completed, outputs, strict=True)):
        assert name == f"outputs/{job_id}/{entry['attempt']}/stage-{stage}.json", chaos.say(name)
        body = json.loads(watch.output(name))
        assert body == {"job_id": job_id, "stage": stage, "attempt": entry["attempt"]}


def _cancelled_by_parent(job: dict[str, Any], records: dict[str, dict[str, Any]]) -> bool:
    """A child whose parent did not end done: cancelled, never claimed, the parent named."""
    if not job.get("depends_on"):
        return False
    (parent,) = job["depends_on"]
    return records[parent].get("status") != "done"


def _check_child(job: dict[str, Any], records: dict[str, dict[str, Any]], chaos: Chaos) -> None:
    """No child claimed before its parent was done; a failed parent cancels it unrun."""
    (parent,) = job["depends_on"]
    rec, prec = records[job["id"]], records[parent]
    if prec["status"] != "done":
        assert rec["status"] == "cancelled" and rec.get("attempts") == 0, chaos.say(
            f"{job['id']}: parent {parent} {prec['status']}, child {rec['status']}"
        )
        assert rec.get("parent_failure", {}).get("parent") == parent, chaos.say(str(rec))
        return
    done_at = max(e["at"] for e in prec["history"] if e["event"] == "done")
    claims = [e["at"] for e in rec.get("history") or [] if e["event"] == "claimed"]
    assert claims and min(claims) >= done_at, chaos.say(
        f"{job['id']} claimed at {min(claims or [''])} before its parent was done at {done_at}"
    )


def _callbacks(watch: Watch, chaos: Chaos) -> dict[str, list[dict[str, Any]]]:
    """batch id -> its callback records, once each has ended (bounded wait)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for _ in range(int(10 * SWEEP_S / 0.5)):
        cb_ids = [i for i in watch.stored_ids() if i.startswith("cb-")]
        records = watch.snapshot(cb_ids)
        found = {b: [] for b in chaos.batches}
        for rec in records.values():
            found.setdefault(str(rec.get("callback_of")), []).append(rec)
        if all(found[b] for b in chaos.batches) and all_terminal(records):
            break
        time.sleep(0.5)
    return found


def _budget(rec: dict[str, Any]) -> int:
    """The job's attempt budget: MAX_ATTEMPTS plus one per hand-back (which costs none)."""
    return MAX_ATTEMPTS + int(rec.get("handbacks") or 0)


def _check_record(job_id: str, rec: dict[str, Any], watch: Watch, chaos: Chaos) -> None:
    status = rec.get("status")
    assert status in ("done", "failed", "cancelled"), chaos.say(f"{job_id} is {status}: {rec}")
    attempts = rec.get("attempts")
    assert (rec.get("max_attempts") or MAX_ATTEMPTS) == _budget(rec), chaos.say(
        f"{job_id}: max_attempts {rec.get('max_attempts')} with {rec.get('handbacks')} hand-backs"
    )
    assert isinstance(attempts, int) and 1 <= attempts <= _budget(rec), chaos.say(
        f"{job_id}: attempts={attempts}"
    )
    seen = _history_attempts(rec)
    assert seen == sorted(seen), chaos.say(
        f"{job_id}: history went back to an older attempt {seen}"
    )
    if status == "done":
        _check_done(job_id, rec, watch, chaos)


def _expected_outcome(job: dict[str, Any], rec: dict[str, Any], chaos: Chaos) -> None:
    """Permanent failures fail; everything else is done unless chaos burned every attempt."""
    payload, job_id = job["payload"], job["id"]
    if payload.get("permanent"):
        assert rec["status"] == "failed", chaos.say(
            f"{job_id}: permanent failure is {rec['status']}"
        )
        assert "injected failure" in rec["error"]["message"]
    elif rec["status"] != "done":
        assert rec["attempts"] == _budget(rec), chaos.say(
            f"{job_id} failed early: {rec.get('error')}"
        )


def _never_left_to_staleness(records: dict[str, dict[str, Any]], chaos: Chaos) -> list[str]:
    """Jobs of a gracefully reclaimed instance whose attempt there was rescued by the
    watchdog or taken over as stale (the hand-back exists to avoid exactly that)."""
    stale = []
    for job_id, (owner, attempt) in chaos.handed.items():
        for entry in records[job_id].get("history") or []:
            rescued = entry.get("event") == "rescued" and entry.get("attempt") == attempt
            taken = entry.get("event") == "claimed" and entry.get("took_over_from") == owner
            if rescued or taken:
                stale.append(job_id)
    return stale


def _pending_drained(watch: Watch) -> list[str]:
    """The pending index, once the sweep had a few ticks to repair leftovers."""
    left: list[str] = []
    for _ in range(int(4 * SWEEP_S / 0.5)):
        left = watch.pending()
        if not left:
            break
        time.sleep(0.5)
    return left


def _zombie_noticed(log_dir: Path, chaos: Chaos, wait_s: float = 10.0) -> set[str]:
    """Jobs the zombie, once woken, logged as lost (it stopped without committing)."""
    owners = {owner for owner, _ in chaos.zombie_jobs.values()}
    deadline = time.monotonic() + wait_s
    while True:
        lost = set()
        for line in (
            (log_dir / f"claim-{chaos.zombie}.log").read_text(errors="replace").splitlines()
        ):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("owner") in owners and "lost" in str(entry.get("message")):
                lost.add(str(entry.get("job_id")))
        if lost == set(chaos.zombie_jobs) or time.monotonic() > deadline:
            return lost
        time.sleep(0.5)


def _platform_summary(cloud: LocalCloud) -> str:
    """What the local Cloud Run did for claim, and how often claim refused a push itself."""
    s = cloud.service("claim").stats()
    in_app = sum(
        log.read_text(errors="replace").count("no free slot")
        for log in cloud.config.log_dir.glob("claim-*.log")
    )
    return (
        f"claim platform: peak {s['instances']['peak']} instances, {s['cold_starts']} cold "
        f"starts, {s['scale_ins']} scale-ins, reclaims {s['reclaims']}, shutdowns "
        f"{s['shutdowns']}, requests {s['requests']}, peak per instance "
        f"{s['peak_in_flight_per_instance']}, {s['billing']['instance_seconds']} "
        f"instance-seconds; claim's own 429s: {in_app}"
    )


# ----------------------------------------------------------------- the test


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("RECLAIM_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    print(f"chaos seed: {value} (replay with RECLAIM_CHAOS_SEED={value})")
    return value


@pytest.fixture
def storm_cloud(seed: int) -> Iterator[tuple[LocalCloud, FaultProxy]]:
    gcs_port = free_port()
    proxy = FaultProxy(
        f"http://127.0.0.1:{gcs_port}", fault_fraction=0.05, lost_answer_fraction=0.02, seed=seed
    )
    cloud = LocalCloud.for_tests(
        max_instances=INSTANCES,
        concurrency=MAX_CONCURRENT,
        idle_timeout_seconds=IDLE_S,
        stale_seconds=STALE_S,
        sweep_interval_seconds=SWEEP_S,
        duplicate_fraction=0.2,
        drop_publish_fraction=0.1,
        seed=seed,
        gcs_port=gcs_port,
        functions_storage_host=proxy.url,
        function_env={
            "RECLAIM_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "RECLAIM_BACKOFF_BASE_SECONDS": "0.5",
            "RECLAIM_BACKOFF_MAX_SECONDS": "2",
        },
    )
    with proxy, cloud:
        yield cloud, proxy


def test_every_job_survives_the_storm(
    storm_cloud: tuple[LocalCloud, FaultProxy], seed: int
) -> None:
    cloud, proxy = storm_cloud
    rng = random.Random(seed)
    chaos = Chaos(seed, plan=rng.sample(RECLAIMS, len(RECLAIMS)))
    jobs = _jobs(rng)
    ids: list[str] = []
    for start in range(0, N_JOBS, BATCH):
        ids += _submit(cloud.endpoints["jobs"], jobs[start : start + BATCH], chaos)
    assert ids == [j["id"] for j in jobs]
    ep = cloud.endpoints
    watch = Watch(cloud)
    records = _storm(cloud, watch, jobs, ids, rng, chaos)
    counts = counts_by_status(records)
    print(chaos.say(f"final counts {dict(counts)}; proxy faults {proxy.faults()}"))
    print(chaos.say(_platform_summary(cloud)))

    handbacks = sum(int(r.get("handbacks") or 0) for r in records.values())
    victims = sum(handed_back_at(records[j], a) is not None for j, (_o, a) in chaos.handed.items())
    print(
        chaos.say(
            f"reclaims {chaos.kills}; {handbacks} hand-backs, {victims} of the "
            f"{len(chaos.handed)} jobs running on the gracefully reclaimed instances"
        )
    )

    # the storm really happened
    assert len(chaos.kills) == len(RECLAIMS), chaos.say("no storm")
    assert chaos.resumed_at is not None, chaos.say("the zombie never woke")
    assert chaos.rollout.done, chaos.say(f"the rollout stopped at {chaos.rollout.state!r}")
    assert sum(proxy.faults().values()) > 0, chaos.say("the proxy injected no fault")
    stats = emulator_stats(ep["emulator_admin"])
    assert stats["totals"]["duplicated"] > 0, chaos.say("no duplicate delivery")
    assert topic_count(stats, ep["jobs_topic"], "dropped") > 0, chaos.say("no dropped ring")

    # the invariants
    assert all_terminal(records), chaos.say(f"not every job is terminal: {dict(counts)}")
    for job, job_id in zip(jobs, ids, strict=True):
        if job.get("depends_on"):
            _check_child(job, records, chaos)
        if _cancelled_by_parent(job, records):
            continue
        _check_record(job_id, records[job_id], watch, chaos)
        _expected_outcome(job, records[job_id], chaos)
    callbacks = _callbacks(watch, chaos)
    fired = {b: len(callbacks.get(b, [])) for b in chaos.batches}
    assert set(fired.values()) == {1}, chaos.say(f"callbacks per batch {fired}")
    assert all(c[0]["status"] == "done" for c in callbacks.values()), chaos.say(str(callbacks))
    cb_ids = {str(c[0]["id"]) for c in callbacks.values()}
    stored = watch.stored_ids()
    extra = stored - set(ids) - cb_ids - set(chaos.rollout.fresh_ids)
    assert not extra, chaos.say(f"records beyond the jobs and callbacks: {extra}")
    rolled = check_rollout(records, chaos.rollout)
    assert rolled == [], chaos.say(f"the rollout broke: {rolled}")
    stale = _never_left_to_staleness(records, chaos)
    assert stale == [], chaos.say(f"gracefully reclaimed, yet rescued once stale: {stale}")
    assert _pending_drained(watch) == [], chaos.say("pending markers left over")

    # the zombie woke up, learnt it had lost, and committed nothing
    finished_by_zombie = {
        j
        for j, (owner, _a) in chaos.zombie_jobs.items()
        if records[j].get("status") == "done" and records[j].get("owner") == owner
    }
    assert not finished_by_zombie, chaos.say(f"the zombie committed {finished_by_zombie}")
    noticed = _zombie_noticed(cloud.config.log_dir, chaos)
    assert noticed == set(chaos.zombie_jobs), chaos.say(
        f"the zombie noticed the loss of {sorted(noticed)} of {sorted(chaos.zombie_jobs)}"
    )
