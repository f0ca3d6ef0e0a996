"""One Cloud Run service: its instances, their slots, the pending queue and the autoscaler.

The front asks for a slot (acquire), forwards the request to the slot's instance,
and gives the slot back when the instance has answered (release). Everything
Cloud Run decides happens here, under one lock:

- an instance never holds more leases than its concurrency
  (https://cloud.google.com/run/docs/about-concurrency); gunicorn runs exactly
  that many threads, so no request ever queues inside an instance;
- a request that finds no free slot joins the pending queue (pending.py) and is
  refused with 429 after the documented time;
- instances start on demand, from zero, by the rule in autoscaler.py, and stop
  after idle_timeout_s without a request (SIGTERM, grace, SIGKILL);
- the platform can reclaim any instance, busy or not, gracefully (as host
  maintenance does: unroute, SIGTERM, grace, SIGKILL) or hard (SIGKILL, a host
  failure), pause one (SIGSTOP: a hung instance) and resume it;
- a deploy creates a new revision (revision.py): its first instance starts at
  once, traffic moves to it when that instance listens, and the previous
  revision's instances finish what they have in flight, then get SIGTERM, the
  grace, SIGKILL. Only the serving revision's instances get requests, count
  toward max_instances and make the demand the autoscaler follows.

Instances being shut down, or paused and unrouted, no longer count toward
max_instances, so their replacement can start at once: Cloud Run documents that
it may exceed max instances for a while to replace instances during system
maintenance (https://cloud.google.com/run/docs/about-instance-autoscaling).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from reclaim.local.cloudrun import autoscaler
from reclaim.local.cloudrun.config import ConfigError, ServiceConfig
from reclaim.local.cloudrun.instance import (
    Instance,
    Outcome,
    Shutdown,
    Spawner,
    State,
    kill,
    pause,
    resume,
    terminate,
)
from reclaim.local.cloudrun.pending import PendingQueue
from reclaim.local.cloudrun.revision import Launcher, Revision, RevisionState, merged_env
from reclaim.local.procs import free_port, wait_for_port

Log = Callable[[str], None]
START_RETRY_S = 1.0
"""After a failed start, wait this long before starting another (no crash loop)."""
STOP_GRACE_S = 5.0
"""Grace given to every instance when the whole platform stops."""
HISTORY = 200
"""Instances kept in /stats after they are gone."""


class Lease:
    """One slot of one instance, held from routing until the instance answered."""

    __slots__ = ("instance", "released", "waited_s")

    def __init__(self, instance: Instance, waited_s: float) -> None:
        self.instance = instance
        self.waited_s = waited_s
        self.released = False


class UnknownInstance(KeyError):
    """No live instance of that id."""


class Service:
    """The instances of one service behind its front (see the module doc)."""

    def __init__(
        self,
        config: ServiceConfig,
        launcher: Launcher,
        spawner: Spawner,
        *,
        host: str = "127.0.0.1",
        log: Log | None = None,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = 0.1,
    ) -> None:
        config.validate()
        self.config = config
        self.name = config.name
        self._spawner = spawner
        self._host = host
        self._log = log or (lambda _line: None)
        self._clock = clock
        self._tick_s = tick_s
        self._lock = threading.RLock()
        self._instances: dict[int, Instance] = {}
        self._ids = itertools.count()
        self._pending: PendingQueue[Lease] = PendingQueue()
        self._stopping = False
        self._stop_tick = threading.Event()
        self._ticker: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._retry_at = 0.0
        self._startups: list[float] = []
        self._peak_instances = 0
        self._peak_in_flight = 0
        self._waits: list[float] = []
        self.counts: Counter[str] = Counter()
        """Events for /stats: answered, refused, timed_out, lost, pended, cold_starts, ..."""
        first = Revision(self.name, 1, {}, launcher, clock())
        first.state = RevisionState.SERVING  # a new service serves from zero, on demand
        self._revisions: list[Revision] = [first]
        self._serving = first

    # ------------------------------------------------------------------ lifecycle

    def start(self, wait: bool = True) -> None:
        """Start min_instances and the scale-in tick; wait until they serve if asked."""
        with self._lock:
            self._scale_out()
        self._ticker = threading.Thread(target=self._tick_loop, name=f"{self.name}-tick")
        self._ticker.daemon = True
        self._ticker.start()
        if wait:
            self.start_wait()

    def start_wait(self) -> None:
        """Block until min_instances serve; RuntimeError if they do not in start_timeout_s."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while self.serving_count() < self.config.min_instances:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name}: {self.config.min_instances} min instance(s) did not "
                    f"start within {self.config.start_timeout_s:g} s (see its logs)"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Refuse what pends, shut every instance down (SIGTERM, 5 s, SIGKILL), wait."""
        with self._lock:
            self._stopping = True
            self._pending.cancel_all()
            for inst in list(self._instances.values()):
                self._retire(inst, "platform stop", graceful=True, grace_s=STOP_GRACE_S)
            workers = list(self._workers)
        self._stop_tick.set()
        for worker in workers:
            worker.join(timeout=STOP_GRACE_S + 10)
        if self._ticker is not None:
            self._ticker.join(timeout=5)

    # ------------------------------------------------------------------ the front's side

    def pending_timeout(self) -> float:
        """How long a request may pend now (Cloud Run's rule, or the configured override)."""
        with self._lock:
            average = statistics.fmean(self._startups) if self._startups else None
        return self.config.pending_timeout(average)

    def acquire(self, max_wait_s: float) -> Lease | None:
        """A slot on a serving instance, waiting in the pending queue up to max_wait_s.

        None: nothing freed up in time (the front answers 429, or 504 past the deadline).
        """
        with self._lock:
            if self._stopping:
                return None
            self.counts["received"] += 1
            now = self._clock()
            inst = self._pick()
            if inst is not None:
                lease = self._grant(inst, 0.0)
                self._scale_out()
                return lease
            waiter = self._pending.join(now)
            self.counts["pended"] += 1
            self._scale_out()
        waiter.wait(max_wait_s)
        with self._lock:
            if waiter.granted is None:
                self._pending.leave(waiter)
            waited = self._clock() - waiter.since
            self._waits.append(waited)
            del self._waits[:-10_000]
            return waiter.granted

    def release(self, lease: Lease, *, unreachable: bool = False) -> None:
        """The instance answered (or failed): its slot is free for the next request.

        unreachable: nothing listened on the instance's port, so its server is gone
        (a crash the tick has not seen yet): it is unrouted and cleaned up.
        """
        with self._lock:
            if lease.released:
                return
            lease.released = True
            inst = lease.instance
            now = self._clock()
            inst.in_flight -= 1
            inst.meter.release(now)
            if inst.in_flight == 0:
                inst.idle_since = now
            if unreachable and inst.state in (State.SERVING, State.STARTING):
                self._log(f"{inst.label}: refused a connection; treated as crashed")
                self.counts["crashes"] += 1
                self._retire(inst, "crashed", graceful=False)
            if inst.draining():
                self._drain(inst, now)
            self._dispatch()
            self._scale_out()

    def note(self, what: str) -> None:
        """Count one request outcome seen by the front (answered, refused, timed_out, lost)."""
        with self._lock:
            self.counts[what] += 1

    # ------------------------------------------------------------------ platform operations

    def reclaim(self, instance_id: int, *, graceful: bool = True, wait: bool = False) -> None:
        """Take an instance away as a rollout or host event does, busy or not.

        graceful: unroute, SIGTERM, grace, SIGKILL; otherwise SIGKILL at once.
        wait: return only once its processes are gone.
        """
        with self._lock:
            inst = self._live(instance_id)
            self.counts["reclaims_graceful" if graceful else "reclaims_hard"] += 1
            worker = self._retire(inst, "reclaim", graceful=graceful)
        if wait and worker is not None:
            worker.join()

    def deploy(
        self,
        env: Mapping[str, str | None] | None = None,
        *,
        launcher: Launcher | None = None,
        drain_timeout_s: float | None = None,
        transition_s: float = 0.0,
    ) -> Revision:
        """Deploy a new revision and start its first instance; traffic moves to it
        once that instance listens (see revision.py). Returns at once.

        env: changes to the latest revision's environment (None removes a variable);
        launcher: new code (default: the latest revision's);
        drain_timeout_s: how long the replaced revision's busy instances may go on
        before their SIGTERM (default: the request timeout; 0: at once);
        transition_s: how long the replaced revision still takes new requests once the
        new one is ready (Cloud Run's transition period; default 0, a hard cut).
        ConfigError for a variable Cloud Run refuses; nothing is deployed then.
        """
        with self._lock:
            if self._stopping:
                raise ConfigError(f"{self.name} is stopping: nothing can be deployed")
            latest = self._revisions[-1]
            revision = Revision(
                self.name,
                latest.number + 1,
                merged_env(latest.env, env),
                launcher or latest.launcher,
                self._clock(),
                drain_timeout_s=drain_timeout_s,
                transition_s=transition_s,
            )
            self._revisions.append(revision)
            del self._revisions[:-HISTORY]
            self.counts["deploys"] += 1
            self._log(f"{revision.name}: deployed; starting its first instance")
            for _ in range(max(1, self.config.min_instances)):
                self._launch(revision)
            return revision

    def revisions(self) -> dict[str, Any]:
        """Every revision (oldest first), the one serving, and each one's instances."""
        with self._lock:
            return self._revisions_view(self._clock())

    def pause(self, instance_id: int, *, unroute: bool = False) -> None:
        """SIGSTOP an instance: a hung instance that keeps its requests (and its jobs).

        It stays routed unless unroute: a routed paused instance still gets requests
        while it has free slots, and they hang with it.
        """
        with self._lock:
            inst = self._live(instance_id)
            if inst.proc is None:
                raise UnknownInstance(f"{self.name} instance {instance_id} has not started")
            inst.paused = True
            if unroute:
                inst.routed = False
            proc = inst.proc
        pause(proc)
        with self._lock:
            self._scale_out()

    def resume(self, instance_id: int) -> None:
        """SIGCONT a paused instance and route to it again."""
        with self._lock:
            inst = self._live(instance_id)
            proc = inst.proc
        if proc is not None:
            resume(proc)
        with self._lock:
            inst.paused = False
            if inst.state is State.SERVING:
                inst.routed = True
                self._dispatch()

    def instances(self) -> list[dict[str, Any]]:
        """Views of every instance not yet gone."""
        with self._lock:
            now = self._clock()
            return [i.view(now) for i in self._instances.values() if i.state is not State.GONE]

    def pids(self) -> dict[int, int]:
        """id -> pid (= process group) of every instance whose process still runs."""
        with self._lock:
            return {
                i.id: i.proc.pid
                for i in self._instances.values()
                if i.proc is not None and i.proc.poll() is None
            }

    def all_pids(self) -> dict[str, int]:
        """label -> pid of every instance ever started (orphan checks)."""
        with self._lock:
            return {i.label: i.proc.pid for i in self._instances.values() if i.proc is not None}

    def url_of(self, instance_id: int) -> str:
        """The instance's own address (bypassing the front; for tests)."""
        with self._lock:
            return self._live(instance_id).url

    def serving_count(self) -> int:
        with self._lock:
            return sum(1 for i in self._instances.values() if i.state is State.SERVING)

    def crashed(self) -> dict[str, int | None]:
        """label -> exit code of instances that died without the platform asking."""
        with self._lock:
            return {
                i.label: (i.proc.returncode if i.proc is not None else None)
                for i in self._instances.values()
                if i.shutdown is not None and i.shutdown.reason in ("crashed", "start failed")
            }

    def stats(self) -> dict[str, Any]:
        """What /stats shows for this service (see docs/local-cloud.md)."""
        with self._lock:
            now = self._clock()
            insts = list(self._instances.values())
            states = Counter(str(i.state) for i in insts)
            shutdowns = Counter(
                str(i.shutdown.outcome)
                for i in insts
                if i.shutdown is not None and i.shutdown.outcome is not None
            )
            average = statistics.fmean(self._startups) if self._startups else None
            waits = list(self._waits)
            c = self.config
            return {
                "service": self.name,
                "config": {
                    "concurrency": c.concurrency,
                    "max_instances": c.max_instances,
                    "min_instances": c.min_instances,
                    "timeout_s": c.timeout_s,
                    "idle_timeout_s": c.idle_timeout_s,
                    "shutdown_grace_s": c.shutdown_grace_s,
                    "target_utilization": c.target_utilization,
                    "pending_timeout_s": c.pending_timeout(average),
                },
                "instances": {
                    "current": sum(1 for i in insts if i.state is not State.GONE),
                    "routed": sum(1 for i in insts if i.routed and i.state is not State.GONE),
                    "starting": states.get(State.STARTING, 0),
                    "serving": states.get(State.SERVING, 0),
                    "stopping": states.get(State.STOPPING, 0),
                    "paused": sum(1 for i in insts if i.paused and i.state is not State.GONE),
                    "peak": self._peak_instances,
                    "started": len(insts),
                },
                "in_flight": sum(i.in_flight for i in insts),
                "peak_in_flight": self._peak_in_flight,
                "peak_in_flight_per_instance": max((i.max_in_flight for i in insts), default=0),
                "pending": len(self._pending),
                "peak_pending": self._pending.peak,
                "requests": {
                    k: self.counts.get(k, 0)
                    for k in ("received", "answered", "refused", "timed_out", "lost")
                },
                "pending_waits": {
                    "count": self.counts.get("pended", 0),
                    "max_s": round(max(waits, default=0.0), 3),
                    "mean_s": round(statistics.fmean(waits), 3) if waits else 0.0,
                },
                "cold_starts": self.counts.get("cold_starts", 0),
                "start_failures": self.counts.get("start_failures", 0),
                "startup_s": [round(s, 3) for s in self._startups],
                "startup_avg_s": None if average is None else round(average, 3),
                "scale_ins": self.counts.get("scale_ins", 0),
                "reclaims": {
                    "graceful": self.counts.get("reclaims_graceful", 0),
                    "hard": self.counts.get("reclaims_hard", 0),
                },
                "crashes": self.counts.get("crashes", 0),
                "shutdowns": dict(shutdowns),
                "billing": {
                    "instance_seconds": round(sum(i.meter.billed_s(now) for i in insts), 3),
                    "unrounded_s": round(sum(i.meter.raw_s(now) for i in insts), 3),
                    "periods": sum(i.meter.periods for i in insts),
                    "increment_s": insts[0].meter.increment if insts else 0.1,
                },
                "instance_list": [i.view(now) for i in insts],
                "deploys": self.counts.get("deploys", 0),
                "revisions": self._revisions_view(now),
            }

    def _revisions_view(self, now: float) -> dict[str, Any]:
        views = []
        for rev in self._revisions:
            mine = [i for i in self._instances.values() if i.revision is rev]
            live = [i for i in mine if i.state is not State.GONE]
            view = rev.view(now)
            view["instances"] = {
                "current": len(live),
                "starting": sum(1 for i in live if i.state is State.STARTING),
                "serving": sum(1 for i in live if i.state is State.SERVING and i.routed),
                "draining": sum(1 for i in live if i.draining()),
                "stopping": sum(1 for i in live if i.state is State.STOPPING),
                "started": len(mine),
            }
            view["in_flight"] = sum(i.in_flight for i in live)
            view["drained"] = rev.state is RevisionState.RETIRED and not live
            views.append(view)
        return {
            "serving": self._serving.name,
            "latest": self._revisions[-1].name,
            "revisions": views,
        }

    # ------------------------------------------------------------------ internals (lock held)

    def _live(self, instance_id: int) -> Instance:
        inst = self._instances.get(instance_id)
        if inst is None or inst.state in (State.STOPPING, State.GONE):
            raise UnknownInstance(f"{self.name} has no live instance {instance_id}")
        return inst

    def _pick(self) -> Instance | None:
        """The routed serving instance with the fewest requests in flight and a free slot;
        while a previous revision hands over (revision.py), one of its first."""
        free = [
            i
            for i in self._instances.values()
            if i.routed
            and i.state is State.SERVING
            and (i.revision is self._serving or i.revision.state is RevisionState.HANDING_OVER)
            and i.in_flight < self.config.concurrency
        ]
        return min(
            free,
            key=lambda i: (i.revision.state is not RevisionState.HANDING_OVER, i.in_flight, i.id),
            default=None,
        )

    def _grant(self, inst: Instance, waited_s: float) -> Lease:
        now = self._clock()
        inst.in_flight += 1
        inst.served += 1
        inst.max_in_flight = max(inst.max_in_flight, inst.in_flight)
        inst.idle_since = None
        inst.meter.hold(now)
        total = sum(i.in_flight for i in self._instances.values())
        self._peak_in_flight = max(self._peak_in_flight, total)
        return Lease(inst, waited_s)

    def _dispatch(self) -> None:
        """Hand free slots to pending requests, oldest first."""
        while (waiter := self._pending.first()) is not None:
            inst = self._pick()
            if inst is None:
                return
            self._pending.pop()
            waiter.grant(self._grant(inst, self._clock() - waiter.since))

    def _active(self) -> int:
        """Instances that count toward max_instances: the serving revision's routed
        instances, starting or serving (a deploying revision's first one does not)."""
        return sum(
            1
            for i in self._instances.values()
            if i.routed
            and i.revision is self._serving
            and i.state in (State.STARTING, State.SERVING)
        )

    def _scale_out(self) -> None:
        if self._stopping:
            return
        c = self.config
        # what a retired revision still has in flight stays there: not the new one's demand
        demand = sum(
            i.in_flight for i in self._instances.values() if i.revision is self._serving
        ) + len(self._pending)
        n = autoscaler.to_start(
            demand,
            self._active(),
            c.concurrency,
            c.target_utilization,
            c.min_instances,
            c.max_instances,
        )
        if n and self._clock() >= self._retry_at:
            for _ in range(n):
                self._launch()

    def _launch(self, revision: Revision | None = None) -> None:
        now = self._clock()
        instance_id = next(self._ids)
        rev = revision or self._serving
        inst = Instance(
            instance_id, f"{self.name}-{instance_id}", self._host, free_port(), now, rev
        )
        inst.meter.hold(now)  # start-up is billable
        self._instances[instance_id] = inst
        current = sum(1 for i in self._instances.values() if i.state is not State.GONE)
        self._peak_instances = max(self._peak_instances, current)
        self._log(f"{inst.label}: starting on port {inst.port} ({rev.name}, cold start)")
        self._spawn_worker(self._boot, inst, f"{inst.label}-boot")

    def _spawn_worker(self, target: Callable[[Instance], None], inst: Instance, name: str) -> None:
        worker = threading.Thread(target=target, args=(inst,), name=name, daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()]
        self._workers.append(worker)
        worker.start()

    def _boot(self, inst: Instance) -> None:
        """Spawn the process, wait until it listens: the cold start."""
        try:
            rev = inst.revision
            inst.proc = self._spawner.run(lambda: rev.launcher(inst.port, inst.label, rev))
        except Exception as exc:
            self._log(f"{inst.label}: could not be spawned: {exc}")
            inst.spawned.set()
            with self._lock:
                self._start_failed(inst, f"could not be spawned: {exc}")
            return
        inst.spawned.set()
        try:
            wait_for_port(
                self._host, inst.port, timeout=self.config.start_timeout_s, proc=inst.proc
            )
            failure = ""
        except (RuntimeError, TimeoutError) as exc:
            self._log(f"{inst.label}: failed to start: {exc}")
            failure = f"failed to start: {exc}"
        with self._lock:
            if inst.state is not State.STARTING:
                return  # reclaimed (or its revision retired) while it started
            now = self._clock()
            if failure:
                self._start_failed(inst, failure)
                return
            inst.state = State.SERVING
            inst.ready_at = now
            inst.idle_since = now
            inst.meter.release(now)  # start-up ends; requests take over the billing
            startup = now - inst.launched_at
            self._startups.append(startup)
            self.counts["cold_starts"] += 1
            self._log(f"{inst.label}: serving (pid {inst.pid}, start-up {startup:.2f} s)")
            self._ready(inst)
            self._dispatch()

    def _start_failed(self, inst: Instance, why: str) -> None:
        """A start that failed; a deploying revision whose only instance it was fails
        (traffic stays where it is, as a Cloud Run deploy whose revision is not ready)."""
        self.counts["start_failures"] += 1
        self._retire(inst, "start failed", graceful=False)
        rev = inst.revision
        if rev is self._serving:
            self._retry_at = self._clock() + START_RETRY_S
            return
        others = [
            i for i in self._instances.values() if i.revision is rev and i.state is State.STARTING
        ]
        if rev.state is RevisionState.DEPLOYING and not others:
            rev.state, rev.failure = RevisionState.FAILED, why
            self._log(f"{rev.name}: failed, its instance {why}; {self._serving.name} serves on")

    def _ready(self, inst: Instance) -> None:
        """An instance listens. The first one of a newer revision takes the traffic:
        the latest ready revision serves (instances only start for the serving
        revision or for a deploy newer than it)."""
        rev, now = inst.revision, self._clock()
        if rev.ready_at is None:
            rev.ready_at = now
        if rev is self._serving:
            return
        old, self._serving = self._serving, rev
        rev.state = RevisionState.SERVING
        if rev.transition_s > 0 and old.state is RevisionState.SERVING:
            old.state, old.handover_until = RevisionState.HANDING_OVER, now + rev.transition_s
            self._log(f"{rev.name}: serving; {old.name} hands over for {rev.transition_s:g} s")
            self._retire_others(rev, now, keep=old)
            return
        self._log(f"{rev.name}: serving 100% of the traffic; {old.name} retired, draining")
        self._retire_others(rev, now)

    def _retire_others(self, rev: Revision, now: float, keep: Revision | None = None) -> None:
        """Every revision but `rev` (and `keep`, handing over) retires: its instances are
        unrouted and drained."""
        drain = self.config.timeout_s if rev.drain_timeout_s is None else rev.drain_timeout_s
        for prev in self._revisions:
            if (
                prev is not rev
                and prev is not keep
                and prev.state
                in (
                    RevisionState.SERVING,
                    RevisionState.DEPLOYING,
                    RevisionState.HANDING_OVER,
                )
            ):
                prev.state, prev.retired_at = RevisionState.RETIRED, now
                prev.drain_deadline = now + drain
        for other in list(self._instances.values()):
            if other.revision not in (rev, keep) and other.state is not State.GONE:
                other.routed = False
                self._drain(other, now)

    def _drain(self, inst: Instance, now: float) -> None:
        """Stop an instance of a retired revision once it has nothing in flight (or
        its revision's drain time is over): SIGTERM, the grace, SIGKILL."""
        if inst.state is State.STOPPING or inst.state is State.GONE:
            return
        deadline = inst.revision.drain_deadline
        if (
            inst.in_flight == 0
            or inst.state is State.STARTING
            or (deadline is not None and now >= deadline)
        ):
            self._retire(inst, "rollout", graceful=True)

    def _retire(
        self, inst: Instance, reason: str, *, graceful: bool, grace_s: float | None = None
    ) -> threading.Thread | None:
        """Unroute `inst` at once and shut it down on a worker thread."""
        if inst.state in (State.STOPPING, State.GONE):
            return None
        now = self._clock()
        if inst.state is State.STARTING:
            inst.meter.release(now)  # the start-up hold ends here
        inst.state = State.STOPPING
        inst.routed = False
        inst.meter.hold(now)  # shutdown is billable
        inst.shutdown = Shutdown(reason, graceful, now)
        grace = self.config.shutdown_grace_s if grace_s is None else grace_s
        self._log(
            f"{inst.label}: {reason}: "
            + (f"SIGTERM, then SIGKILL after {grace:g} s" if graceful else "SIGKILL")
        )

        def _end(inst: Instance) -> None:
            inst.spawned.wait()
            outcome = Outcome.NEVER_STARTED
            if inst.proc is not None:
                outcome = terminate(inst.proc, grace) if graceful else kill(inst.proc)
            with self._lock:
                now = self._clock()
                inst.state = State.GONE
                inst.meter.release(now)
                assert inst.shutdown is not None
                inst.shutdown.ended, inst.shutdown.outcome = now, outcome
                self._log(f"{inst.label}: gone ({outcome}, {now - inst.shutdown.began:.2f} s)")
                self._forget()
                self._dispatch()
                self._scale_out()

        worker = threading.Thread(target=_end, args=(inst,), name=f"{inst.label}-stop")
        worker.daemon = True
        self._workers = [w for w in self._workers if w.is_alive()]
        self._workers.append(worker)
        worker.start()
        return worker

    def _forget(self) -> None:
        gone = [i for i, inst in self._instances.items() if inst.state is State.GONE]
        for instance_id in gone[:-HISTORY]:
            del self._instances[instance_id]

    def _tick_loop(self) -> None:
        while not self._stop_tick.wait(self._tick_s):
            with self._lock:
                if self._stopping:
                    return
                self._tick()

    def _tick(self) -> None:
        """A transition that is over, crashes, idle instances, then scale out
        (replacements, min_instances)."""
        now = self._clock()
        for rev in self._revisions:  # the hard cut, late (revision.py)
            if rev.state is RevisionState.HANDING_OVER and now >= (rev.handover_until or 0.0):
                self._log(f"{rev.name}: transition over; retired, draining")
                self._retire_others(self._serving, now)
        for inst in list(self._instances.values()):
            if inst.state is State.SERVING and inst.exited():  # a failed start is _boot's
                self._log(f"{inst.label}: exited by itself (code {inst.proc.returncode})")  # type: ignore[union-attr]
                self.counts["crashes"] += 1
                self._retire(inst, "crashed", graceful=False)
            elif inst.draining():
                self._drain(inst, now)
        views = [
            autoscaler.Idle(i.id, i.in_flight, i.idle_since)
            for i in self._instances.values()
            if i.routed and not i.paused and i.state is State.SERVING
        ]
        for instance_id in autoscaler.idle_victims(
            views, now, self.config.idle_timeout_s, self.config.min_instances
        ):
            self.counts["scale_ins"] += 1
            self._retire(self._instances[instance_id], "idle", graceful=True)
        self._scale_out()
