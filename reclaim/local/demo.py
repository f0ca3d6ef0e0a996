"""`make demo`: the incident replay, on the local cloud.

One catalog batch of 22 jobs once lost 12 pieces when the platform reclaimed an
instance. This replays it on the local Cloud Run: 22 `demo` jobs reach a claim
service scaled to zero (at most 2 instances x concurrency 4, started on demand,
cold) and it scales out. Mid-batch the platform reclaims the busiest instance
gracefully, as a rollout or host maintenance does (SIGTERM, the grace, SIGKILL):
its jobs are handed back and resumed by live instances within seconds. Later it
kills another busy instance hard (SIGKILL alone, a host failure): its jobs wait
for the staleness rescue. Then it rolls out a new claim revision whose demo pipeline
has one more stage (reclaim/local/demo_release.py), draining the old one at once: jobs
mid-pipeline are handed back and resume on the new release by stage name. Idle
instances scale in as the batch drains. Live progress until every job is terminal,
then a summary: jobs done, both rescues, their times and what bounded the hand-back's
(a busy slot freeing, or a free one), the rollout, GCS calls (counted by
reclaim.local.faultproxy in front of fake-gcs-server), Pub/Sub figures (the emulator's /stats)
and the platform's (cold starts, peak instances, scale-ins, 429s, billable
instance-seconds). Exit
status 1 if any job is not terminal, 2 if the local cloud could not start.

The record-watching helpers live in reclaim/local/observe.py (shared with the
benchmarks and the chaos test).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from reclaim.local import wiring
from reclaim.local.cloud import ROOT, CloudConfig, LocalCloud
from reclaim.local.faultproxy import FaultProxy
from reclaim.local.observe import (
    STATUS_ORDER,
    Watch,
    all_terminal,
    counts_by_status,
    emulator_stats,
    handed_back_at,
    instance_pids,
    parse_at,
    reclaimed_at,
    rescued_at,
    running_on,
    submit_batch,
    topic_count,
)
from reclaim.local.procs import free_port
from shared.job_queue import TERMINAL_STATUSES

RELEASE_MODULE = "reclaim.local.demo_release"
"""The demo pipeline's next release (demo plus one stage), rolled out mid-batch: named, not
imported, because importing it registers it and would replace this process's own demo."""
RELEASE_STAGE = "receipt"  # the stage it appends (reclaim/local/demo_release.py, ADDED)


@dataclass(frozen=True)
class DemoConfig:
    """The replay's knobs; the defaults are the incident (22 jobs, 2 x 4 slots)."""

    jobs: int = 22
    max_instances: int = 2
    concurrency: int = 4
    stale_seconds: float = 8.0
    sweep_interval_seconds: float = 2.0
    idle_timeout_seconds: float = 2.0
    """Scale-in after this long without a request (Cloud Run: up to ~15 min)."""
    stages: int = 3
    sleep_s: float = 1.5
    reclaim_after_s: float = 2.0
    """Seconds after the first claim at which the busiest instance is reclaimed gracefully."""
    kill_after_s: float = 3.0
    """Seconds after the graceful reclaim at which the busiest instance left is killed hard."""
    rollout_after_s: float = 2.0
    """Seconds after the hard kill at which claim's next release is rolled out."""
    timeout_s: float = 100.0
    log_dir: Path = ROOT / ".local-cloud" / "demo-logs"


# ----------------------------------------------------------------- display (pure)


def progress_line(counts: Mapping[str, int], total: int, elapsed: float, width: int = 30) -> str:
    """`[#####.....] 12/22 terminal | queued 4 running 6 done 12 | 23.4s`."""
    terminal = sum(counts.get(s, 0) for s in TERMINAL_STATUSES)
    filled = int(width * terminal / total) if total else width
    bar = "#" * filled + "." * (width - filled)
    shown = " ".join(f"{s} {counts[s]}" for s in STATUS_ORDER if counts.get(s))
    return f"[{bar}] {terminal:>3}/{total} terminal | {shown} | {elapsed:5.1f}s"


@dataclass
class Rescue:
    """What happened to the jobs running on one reclaimed instance: handed back (SIGTERM)
    or rescued by the watchdog once stale (SIGKILL)."""

    graceful: bool
    instance: int | None = None
    jobs: dict[str, tuple[str, int]] = field(default_factory=dict)
    at: datetime | None = None
    requeued: dict[str, float] = field(default_factory=dict)
    """job id -> seconds from the signal to the hand-back (or the watchdog's requeue)."""
    reclaimed: dict[str, float] = field(default_factory=dict)
    """job id -> seconds from the signal to the re-claim by a live instance."""

    @property
    def signal(self) -> str:
        return "SIGTERM" if self.graceful else "SIGKILL"

    def update(self, records: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Note new requeues / re-claims of the reclaimed jobs; returns event lines to show."""
        events: list[str] = []
        if self.at is None:
            return events
        for job_id, (_owner, attempt) in self.jobs.items():
            rec = records.get(job_id, {})
            back = handed_back_at(rec, attempt) if self.graceful else rescued_at(rec, attempt)
            if job_id not in self.requeued and back is not None:
                self.requeued[job_id] = (back - self.at).total_seconds()
                how = "handed back by its owner" if self.graceful else "requeued by the watchdog"
                events.append(
                    f"{'handed back' if self.graceful else 'rescued'}  {job_id[:12]} ({how})"
                )
            if job_id not in self.reclaimed and (at := reclaimed_at(rec, attempt)):
                self.reclaimed[job_id] = (at - self.at).total_seconds()
                events.append(f"resumed  {job_id[:12]} by a live instance (attempt {attempt + 1})")
        return events


@dataclass
class Rollout:
    """Claim's new revision, deployed mid-batch: when, and when it took the traffic."""

    revision: str | None = None
    at: float | None = None
    serving_after_s: float | None = None


def rollout_lines(records: Mapping[str, Mapping[str, Any]], rollout: Rollout) -> list[str]:
    """What the rollout did to the batch: jobs that ran the added stage, and how the
    claims on the new release resumed (the claim history's `resume`)."""
    head = f"{'rollout':<17}"
    if rollout.revision is None:
        return [f"{head}- (the batch ended before the rollout)"]
    resumes = [
        e.get("resume")
        for r in records.values()
        for e in r.get("history") or []
        if e.get("event") == "claimed" and e.get("resume")
    ]
    receipts = sum(1 for r in records.values() if (r.get("result") or {}).get("receipt"))
    serving = rollout.serving_after_s
    return [
        f"{head}{rollout.revision} (demo + stage {RELEASE_STAGE!r}) took the traffic "
        + (f"{serving:.1f} s after the deploy" if serving is not None else "(never)"),
        " " * 17 + f"{receipts} job(s) ran the added stage; {resumes.count('by name')} resumed "
        "mid-pipeline by stage name, "
        f"{resumes.count('own version')} on their own version; no completed stage re-run",
    ]


def _span(prefix: str, values: Iterable[float], empty: str = "") -> str:
    got = sorted(values)
    if not got:
        return empty
    digits = 2 if got[-1] < 1 else 1  # sub-second spans (a hand-back) keep their detail
    if got[-1] - got[0] < 0.5 * 10**-digits:
        return f"{prefix}{got[0]:.{digits}f} s"
    return f"{prefix}{got[0]:.{digits}f}-{got[-1]:.{digits}f} s"


_FREES_A_SLOT = ("done", "failed", "handed back", "requeued")


def _instance_of(owner: object) -> str | None:
    """An owner id's instance (the part before the claim's `.n` suffix)."""
    return owner.rsplit(".", 1)[0] if isinstance(owner, str) and "." in owner else None


def resume_bounds(
    rescue: Rescue, records: Mapping[str, Mapping[str, Any]]
) -> tuple[list[float], list[float]]:
    """What bounded each resumption, from the records' history: (for jobs that waited for
    a busy slot to free, seconds from the last slot freeing on the instance that took
    them to their claim; for jobs that found a free or fresh slot, seconds from their
    hand-back or requeue to their claim)."""
    slot_freed: list[float] = []
    free: list[float] = []
    ends = [
        (_instance_of(e.get("owner")), at)
        for r in records.values()
        for e in r.get("history") or []
        if e.get("event") in _FREES_A_SLOT and (at := parse_at(e.get("at"))) is not None
    ]
    for job_id, (_owner, attempt) in rescue.jobs.items():
        rec = records.get(job_id, {})
        back = handed_back_at(rec, attempt) if rescue.graceful else rescued_at(rec, attempt)
        claim = next(
            (
                e
                for e in rec.get("history") or []
                if e.get("event") == "claimed" and int(e.get("attempt") or 0) > attempt
            ),
            None,
        )
        claimed = parse_at(claim.get("at")) if claim else None
        if back is None or claim is None or claimed is None:
            continue
        taker = _instance_of(claim.get("owner"))
        freed = [at for inst, at in ends if inst == taker and back <= at <= claimed]
        if freed:
            slot_freed.append((claimed - max(freed)).total_seconds())
        else:
            free.append((claimed - back).total_seconds())
    return slot_freed, free


def _bound_line(rescue: Rescue, records: Mapping[str, Mapping[str, Any]]) -> str:
    waited, free = resume_bounds(rescue, records)
    parts = []
    if waited:
        parts.append(
            f"{len(waited)} waited for a busy slot and were claimed "
            + _span("", waited)
            + " after it freed (the freed slot takes the oldest job marked due)"
        )
    if free:
        parts.append(
            f"{len(free)} found a free or new slot " + _span("", free) + " after the hand-back"
        )
    return " " * 17 + "bounded by slots: " + ("; ".join(parts) or "-")


def _rescue_lines(
    rescue: Rescue, config: DemoConfig, records: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    head = f"{'hand-back' if rescue.graceful else 'staleness rescue':<17}"
    pad = " " * 17
    if not rescue.jobs:
        return [f"{head}- (no job was running on the instance that got {rescue.signal})"]
    lines = [
        f"{head}{len(rescue.reclaimed)} of the {len(rescue.jobs)} jobs running on "
        f"claim-{rescue.instance} at its {rescue.signal} were resumed by a live instance"
    ]
    times = sorted(rescue.reclaimed.values())
    resumed = (
        _span("after ", times) + f" (median {statistics.median(times):.1f} s)" if times else "-"
    )
    if rescue.graceful:
        lines += [
            pad + "handed back " + _span("", rescue.requeued.values(), "-") + " after the "
            "SIGTERM (Cloud Run allows 10 s), and resumed",
            pad + f"{resumed}, in turn with the queued jobs; no attempt spent, no stale time",
        ]
        if records is not None:
            lines.append(_bound_line(rescue, records))
    else:
        bound = config.stale_seconds + config.sweep_interval_seconds
        requeued = _span("", rescue.requeued.values(), "")
        which = "them" if len(rescue.requeued) == len(rescue.jobs) else "some"
        lines += [
            pad
            + f"taken over {resumed} once stale"
            + (f" (the watchdog requeued {which} after {requeued})" if requeued else ""),
            pad + f"(bound: stale_s {config.stale_seconds:g} + sweep every "
            f"{config.sweep_interval_seconds:g} s = {bound:g} s after the job's last write)",
        ]
    return lines


def summary_lines(
    records: Mapping[str, Mapping[str, Any]],
    rescues: list[Rescue],
    gcs: Mapping[str, int],
    publishes: int,
    deliveries: Mapping[str, int],
    config: DemoConfig,
    wall_s: float,
    platform: Mapping[str, Any] | None = None,
    rollout: Rollout | None = None,
) -> list[str]:
    """The end-of-demo summary (pure, so its wording is tested)."""
    counts = counts_by_status(records)
    total = len(records)
    rescued = sum(int(r.get("rescues") or 0) for r in records.values())
    handed = sum(int(r.get("handbacks") or 0) for r in records.values())
    lines = [
        f"jobs done        {counts.get('done', 0)} / {total}"
        + (f"   (failed {counts['failed']})" if counts.get("failed") else ""),
        f"recoveries       {handed} hand-back(s), {rescued} staleness rescue(s) "
        "(the records' `handbacks` and `rescues`)",
    ]
    for rescue in rescues:
        lines += _rescue_lines(rescue, config, records)
    if rollout is not None:
        lines += rollout_lines(records, rollout)
    gcs_total = sum(gcs.values())
    kinds = ", ".join(f"{k} {v}" for k, v in gcs.items() if v)
    lines += [
        f"GCS calls        {gcs_total}   ({kinds}; {gcs_total / max(total, 1):.1f} per job)",
        f"Pub/Sub          {publishes} doorbell publishes ({publishes / max(total, 1):.2f} per "
        f"job); {deliveries.get('push_attempts', 0)} pushes, "
        f"{deliveries.get('push_failures', 0)} failed (redelivered)",
    ]
    if platform:
        starts = platform.get("startup_s") or []
        lines.append(
            f"Cloud Run        claim peaked at {platform['instances']['peak']} instance(s); "
            f"{platform['cold_starts']} cold start(s)"
            + (f" ({_span('', starts)})" if starts else "")
            + f"; {platform.get('scale_ins', 0)} scale-in(s) (idle); "
            f"{platform['requests']['refused']} push(es) refused by the platform (429)"
        )
        ends = platform.get("shutdowns") or {}
        if ends:
            lines.append(
                "                 shutdowns: "
                + ", ".join(f"{n} {how}" for how, n in sorted(ends.items()))
            )
        lines.append(
            f"                 {platform['billing']['instance_seconds']:.1f} billable "
            "instance-seconds (request-based: start-up, requests, shutdown)"
        )
    lines.append(f"wall time        {wall_s:.1f} s")
    not_terminal = total - sum(counts.get(s, 0) for s in TERMINAL_STATUSES)
    if not_terminal:
        lines.append(f"NOT TERMINAL     {not_terminal} job(s): the demo failed")
    return lines


# ----------------------------------------------------------------- the replay


class _Screen:
    """A progress bar redrawn in place on a terminal; plain periodic lines otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._last = ""
        self._last_plain = 0.0

    def bar(self, line: str) -> None:
        if self.tty:
            self.out.write("\r\033[K" + line)
            self.out.flush()
        elif line != self._last and time.monotonic() - self._last_plain >= 2.0:
            self.out.write(line + "\n")
            self.out.flush()
            self._last_plain = time.monotonic()
        self._last = line

    def event(self, elapsed: float, text: str) -> None:
        prefix = "\r\033[K" if self.tty else ""
        self.out.write(f"{prefix}  t={elapsed:5.1f}s  {text}\n")
        if self.tty:
            self.out.write(self._last)
        self.out.flush()

    def done(self) -> None:
        if self.tty:
            self.out.write("\r\033[K" + self._last + "\n")
        else:
            self.out.write(self._last + "\n")
        self.out.flush()


def _jobs(config: DemoConfig) -> list[dict[str, Any]]:
    payload = {"stages": config.stages, "sleep_s": config.sleep_s}
    return [{"pipeline": "demo", "payload": dict(payload)} for _ in range(config.jobs)]


def _cloud_config(config: DemoConfig, gcs_port: int, proxy_url: str) -> CloudConfig:
    return CloudConfig(
        max_instances=config.max_instances,
        concurrency=config.concurrency,
        idle_timeout_seconds=config.idle_timeout_seconds,
        cloudrun_admin_port=0,
        stale_seconds=config.stale_seconds,
        sweep_interval_seconds=config.sweep_interval_seconds,
        emulator_admin_port=0,
        gcs_port=gcs_port,
        functions_storage_host=proxy_url,
        log_dir=config.log_dir / time.strftime("%Y%m%d-%H%M%S"),
    )


class _Replay:
    """One run of the incident: submit, watch, reclaim gracefully, kill hard, summarise."""

    def __init__(self, cloud: LocalCloud, config: DemoConfig, out: TextIO):
        self.cloud = cloud
        self.config = config
        self.screen = _Screen(out)
        self.graceful = Rescue(graceful=True)
        self.hard = Rescue(graceful=False)
        self.watch = Watch(cloud)
        self.t0 = time.monotonic()
        self.first_claim: float | None = None
        self.reclaimed_t: float | None = None
        self.killed_t: float | None = None
        self.rollout = Rollout()
        self.seen: dict[int, str] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> tuple[dict[str, dict[str, Any]], float]:
        _batch, ids = submit_batch(self.cloud.endpoints["jobs"], _jobs(self.config))
        self.screen.event(self.elapsed(), f"submitted {len(ids)} jobs (one batch)")
        records: dict[str, dict[str, Any]] = {}
        deadline = self.t0 + self.config.timeout_s
        while time.monotonic() < deadline:
            records = self.watch.snapshot(ids)
            self._note_instances()
            self._maybe_reclaim(records)
            for rescue in (self.graceful, self.hard):
                for line in rescue.update(records):
                    self.screen.event(self.elapsed(), line)
            self.screen.bar(progress_line(counts_by_status(records), len(ids), self.elapsed()))
            if all_terminal(records):
                break
            time.sleep(0.2)
        self.screen.done()
        wall = self.elapsed()
        self._watch_scale_to_zero()
        return records, wall

    def _watch_scale_to_zero(self) -> None:
        """The batch is done: show the idle instances scaling in, down to zero."""
        claim = self.cloud.service("claim")
        c = self.cloud.config
        deadline = time.monotonic() + c.idle_timeout_seconds + c.shutdown_grace_seconds + 5
        while time.monotonic() < deadline:
            self._note_instances()
            if claim.stats()["instances"]["current"] == 0:
                self.screen.event(self.elapsed(), "claim scaled to zero")
                return
            time.sleep(0.2)

    def _note_instances(self) -> None:
        """Say when the autoscaler brought an instance up (a cold start) or scaled one in."""
        for inst in self.cloud.service("claim").instances():
            was = self.seen.get(inst["id"])
            if inst["state"] == "serving" and was is None:
                self.seen[inst["id"]] = "serving"
                self.screen.event(
                    self.elapsed(),
                    f"claim-{inst['id']} started (scale-out; cold start {inst['startup_s']:.1f} s)",
                )
            shutdown = inst.get("shutdown") or {}
            if shutdown.get("reason") == "idle" and was != "idle":
                self.seen[inst["id"]] = "idle"
                self.screen.event(self.elapsed(), f"claim-{inst['id']} scaled in (idle)")

    def _busiest(self, records: dict[str, dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        skip = {self.graceful.instance, self.hard.instance}
        busy = {i: running_on(records, p) for i, p in instance_pids(self.cloud).items()}
        busy = {i: jobs for i, jobs in busy.items() if jobs and i not in skip}
        if not busy:
            return None
        index = max(busy, key=lambda i: len(busy[i]))
        return index, busy[index]

    def _maybe_reclaim(self, records: dict[str, dict[str, Any]]) -> None:
        now = time.monotonic()
        if self.first_claim is None:
            if any(r.get("status") == "running" for r in records.values()):
                self.first_claim = now
            return
        if self.graceful.at is None:
            if now - self.first_claim >= self.config.reclaim_after_s:
                self._reclaim(self.graceful, records)
                self.reclaimed_t = now
            return
        due = self.reclaimed_t is not None and now - self.reclaimed_t >= self.config.kill_after_s
        if self.hard.at is None and due:
            self._reclaim(self.hard, records)
            if self.hard.at is not None:
                self.killed_t = now
        if self.killed_t is not None and now - self.killed_t >= self.config.rollout_after_s:
            self._roll_out()

    def _roll_out(self) -> None:
        """Deploy claim's next release once, then note when it takes the traffic."""
        r = self.rollout
        if r.at is None:
            r.at = time.monotonic()
            r.revision = self.cloud.deploy_revision(
                "claim", pipeline_modules=[RELEASE_MODULE], drain_timeout_seconds=0
            )
            self.screen.event(
                self.elapsed(),
                f"rollout: {r.revision} deployed (demo + stage {RELEASE_STAGE!r}); the "
                "old revision is drained at once, its jobs handed back",
            )
        elif r.serving_after_s is None and self.cloud.revisions("claim")["serving"] == r.revision:
            r.serving_after_s = time.monotonic() - r.at
            self.screen.event(self.elapsed(), f"rollout: {r.revision} serving")

    def _reclaim(self, rescue: Rescue, records: dict[str, dict[str, Any]]) -> None:
        found = self._busiest(records)
        if found is None:
            return
        index, jobs = found
        rescue.at = datetime.now(UTC)
        rescue.instance, rescue.jobs = index, jobs
        self.cloud.service("claim").reclaim(index, graceful=rescue.graceful)
        how = (
            "SIGTERM, then SIGKILL after the grace: a rollout or host maintenance"
            if rescue.graceful
            else "SIGKILL: a host failure"
        )
        self.screen.event(
            self.elapsed(),
            f"{rescue.signal} claim-{index} ({how}) with {len(jobs)} jobs running ("
            + ", ".join(j[:8] for j in jobs)
            + ")",
        )


def run(config: DemoConfig, out: TextIO = sys.stdout) -> int:
    """The whole demo; returns the process exit status."""
    out.write(
        f"reclaim demo: {config.jobs} jobs to a claim service scaled to zero (at most "
        f"{config.max_instances} instances x concurrency {config.concurrency}). Mid-batch the "
        "busiest instance is reclaimed gracefully (SIGTERM), later another one is killed hard "
        "(SIGKILL), then claim's next release (one more stage) is rolled out.\n"
        f"stale after {config.stale_seconds:g} s, sweep every "
        f"{config.sweep_interval_seconds:g} s, idle scale-in after "
        f"{config.idle_timeout_seconds:g} s. Starting the local cloud...\n"
    )
    out.flush()
    gcs_port = free_port()
    started = time.monotonic()
    with FaultProxy(f"http://127.0.0.1:{gcs_port}") as proxy:
        cloud = LocalCloud(_cloud_config(config, gcs_port, proxy.url))
        try:
            cloud.start()
        except Exception as exc:
            out.write(f"could not start the local cloud: {exc}\n")
            return 2
        try:
            out.write(
                f"local cloud up in {time.monotonic() - started:.1f} s "
                f"(logs: {cloud.config.log_dir})\n"
            )
            replay = _Replay(cloud, config, out)
            records, wall = replay.run()
            stats = emulator_stats(cloud.endpoints["emulator_admin"])
            platform = cloud.service("claim").stats()
        finally:
            cloud.stop()
        publishes = topic_count(stats, cloud.endpoints["jobs_topic"], "published")
        subs = stats.get("subscriptions") or {}
        deliveries: dict[str, int] = next(
            (v for k, v in subs.items() if k.endswith(wiring.CLAIM_SUBSCRIPTION)), {}
        )
        rescues = [replay.graceful, replay.hard]
        lines = summary_lines(
            records,
            rescues,
            proxy.counts(),
            publishes,
            deliveries,
            config,
            wall,
            platform,
            replay.rollout,
        )
    out.write("\nsummary\n" + "\n".join("  " + line for line in lines) + "\n")
    out.flush()
    return 0 if all_terminal(records) else 1


def main(argv: list[str] | None = None) -> int:
    d = DemoConfig()
    p = argparse.ArgumentParser(
        prog="python -m reclaim.local.demo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--jobs", type=int, default=d.jobs)
    p.add_argument("--max-instances", type=int, default=d.max_instances)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--stale-seconds", type=float, default=d.stale_seconds)
    p.add_argument("--sweep-interval", type=float, default=d.sweep_interval_seconds)
    p.add_argument("--idle", type=float, default=d.idle_timeout_seconds, help="scale-in after")
    p.add_argument("--sleep", type=float, default=d.sleep_s, help="seconds per stage")
    p.add_argument("--timeout", type=float, default=d.timeout_s)
    a = p.parse_args(argv)
    if a.jobs < 1 or a.max_instances < 1 or a.concurrency < 1:
        p.error("--jobs, --max-instances and --concurrency must be >= 1")
    if a.stale_seconds < 3 or a.sweep_interval <= 0 or a.sleep < 0 or a.timeout <= 0:
        p.error("--stale-seconds must be >= 3; --sweep-interval and --timeout > 0; --sleep >= 0")
    if a.idle < 0:
        p.error("--idle must be >= 0")
    config = DemoConfig(
        jobs=a.jobs,
        max_instances=a.max_instances,
        concurrency=a.concurrency,
        stale_seconds=a.stale_seconds,
        sweep_interval_seconds=a.sweep_interval,
        idle_timeout_seconds=a.idle,
        sleep_s=a.sleep,
        timeout_s=a.timeout,
    )
    try:
        return run(config)
    except KeyboardInterrupt:
        sys.stdout.write("\ninterrupted; the local cloud was stopped\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
