"""make dev's cron ticker delivers a schedule's ticks as Cloud Scheduler does: POST to
/schedules/<name>/tick with the tick's time in X-CloudScheduler-ScheduleTime."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reclaim.local.cron_ticker import CronTicker
from shared.cron.schedules import parse


def test_the_ticker_posts_each_tick_with_the_scheduler_header(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.path, self.headers.get("X-CloudScheduler-ScheduleTime")))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    start = datetime(2026, 7, 1, 9, 59, 30, tzinfo=UTC)
    times: Iterator[datetime] = iter([start] + [start + timedelta(minutes=2)] * 1000)
    (every,) = parse({"schedules": [{"name": "m", "cron": "* * * * *", "pipeline": "demo"}]})
    ticker = CronTicker(
        f"http://127.0.0.1:{server.server_port}",
        (every,),
        tmp_path / "s.log",
        clock=lambda: next(times),
    )
    ticker.start()
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    ticker.stop()
    server.shutdown()
    assert seen[:2] == [
        ("/schedules/m/tick", "2026-07-01T10:00:00Z"),
        ("/schedules/m/tick", "2026-07-01T10:01:00Z"),
    ]
    assert "tick m 2026-07-01T10:00:00Z -> 202" in (tmp_path / "s.log").read_text()
