"""Throwaway HTTP functions the launcher tests run under functions-framework.

They stand in for the real submit/claim/sweep so the launcher is tested on its
own: each answers with its pid and what it received, and appends that to
$FAKE_OUT_DIR/<K_SERVICE>.jsonl when set, so a test can see pushes arrive.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import flask

_barriers: dict[str, threading.Barrier] = {}
_lock = threading.Lock()


def _seen(request: flask.Request) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "pgid": os.getpgrp(),  # = the instance's pid as the launcher knows it
        "service": os.environ.get("K_SERVICE"),
        "revision": os.environ.get("K_REVISION"),
        "method": request.method,
        "path": request.path,
        "user_agent": request.headers.get("User-Agent", ""),
        "content_type": request.headers.get("Content-Type", ""),
        "body": request.get_data(as_text=True),
        "threads": os.environ.get("THREADS"),
        "storage": os.environ.get("STORAGE_EMULATOR_HOST"),
        "project": os.environ.get("RECLAIM_PROJECT"),
    }


def echo(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    """200 with what arrived; ?barrier=key&parties=N&timeout=S first waits for N peers."""
    key = request.args.get("barrier")
    if key:
        parties = int(request.args.get("parties", "2"))
        with _lock:
            barrier = _barriers.setdefault(key, threading.Barrier(parties))
        try:
            barrier.wait(timeout=float(request.args.get("timeout", "10")))
        except threading.BrokenBarrierError:
            return json.dumps({"error": "peers never arrived"}), 500, {}
    seen = _seen(request)
    out_dir = os.environ.get("FAKE_OUT_DIR")
    if out_dir and key is None:
        with _lock, open(os.path.join(out_dir, f"{seen['service']}.jsonl"), "a") as f:
            f.write(json.dumps(seen) + "\n")
    return json.dumps(seen), 200, {"Content-Type": "application/json"}
