"""The worked example of docs/waiting.md: a render that waits on an external farm, then
fans the frames out to a GPU pool and assembles them.

`render-scene` (3 stages):
  1. submit: hand the scene to the farm with a waitpoint's URL as its callback, then
     wait (the job parks: no instance while the farm works; a 30-minute timeout);
  2. frames: read what the farm sent back (or that it timed out), then fan the frames
     out as `render-frame` jobs (their own pool: pools.json routes them to the GPUs),
     at most 4 at a time; the job parks until the last frame ends;
  3. assemble: read every frame's result, a page at a time, and make the film.

The farm is any HTTP service that takes {"scene", "frames", "callback"} and later POSTs
{"frames": [...]} to the callback; `make demo-waits` runs a fake one
(reclaim/local/demo_waits.py). Submitting twice to the farm is harmless: the request
carries the job's id as its idempotency key, and a rerun of stage 1 (a new attempt)
makes a new waitpoint, whose callback is the one that counts.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request

from reclaim import PermanentError, Pipeline, StageContext, register


def submit_to_farm(ctx: StageContext) -> None:
    wp = ctx.waitpoint(timeout=float(ctx.payload.get("farm_timeout_s", 1800)))
    body = {
        "scene": ctx.payload["scene"],
        "frames": int(ctx.payload.get("frames", 24)),
        "callback": wp.url,
    }
    req = urllib.request.Request(
        str(ctx.payload["farm_url"]),
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": ctx.job_id},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        ctx.state["farm_job"] = json.loads(resp.read()).get("id")
    ctx.wait(wp)  # parks: the farm's callback (or the timeout) resumes the next stage


def fan_frames(ctx: StageContext) -> None:
    waited = ctx.waited or {}
    if waited.get("status") != "completed":
        raise PermanentError(f"the farm did not call back ({waited.get('status')})")
    frames = list(waited["data"]["frames"])
    ctx.state["frames"] = len(frames)
    children = [{"pipeline": "render-frame", "payload": {"frame": f}} for f in frames]
    ctx.fan_out(children, on_child_failure="fail", max_running=4)


def assemble(ctx: StageContext) -> None:
    digests: list[str] = []
    token = None
    while True:
        page = ctx.children(page_token=token, page_size=100)
        digests += [str(c["result"]["digest"]) for c in page["children"]]
        token = page["next_page_token"]
        if token is None:
            break
    film = hashlib.sha256("".join(digests).encode()).hexdigest()[:16]
    ctx.result.update(frames=len(digests), film=film, farm_job=ctx.state.get("farm_job"))


def render_frame(ctx: StageContext) -> None:
    """One frame on a GPU (here: a digest of its reference)."""
    frame = ctx.payload["frame"]
    ctx.result["digest"] = hashlib.sha256(json.dumps(frame).encode()).hexdigest()[:16]


register(
    Pipeline(
        "render-scene",
        stages=[("submit", submit_to_farm), ("frames", fan_frames), ("assemble", assemble)],
    )
)
register(Pipeline("render-frame", stages=[("frame", render_frame)]))
