"""Throwaway HTTP functions the launcher tests run under functions-framework.

They stand in for the real submit/claim/sweep so the launcher is tested on its
own: each answers with its pid and what it received, and appends that to
$FAKE_OUT_DIR/<K_SERVICE>.jsonl when set, so a test can see pushes arrive.

For the platform tests it also counts, from inside the instance, how many
requests it is serving at once (`active`, `max_active`), holds a request for
?hold=S seconds (touching $FAKE_OUT_DIR/holding-<pid><path> once it holds), and with
FAKE_SIGTERM=ignore starts a helper process in its own
process group that ignores SIGTERM, so only a SIGKILL ends the instance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import flask

_barriers: dict[str, threading.Barrier] = {}
_lock = threading.Lock()
_active = 0
_max_active = 0
_IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
)
_helper = (
    subprocess.Popen([sys.executable, "-c", _IGNORE_TERM])
    if os.environ.get("FAKE_SIGTERM") == "ignore"
    else None
)


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
        "helper_pid": None if _helper is None else _helper.pid,
    }


def echo(request: flask.Request) -> tuple[str, int, dict[str, str]]:
    """200 with what arrived; ?barrier=key&parties=N&timeout=S first waits for N peers,
    ?hold=S first sleeps S seconds."""
    global _active, _max_active
    with _lock:
        _active += 1
        _max_active = max(_max_active, _active)
        entered = _active
    try:
        return _echo(request, entered)
    finally:
        with _lock:
            _active -= 1


def _echo(request: flask.Request, entered: int) -> tuple[str, int, dict[str, str]]:
    key = request.args.get("barrier")
    if key:
        parties = int(request.args.get("parties", "2"))
        with _lock:
            barrier = _barriers.setdefault(key, threading.Barrier(parties))
        try:
            barrier.wait(timeout=float(request.args.get("timeout", "10")))
        except threading.BrokenBarrierError:
            return json.dumps({"error": "peers never arrived", "active": entered}), 500, {}
    hold = float(request.args.get("hold", "0"))
    out_dir = os.environ.get("FAKE_OUT_DIR")
    if hold > 0:
        if out_dir:  # the app itself has it (the front's in_flight counts it earlier)
            open(
                os.path.join(out_dir, f"holding-{os.getpid()}{request.path.replace('/', '-')}"), "a"
            ).close()
        time.sleep(hold)
    seen = _seen(request)
    with _lock:
        seen.update(active=entered, max_active=_max_active)
    if out_dir and key is None:
        with _lock, open(os.path.join(out_dir, f"{seen['service']}.jsonl"), "a") as f:
            f.write(json.dumps(seen) + "\n")
    return json.dumps(seen), 200, {"Content-Type": "application/json"}
