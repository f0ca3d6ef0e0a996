"""Per-key limits under kills (issue 46): the scenario, the checks and the orderings, shared
by the chaos test (tests/chaos/test_flow_kills.py: two rounds) and `make soak`
(`python -m tests.chaos.flow_kills`: rounds until every ordering was seen, or a cap).

Jobs of one key with max_running 1 (the demo pipeline: two 0.6 s stages that call
ctx.check()) run on the local cloud: claim on the local Cloud Run (scaled from zero, at most
3 instances), the drain and the sweep on, a stale time of 3 s. Each round waits for states,
never for a time:
1. the instance running the attempt the key's place names is SIGKILLed (a host failure);
2. once another attempt holds the place and runs (every other round: the second one after
   the kill, so the first ends by itself), its instance is reclaimed gracefully (SIGTERM,
   Cloud Run's grace, SIGKILL: a rollout);
3. once a third holds it, its instance is SIGSTOPped (alive and silent: a zombie) until
   its place was taken over or its attempt ended, then SIGCONTed;
the round ends once those three attempts ended. Meanwhile a thread reads the place object
as often as it can.

What is checked, from outside only (the records' histories, the place object, the functions'
log lines), all on the one clock of this machine:
- attempts: an attempt of the key runs from its `claimed` entry to the entry that ends it
  (its `stopped_by` when it has one, else its time): done, failed, requeued, handed back by
  its owner; rescued, failed over a silent owner (`last_seen`), or a claim over it; an
  attempt this test killed or stopped ends at the SIGKILL or the SIGSTOP; no two overlap;
- stages: a stage runs from its owner's "stage started" line to the owner's next line that
  ends it (or the kill, or the SIGSTOP); no two attempts' stage runs overlap, and none runs
  past the end the history gives its attempt;
- the place: every read of the place made while an attempt ran names that attempt;
- the zombie: once resumed, no write of its lands and no new stage starts (zombies());
- the history's word: no rescue says an attempt stopped before it was killed or stopped.

Orderings: in each round, the first time after the hard kill of each of four moves: the
killed attempt's rescue, a take-over (a gate taking a place whose holder no longer holds
it), the hand-back's release of the reclaimed attempt, and the drain's re-claim (a claim of
a job of the key by a drain); the order of the four is the round's ordering.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reclaim.local.cloud import LocalCloud
from reclaim.local.observe import Watch, instance_pids, owner_pid, parse_at, submit_batch
from shared.features import flow_policy as fp
from shared.job_queue import TERMINAL_STATUSES

STALE_S = 3.0
SWEEP_S = 1.0
GRACE_S = 10.0  # Cloud Run's SIGTERM to SIGKILL
INSTANCES = 3
CONCURRENCY = 2
STAGE_S = 0.6
BATCH = 4
LOW = 3
"""More jobs are submitted once fewer than this are unfinished and rounds are still due."""
MOVES = ("rescue", "take-over", "release", "re-claim")
ALL_ORDERINGS = tuple(itertools.permutations(MOVES))
ENDS_BY_OWNER = ("done", "failed", "requeued", "handed back")
HANDED_BACK = "handed back: the instance is shutting down"
FORCED = "the stage did not stop in time"
"""The `why` of a hand-back written from outside while the stage still ran."""
STAGE_ENDS = (
    "stage finished",
    HANDED_BACK,
    "stopped: this owner lost the job",
    "requeued after a stage error",
    "failed",
    "done",
)
FAR = datetime.max.replace(tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)


# ----------------------------------------------------------------- the cloud and the work


def flow_cloud(**more: Any) -> LocalCloud:
    """The local cloud of the scenario: seconds-scale staleness and sweep, Cloud Run's grace."""
    return LocalCloud.for_tests(
        max_instances=INSTANCES,
        concurrency=CONCURRENCY,
        stale_seconds=STALE_S,
        sweep_interval_seconds=SWEEP_S,
        shutdown_grace_seconds=GRACE_S,
        idle_timeout_seconds=60.0,
        function_env={
            "RECLAIM_MIN_WRITE_INTERVAL_SECONDS": "0.2",
            "RECLAIM_BACKOFF_BASE_SECONDS": "0",
            "RECLAIM_BACKOFF_MAX_SECONDS": "0",
        },
        **more,
    )


def submit(cloud: LocalCloud, key: str, count: int) -> list[str]:
    jobs = [
        {
            "id": f"{key}-{uuid.uuid4().hex[:10]}",
            "pipeline": "demo",
            "payload": {"stages": 2, "sleep_s": STAGE_S},
            "concurrency_key": key,
            "max_running": 1,
        }
        for _ in range(count)
    ]
    return submit_batch(cloud.endpoints["jobs"], jobs)[1]


class PlaceWatch:
    """A thread that reads the key's one place, straight from fake-gcs-server, as often as
    it can: (read started, answered, holder or None for an empty place)."""

    def __init__(self, cloud: LocalCloud, key: str) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(
            project=cloud.endpoints["project"],
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": cloud.gcs_url},
        )
        self._bucket = client.bucket(cloud.endpoints["records_bucket"])
        self._name = fp.place_name(key, 0)
        self.samples: list[tuple[datetime, datetime, fp.Holder | None]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="place-watch", daemon=True)

    def holder(self) -> fp.Holder | None:
        return self.samples[-1][2] if self.samples else None

    def _run(self) -> None:
        while not self._stop.is_set():
            began = now()
            try:
                # a fresh handle each time: a Blob remembers the generation it read last
                data = self._bucket.blob(self._name).download_as_bytes(timeout=5, retry=None)
            except Exception as exc:  # not created yet (NotFound), or a hiccup: no sample
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                time.sleep(0.05)
                continue
            self.samples.append((began, now(), fp.parse_holder(data)))

    def __enter__(self) -> PlaceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


# ----------------------------------------------------------------- the rounds


@dataclass
class Round:
    """One round: the attempt killed hard, the one reclaimed gracefully, and when."""

    killed: tuple[str, int, str]  # job, attempt, owner
    kill_sent: datetime
    kill_done: datetime
    reclaimed: tuple[str, int, str] | None = None
    term_sent: datetime | None = None
    paused: tuple[str, int, str] | None = None
    """The next holder after the reclaim, SIGSTOPped past the stale time (alive, silent)."""
    paused_instance: int | None = None
    stop_sent: datetime | None = None
    stop_done: datetime | None = None
    cont_sent: datetime | None = None
    pause: bool = True
    skip: int = 0
    """Holders after the kill let run before the graceful reclaim (0: the first is reclaimed;
    1: the second, so that the first ends by itself and the drain may claim the next)."""
    passed: list[tuple[str, int]] = field(default_factory=list)
    moves: dict[str, datetime] = field(default_factory=dict)
    reclaim_path: str = ""

    def attempts(self) -> list[tuple[str, int, str]]:
        return [a for a in (self.killed, self.reclaimed, self.paused) if a is not None]

    def ordering(self) -> tuple[str, ...]:
        return tuple(sorted(self.moves, key=lambda m: self.moves[m]))


@dataclass
class Run:
    key: str
    ids: list[str] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: list[dict[str, Any]] = field(default_factory=list)
    samples: list[tuple[datetime, datetime, fp.Holder | None]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        line = f"t={time.monotonic() - self.began:.1f}s {text}"
        self.log.append(line)
        print(f"[flow-kills {self.key}] {line}", flush=True)


def _owned(
    records: dict[str, dict[str, Any]], holder: fp.Holder | None
) -> tuple[str, int, str] | None:
    """(job, attempt, owner) when the place's holder is running that attempt."""
    if holder is None:
        return None
    rec = records.get(holder.job_id) or {}
    if rec.get("status") != "running" or rec.get("attempts") != holder.attempt:
        return None
    return holder.job_id, holder.attempt, str(rec.get("owner"))


def _instance_of(cloud: LocalCloud, owner: str, avoid: set[int]) -> int | None:
    """The serving claim instance whose process runs `owner`'s attempt."""
    pid = owner_pid(owner)
    serving = {
        v["id"]
        for v in cloud.service("claim").instances()
        if v["state"] == "serving" and not v["paused"]
    }
    for index, pids in instance_pids(cloud).items():
        if index in serving and index not in avoid and pid in pids:
            return index
    return None


def _ended(record: dict[str, Any], attempt: int, owner: str) -> bool:
    """The history says how this attempt ended."""
    return _end_entry(record, attempt, owner) is not None


def _end_entry(record: dict[str, Any], attempt: int, owner: str) -> dict[str, Any] | None:
    """The history entry that ended this attempt: its owner's, a rescue's (or the watchdog's
    failure of a silent owner on its last attempt), or a claim over it."""
    for entry in record.get("history") or []:
        if not isinstance(entry, dict):
            continue
        if entry.get("event") in (*ENDS_BY_OWNER, "rescued") and entry.get("attempt") == attempt:
            return entry
        if entry.get("event") == "claimed" and entry.get("took_over_from") == owner:
            return entry
    return None


def play(
    cloud: LocalCloud,
    rounds: int,
    *,
    deadline_s: float,
    pause: bool = True,
    key: str | None = None,
) -> Run:
    """Play `rounds` rounds by state (see the module doc), then let every job end;
    `pause`: each round ends with a zombie (the next holder paused past the stale time)."""
    run = Run(key or f"seat-{uuid.uuid4().hex[:6]}")
    watch = Watch(cloud)
    run.ids += submit(cloud, run.key, BATCH + 1)
    killed_instances: set[int] = set()
    started = time.monotonic()
    with PlaceWatch(cloud, run.key) as places:
        current: Round | None = None
        while time.monotonic() - started < deadline_s:
            records = watch.snapshot(run.ids)
            unfinished = sum(r.get("status") not in TERMINAL_STATUSES for r in records.values())
            if len(run.rounds) < rounds and unfinished < LOW:
                run.ids += submit(cloud, run.key, BATCH)
                continue
            holding = _owned(records, places.holder())
            more = len(run.rounds) < rounds
            current = _step(cloud, run, records, holding, current, killed_instances, more, pause)
            if len(run.rounds) >= rounds and current is None and unfinished == 0:
                break
            time.sleep(0.05)
        run.samples = list(places.samples)
    run.say(f"every job ended: {len(run.ids)} jobs")
    run.records = watch.snapshot(run.ids)
    run.lines = claim_lines(cloud.config.log_dir)
    for r in run.rounds:
        _moves(run, r)
    return run


def _step(
    cloud: LocalCloud,
    run: Run,
    records: dict[str, dict[str, Any]],
    holding: tuple[str, int, str] | None,
    current: Round | None,
    killed_instances: set[int],
    more: bool,
    pause: bool,
) -> Round | None:
    """The round's next step, if its state has come: kill, reclaim, pause, resume, or
    close it (`more`: another round may start; `pause`: it has a zombie)."""
    claim = cloud.service("claim")
    if current is None:
        if not more or holding is None:
            return None
        index = _instance_of(cloud, holding[2], killed_instances)
        if index is None:
            return None
        sent = now()
        claim.reclaim(index, graceful=False, wait=True)
        killed_instances.add(index)
        r = Round(holding, sent, now(), pause=pause, skip=len(run.rounds) % 2)
        run.rounds.append(r)
        run.say(f"round {len(run.rounds)}: SIGKILL claim-{index} running {holding[:2]}")
        return r
    if current.reclaimed is None:
        if holding is None or holding[:2] == current.killed[:2] or holding[:2] in current.passed:
            return current
        if len(current.passed) < current.skip:
            current.passed.append(holding[:2])
            return current
        index = _instance_of(cloud, holding[2], killed_instances)
        if index is None:
            return current
        current.term_sent = now()
        claim.reclaim(index, graceful=True)
        killed_instances.add(index)
        current.reclaimed = holding
        run.say(f"round {len(run.rounds)}: SIGTERM claim-{index} running {holding[:2]}")
        return current
    if current.pause and current.cont_sent is None:
        return _zombie(cloud, run, records, holding, current, killed_instances)
    if all(_ended(records[j], a, o) for j, a, o in current.attempts()):
        return None
    return current


def _zombie(
    cloud: LocalCloud,
    run: Run,
    records: dict[str, dict[str, Any]],
    holding: tuple[str, int, str] | None,
    current: Round,
    killed_instances: set[int],
) -> Round:
    """The round's zombie: SIGSTOP the instance of the next holder (alive, silent past the
    stale time); SIGCONT it once its place was taken over or its attempt ended."""
    claim = cloud.service("claim")
    if current.paused is None:
        if holding is None or holding in current.attempts():
            return current
        index = _instance_of(cloud, holding[2], killed_instances)
        if index is None:
            return current
        current.stop_sent = now()
        claim.pause(index, unroute=True)  # returns once its processes are stopped
        current.stop_done = now()
        current.paused, current.paused_instance = holding, index
        took = (current.stop_done - current.stop_sent).total_seconds()
        run.say(
            f"round {len(run.rounds)}: SIGSTOP claim-{index} running {holding[:2]} ({took:.2f} s)"
        )
        return current
    job, attempt, owner = current.paused
    if holding is not None and holding[:2] == (job, attempt):
        return current  # still its place, and it looks alive to whoever reads
    taken = holding is not None or _ended(records[job], attempt, owner)
    if taken and current.paused_instance is not None:
        current.cont_sent = now()  # before: it may log as soon as it runs again
        claim.resume(current.paused_instance)
        run.say(f"round {len(run.rounds)}: SIGCONT claim-{current.paused_instance}")
    return current


# ----------------------------------------------------------------- the evidence


def claim_lines(log_dir: Path) -> list[dict[str, Any]]:
    """Every JSON line of every claim instance's log, with the instance's file name."""
    out: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("claim-*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and parse_at(entry.get("time")) is not None:
                entry["_file"] = path.name
                out.append(entry)
    return out


def _t(value: object) -> datetime:
    at = parse_at(value)
    assert at is not None, value
    return at


def _moves(run: Run, r: Round) -> None:
    """The round's four moves, each the first after its hard kill (see the module doc)."""
    after = r.kill_sent
    job, attempt, owner = r.killed
    end = _end_entry(run.records.get(job, {}), attempt, owner)
    if end is not None:
        r.moves["rescue"] = _t(end["at"])
    jobs = set(run.ids)
    for line in sorted(run.lines, key=lambda e: _t(e["time"])):
        at = _t(line["time"])
        if at < after or line.get("job_id") not in jobs:
            continue
        message = line.get("message")
        if message == "took over a place its holder no longer holds":
            r.moves.setdefault("take-over", at)
        if (
            message == "gave back a place"
            and r.reclaimed is not None
            and (line.get("job_id"), line.get("attempt")) == r.reclaimed[:2]
        ):
            r.moves.setdefault("release", at)
        if message == "draining a due job" and "re-claim" not in r.moves:
            claimed = _claimed_after(run.lines, line)
            if claimed is not None:
                r.moves["re-claim"] = claimed
                r.reclaim_path = f"drain in {line['_file']} took {line['job_id']}"


def _claimed_after(lines: list[dict[str, Any]], drained: dict[str, Any]) -> datetime | None:
    """When the drain that logged `drained` claimed its job (the same instance's next
    "claimed" line for it, before any other drain line there), or None."""
    at = _t(drained["time"])
    later = sorted(
        (e for e in lines if e["_file"] == drained["_file"] and _t(e["time"]) >= at),
        key=lambda e: _t(e["time"]),
    )
    for entry in later:
        if entry is drained:
            continue
        if entry.get("message") == "draining a due job":
            return None
        if entry.get("message") == "claimed" and entry.get("job_id") == drained["job_id"]:
            return _t(entry["time"])
    return None


@dataclass(frozen=True)
class Span:
    job: str
    attempt: int
    start: datetime
    end: datetime
    how: str

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


def attempts(run: Run) -> list[Span]:
    """Each attempt of the key, claimed to ended, from the histories (module doc)."""
    killed = {(r.killed[0], r.killed[1]): r.kill_done for r in run.rounds}
    for r in run.rounds:  # a zombie executed nothing while stopped (after it: zombies())
        if r.paused is not None and r.stop_done is not None:
            killed[(r.paused[0], r.paused[1])] = r.stop_done
    out = []
    for job_id, rec in run.records.items():
        history = [e for e in rec.get("history") or [] if isinstance(e, dict)]
        for i, entry in enumerate(history):
            if entry.get("event") != "claimed":
                continue
            attempt, owner = int(entry["attempt"]), str(entry.get("owner"))
            end, how = FAR, "never ended"
            for later in history[i + 1 :]:
                event = later.get("event")
                mine = later.get("attempt") == attempt
                silent = "last_seen" in later  # written over a silent owner (the watchdog's)
                if mine and event in ENDS_BY_OWNER and not silent:
                    end, how = _t(later.get("stopped_by") or later["at"]), str(event)
                    break
                rescued = mine and (event == "rescued" or silent)
                if rescued or (event == "claimed" and later.get("took_over_from") == owner):
                    how = f"{event} over its silent owner" if rescued else "taken over"
                    end = _t(later.get("stopped_by") or later["at"])
                    if (job_id, attempt) in killed:
                        end, how = killed[(job_id, attempt)], how + " (killed or stopped)"
                    break
            out.append(Span(job_id, attempt, _t(entry["at"]), end, how))
    return out


def stage_runs(run: Run) -> list[Span]:
    """Each stage run of the key's jobs from the claim logs (module doc); a run the owner
    never ended ends at its kill, or at the end of the attempt it belongs to."""
    killed = {r.killed[2]: r.kill_done for r in run.rounds}
    stopped = {r.paused[2]: r.stop_done for r in run.rounds if r.paused and r.stop_done}
    killed.update(stopped)  # what a zombie did once resumed is zombies()' to judge
    jobs = set(run.ids)
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for line in run.lines:
        owner = line.get("owner")
        if line.get("job_id") not in jobs or not isinstance(owner, str):
            continue
        if owner in stopped and _t(line["time"]) > stopped[owner]:
            continue
        by_owner.setdefault(owner, []).append(line)
    ends = {(s.job, s.attempt): s.end for s in attempts(run)}
    out = []
    for owner, lines in by_owner.items():
        lines.sort(key=lambda e: _t(e["time"]))
        opened: dict[str, Any] | None = None
        for line in lines:
            message = line.get("message")
            if message == "stage started":
                opened = line
            elif opened is None or message not in STAGE_ENDS or line.get("why") == FORCED:
                continue  # a hand-back from outside: its stage runs on
            elif message == HANDED_BACK:  # logged after the write and the ring; the
                # stage had stopped when the write was stamped (the history's end)
                key = (str(opened["job_id"]), int(opened["attempt"]))
                end = min(_t(line["time"]), ends.get(key, FAR))
                out.append(_span(opened, end, str(message)))
                opened = None
            else:
                out.append(_span(opened, _t(line["time"]), str(message)))
                opened = None
        if opened is not None:
            key = (str(opened["job_id"]), int(opened["attempt"]))
            end = killed.get(owner) or ends.get(key, FAR)
            out.append(_span(opened, end, "killed or stopped" if owner in killed else "no end"))
    return out


def _span(line: dict[str, Any], end: datetime, how: str) -> Span:
    return Span(str(line["job_id"]), int(line["attempt"]), _t(line["time"]), end, how)


def overlaps(spans: Iterable[Span]) -> list[tuple[Span, Span]]:
    """Pairs of spans of different attempts that share a moment."""
    ordered = sorted(spans, key=lambda s: s.start)
    found = []
    for a, b in itertools.combinations(ordered, 2):
        if (a.job, a.attempt) != (b.job, b.attempt) and a.overlaps(b):
            found.append((a, b))
    return found


def place_misreads(run: Run, spans: list[Span]) -> list[str]:
    """Reads of the place, made wholly while an attempt ran, that name another holder."""
    out = []
    for began, answered, holder in run.samples:
        for s in spans:
            if s.start <= began and answered <= s.end:
                named = None if holder is None else (holder.job_id, holder.attempt)
                if named != (s.job, s.attempt):
                    out.append(
                        f"read at {began.isoformat()} named {named} while {s.job}/{s.attempt} ran"
                    )
    return out


def outlived(stages: list[Span], spans: list[Span]) -> list[str]:
    """Stage runs that went on past the end the history gives their attempt."""
    ends = {(s.job, s.attempt): s for s in spans}
    out = []
    for st in stages:
        span = ends.get((st.job, st.attempt))
        if span is None or st.end > span.end:
            out.append(f"stage of {st.job}/{st.attempt} ran to {st.end}, its attempt: {span}")
    return out


OWNER_WRITES = ("checkpoint", *ENDS_BY_OWNER)
"""History entries an owner's own writes add (a heartbeat adds none)."""


def zombies(run: Run) -> list[str]:
    """Zombies that went on with their job once resumed: a write of theirs built after the
    SIGCONT landed (its history entry is stamped after it), or a new stage started. A write
    on the wire when the SIGSTOP came may land before the take-over's fence (its answer, and
    its log line, come after the SIGCONT): stamped before, it is no commit after resuming."""
    out = []
    for r in run.rounds:
        if r.paused is None or r.cont_sent is None:
            continue
        job, attempt, owner = r.paused
        for entry in run.records.get(job, {}).get("history") or []:
            event = entry.get("event")
            by_it = event == "checkpoint" or entry.get("owner") == owner  # not a re-ring's
            mine = entry.get("attempt") == attempt and by_it and "last_seen" not in entry
            if mine and event in OWNER_WRITES and _t(entry["at"]) > r.cont_sent:
                out.append(f"zombie {r.paused[:2]} resumed and its {event} landed")
        for line in run.lines:
            late = line.get("owner") == owner and _t(line["time"]) > r.cont_sent
            if late and line.get("message") == "stage started":
                out.append(f"zombie {r.paused[:2]} resumed and started a stage")
    return out


def understated(run: Run) -> list[str]:
    """Rescues of killed attempts whose `stopped_by` lies before the SIGKILL was sent."""
    out = []
    for r in run.rounds:
        ran = [(r.killed, r.kill_sent)]
        if r.paused is not None and r.stop_done is not None:
            ran.append((r.paused, r.stop_done))
        for (job, attempt, owner), until in ran:
            entry = _end_entry(run.records.get(job, {}), attempt, owner) or {}
            said = parse_at(entry.get("stopped_by"))
            if said is not None and said < until:
                out.append(f"{job}/{attempt}: stopped_by {said}, yet it ran until {until}")
    return out


@dataclass
class Verdict:
    overlapping_attempts: list[tuple[Span, Span]]
    overlapping_stages: list[tuple[Span, Span]]
    misreads: list[str]
    outlived: list[str]
    zombies: list[str]
    understated: list[str]
    unfinished: list[str]

    @property
    def overlaps(self) -> int:
        """Moments two attempts held the place or ran (a resumed zombie that went on)."""
        return (
            len(self.overlapping_attempts)
            + len(self.overlapping_stages)
            + len(self.misreads)
            + len(self.zombies)
        )

    def problems(self) -> list[str]:
        return [
            *(f"attempts overlap: {a} / {b}" for a, b in self.overlapping_attempts),
            *(f"stage runs overlap: {a} / {b}" for a, b in self.overlapping_stages),
            *self.misreads,
            *self.outlived,
            *self.zombies,
            *self.understated,
            *(f"not terminal: {j}" for j in self.unfinished),
        ]


def judge(run: Run) -> Verdict:
    spans = attempts(run)
    stages = stage_runs(run)
    return Verdict(
        overlaps(spans),
        overlaps(stages),
        place_misreads(run, spans),
        outlived(stages, spans),
        zombies(run),
        understated(run),
        [j for j, r in run.records.items() if r.get("status") not in TERMINAL_STATUSES],
    )


# ----------------------------------------------------------------- the soak


def load_run(path: Path) -> Run:
    """A run the soak kept (run.pickle beside its logs), for a post-mortem: judge(it)."""

    class _Here(pickle.Unpickler):  # pickled by `python -m`: its classes are __main__'s
        def find_class(self, module: str, name: str) -> Any:
            return super().find_class(__name__ if module == "__main__" else module, name)

    with path.open("rb") as f:
        run: Run = _Here(f).load()
    return run


def possible(order: tuple[str, ...]) -> bool:
    """Can this ordering happen at all? Only if it begins with the rescue or a take-over:
    the killed holder's place passes to another attempt only through a take-over (a gate
    taking it over, fencing the holder) or the release that follows its rescue, and both
    the reclaimed holder's release and any re-claim come after its place passed on."""
    return order[0] in ("rescue", "take-over")


POSSIBLE = tuple(o for o in ALL_ORDERINGS if possible(o))


@dataclass
class Soak:
    """What `make soak` saw over its runs."""

    runs: int = 0
    rounds: int = 0
    seen: dict[tuple[str, ...], int] = field(default_factory=dict)
    partial: dict[tuple[str, ...], int] = field(default_factory=dict)
    overlaps: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, run: Run) -> None:
        verdict = judge(run)
        self.runs += 1
        self.overlaps += verdict.overlaps
        self.problems += verdict.problems()
        for problem in verdict.problems():
            print(f"[flow-kills {run.key}] PROBLEM {problem}", flush=True)
        for r in run.rounds:
            self.rounds += 1
            order = r.ordering()
            into = self.seen if len(order) == len(MOVES) else self.partial
            into[order] = into.get(order, 0) + 1

    def report(self) -> list[str]:
        lines = [
            f"{self.runs} runs, {self.rounds} rounds",
            f"orderings covered: {len(set(self.seen) & set(POSSIBLE))} of the "
            f"{len(POSSIBLE)} that can happen ({len(ALL_ORDERINGS)} in all; those that begin "
            "with the release or the re-claim cannot: the killed holder's place passes on "
            "only through its rescue or a take-over)",
        ]
        lines += [f"  {n:4d}  {' < '.join(o)}" for o, n in sorted(self.seen.items(), key=_most)]
        lines += [f"  never seen: {' < '.join(o)}" for o in POSSIBLE if o not in self.seen]
        impossible = [o for o in self.seen if not possible(o)]
        lines += [f"  SEEN, THOUGHT IMPOSSIBLE: {' < '.join(o)}" for o in impossible]
        if self.partial:
            lines.append("rounds in which a move did not happen:")
            lines += [
                f"  {n:4d}  {' < '.join(o)}" for o, n in sorted(self.partial.items(), key=_most)
            ]
        lines.append(f"overlaps found: {self.overlaps}")
        lines += [f"  {p}" for p in self.problems]
        return lines


def _most(item: tuple[tuple[str, ...], int]) -> tuple[int, tuple[str, ...]]:
    return -item[1], item[0]


def main(argv: list[str] | None = None) -> int:
    """make soak: runs of rounds on fresh local clouds until every ordering of the four
    moves that can happen was seen (or the time is up); then the orderings covered and the
    overlaps found. Exit 1 on any problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (one local cloud)")
    parser.add_argument("--minutes", type=float, default=30.0, help="stop after this long")
    args = parser.parse_args(argv)
    lane = os.environ.get("RECLAIM_PORT_LANE", "")
    if lane and not os.environ.get("RECLAIM_PORT_BLOCK"):  # as tests/conftest.py does
        os.environ["RECLAIM_PORT_BLOCK"] = lane
    soak = Soak()
    stop_at = time.monotonic() + args.minutes * 60
    while time.monotonic() < stop_at and not set(POSSIBLE) <= set(soak.seen):
        with flow_cloud() as cloud:
            run = play(cloud, args.rounds, deadline_s=60 + 30 * args.rounds)
            kept = cloud.config.log_dir / "run.pickle"  # beside the logs, for a post-mortem
            kept.write_bytes(pickle.dumps(run))
            print(f"[flow-kills {run.key}] logs and the run: {cloud.config.log_dir}", flush=True)
            soak.add(run)
        covered = len(set(soak.seen) & set(POSSIBLE))
        print(
            f"soak: run {soak.runs}, {soak.rounds} rounds: orderings {covered} of "
            f"{len(POSSIBLE)}, overlaps {soak.overlaps}",
            flush=True,
        )
    print("\n".join(["", *soak.report()]))
    return 1 if soak.problems else 0


if __name__ == "__main__":
    sys.exit(main())
