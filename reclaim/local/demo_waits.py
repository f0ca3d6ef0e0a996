"""`make demo-waits`: the worked example of docs/waiting.md on the local cloud.

A `render-scene` job (pipelines/render_farm.py) hands its scene to an external render
farm (a fake one here, an HTTP server on 127.0.0.1 that calls back a few seconds later)
with a waitpoint's URL as the callback, and waits: the job parks and the claim service
scales to zero while the farm works (shown from the local Cloud Run's own state). The
farm's callback completes the waitpoint; the job resumes, fans the frames out as
`render-frame` jobs to their own `gpu` pool (at most 4 at once), parks again until the
last frame ends, and assembles the film from every frame's result.

Exit status 0 only if the film was assembled from every frame, the claim service held no
instance while the job waited for the farm, and the job resumed exactly twice (once per
wait); 1 otherwise, 2 if the local cloud could not start.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

from reclaim.local.cloud import ROOT, LocalCloud

PIPELINES = "pipelines.render_farm"


@dataclass(frozen=True)
class WaitsDemoConfig:
    frames: int = 12
    farm_s: float = 6.0
    timeout_s: float = 240.0
    log_dir: Path = ROOT / ".local-cloud" / "demo-waits"


def pools_doc() -> dict[str, Any]:
    """The frames run on their own pool, as GPUs would (docs/pools.md)."""
    return {
        "pools": {
            "gpu": {
                "pipelines": ["render-frame"],
                "concurrency": 2,
                "max_instances": 2,
                "timeout_seconds": 600,
            }
        }
    }


class Farm:
    """A fake render farm: POST {"scene", "frames", "callback"} answers an id at once and,
    `delay_s` later, POSTs {"frames": [...]} to the callback (the provider's webhook)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls: list[dict[str, Any]] = []
        self.callbacks: list[int] = []
        farm = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                farm.calls.append(body)
                threading.Thread(target=farm.finish, args=(body,), daemon=True).start()
                answer = json.dumps({"id": f"farm-{len(farm.calls)}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/render"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def finish(self, job: dict[str, Any]) -> None:
        time.sleep(self.delay_s)
        frames = [{"scene": job["scene"], "frame": i} for i in range(int(job["frames"]))]
        req = urllib.request.Request(
            str(job["callback"]),
            data=json.dumps({"frames": frames}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                self.callbacks.append(resp.status)
        except OSError as exc:
            self.callbacks.append(getattr(exc, "code", -1))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _get(cloud: LocalCloud, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cloud.endpoints['submit']}{path}", timeout=30) as resp:
        return dict(json.loads(resp.read()))


def _claim_instances(cloud: LocalCloud) -> int:
    return int(cloud.service("claim").stats()["instances"]["current"])


def play(cloud: LocalCloud, farm: Farm, config: WaitsDemoConfig, out: TextIO) -> bool:
    job_id = f"scene-{uuid.uuid4().hex[:6]}"
    body = {
        "id": job_id,
        "pipeline": "render-scene",
        "payload": {"scene": "teapot", "frames": config.frames, "farm_url": farm.url},
    }
    req = urllib.request.Request(
        cloud.endpoints["jobs"],
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=60).close()
    out.write(
        f"submitted {job_id}: {config.frames} frames, the farm calls back in {config.farm_s:g} s\n"
    )
    deadline = time.monotonic() + config.timeout_s
    zero_while_farm = False
    seen: set[str] = set()
    view = _get(cloud, f"/jobs/{job_id}")
    while view["status"] not in ("done", "failed", "cancelled") and time.monotonic() < deadline:
        reason = view.get("waiting_for")
        if reason and reason not in seen:
            seen.add(reason)
            out.write(f"  {view['status']}: {reason}\n")
        park = view.get("park") or {}
        if park.get("kind") == "token" and _claim_instances(cloud) == 0 and not zero_while_farm:
            zero_while_farm = True
            out.write("  the claim service is at 0 instances while the farm works\n")
        out.flush()
        time.sleep(0.3)
        view = _get(cloud, f"/jobs/{job_id}")
    resumed = sum(e.get("event") == "resumed" for e in view.get("history") or [])
    result = view.get("result") or {}
    out.write(f"{job_id}: {view['status']}, resumed {resumed} time(s), result {result}\n")
    children = view.get("children_url") or ""
    if children:
        batch = _get(cloud, children)
        out.write(f"  frames ({children}): {batch.get('counts')}\n")
    held = (
        view["status"] == "done"
        and result.get("frames") == config.frames
        and resumed == 2
        and zero_while_farm
    )
    return held


def run_demo(config: WaitsDemoConfig, out: TextIO = sys.stdout) -> int:
    config.log_dir.mkdir(parents=True, exist_ok=True)
    pools_file = config.log_dir / "pools.json"
    pools_file.write_text(json.dumps(pools_doc(), indent=2))
    cloud = LocalCloud.for_tests(
        log_dir=config.log_dir / "logs",
        pools_file=pools_file,
        stale_seconds=10.0,
        sweep_interval_seconds=2.0,
        idle_timeout_seconds=2.0,  # an idle claim instance goes soon: watch it scale to zero
        function_env={"RECLAIM_PIPELINE_MODULES": PIPELINES},
    )
    farm = Farm(config.farm_s)
    try:
        cloud.start()
    except Exception as exc:  # a busy port, a missing binary: say it and stop
        farm.close()
        out.write(f"the local cloud could not start: {exc}\n")
        return 2
    try:
        out.write(f"waitpoints at {cloud.endpoints['waitpoints']}; frames on the gpu pool\n")
        held = play(cloud, farm, config, out)
    finally:
        cloud.stop()
        farm.close()
    out.write(
        "the render waited for the farm and its frames, holding no instance\n"
        if held
        else "FAILED\n"
    )
    return 0 if held else 1


def main(argv: list[str] | None = None) -> int:
    d = WaitsDemoConfig()
    p = argparse.ArgumentParser(
        prog="python -m reclaim.local.demo_waits", description=__doc__.split("\n")[0]
    )
    p.add_argument("--frames", type=int, default=d.frames)
    p.add_argument("--farm-seconds", type=float, default=d.farm_s)
    a = p.parse_args(argv)
    if a.frames < 1 or a.farm_seconds < 0:
        p.error("--frames >= 1 and --farm-seconds >= 0")
    return run_demo(WaitsDemoConfig(a.frames, a.farm_seconds))


if __name__ == "__main__":
    sys.exit(main())
