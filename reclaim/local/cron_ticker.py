"""`make dev`'s Cloud Scheduler for the cron schedules: the same file terraform reads
(pipelines/schedules.json), the same route and the same X-CloudScheduler-ScheduleTime
header, so a tick behaves locally as it does deployed."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from shared.cron.schedules import Schedule
from shared.cron.ticks import SCHEDULE_TIME_HEADER

USER_AGENT = "Google-Cloud-Scheduler"


def tick_url(submit_url: str, schedule: Schedule) -> str:
    return f"{submit_url.rstrip('/')}/schedules/{schedule.name}/tick"


def deliver(submit_url: str, schedule: Schedule, tick: datetime, timeout: float = 30) -> int:
    """POST one tick as Cloud Scheduler does; the HTTP status (-1: no answer)."""
    stamp = tick.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    req = urllib.request.Request(
        tick_url(submit_url, schedule),
        data=b"{}",
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            SCHEDULE_TIME_HEADER: stamp,
            "X-CloudScheduler-JobName": schedule.name,
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return -1


class CronTicker:
    """A daemon thread delivering every schedule's ticks until stopped."""

    def __init__(
        self,
        submit_url: str,
        schedules: tuple[Schedule, ...],
        log_path: Path,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.submit_url = submit_url
        self.schedules = schedules
        self.log_path = log_path
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cron-ticker", daemon=True)

    def start(self) -> None:
        if self.schedules:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        now = self.clock()
        due = {s.name: s.next_after(now) for s in self.schedules}
        by_name = {s.name: s for s in self.schedules}
        while not self._stop.is_set():
            name = min(due, key=lambda n: due[n])
            wait = (due[name] - self.clock()).total_seconds()
            if wait > 0 and self._stop.wait(min(wait, 60.0)):
                return
            if due[name] > self.clock():
                continue
            status = deliver(self.submit_url, by_name[name], due[name])
            with open(self.log_path, "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} tick {name} {due[name]:%FT%TZ} -> {status}\n")
            due[name] = by_name[name].next_after(due[name])
