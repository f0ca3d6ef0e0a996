"""The local Cloud Run platform over HTTP, with real instance processes
(fake_functions.py under functions-framework): every behaviour Cloud Run documents
that the local cloud reproduces. Assertions are on what happened, in order; the
only durations asserted are lower bounds the platform itself enforces (a grace)."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.cloud import ROOT
from reclaim.local.cloudrun import Platform, Revision, ServiceConfig
from reclaim.local.cloudrun.config import NO_INSTANCE_TEXT, TIMEOUT_TEXT
from reclaim.local.procs import function_args, group_pids, spawn

FAKE = ROOT / "tests" / "local" / "fake_functions.py"
Make = Callable[..., Platform]


def _get(url: str, timeout: float = 30) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, body


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "x/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until(what: str, fn: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"never saw {what} within {timeout}s")


def _seen(out_dir: Path) -> list[dict[str, Any]]:
    path = out_dir / "svc.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    """make(sigterm='exit'|'ignore', **ServiceConfig fields) -> a started platform."""
    made: list[Platform] = []

    def _make(sigterm: str = "exit", **fields: Any) -> Platform:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "WORKERS": "1",
            "THREADS": str(fields.get("concurrency", 80)),
            "K_SERVICE": "svc",
            "FAKE_OUT_DIR": str(tmp_path),
            "FAKE_SIGTERM": sigterm,
        }

        def launcher(port: int, label: str, revision: Revision) -> Any:
            args = function_args(FAKE, "echo", "127.0.0.1", port)
            log = tmp_path / f"{label}.log"
            return spawn(
                args,
                env=revision.instance_env(env, port),
                log_path=log,
                cwd=ROOT,
                long_lived_thread=True,
            )

        platform = Platform(admin_port=0)
        platform.add(ServiceConfig("svc", **fields), launcher)
        made.append(platform)
        platform.start()
        return platform

    yield _make
    for platform in made:
        platform.stop()


def _stats(p: Platform) -> dict[str, Any]:
    return p.service("svc").stats()


def test_a_cold_start_from_zero(make: Make) -> None:
    p = make(concurrency=2, max_instances=2)
    assert _stats(p)["instances"]["current"] == 0 and p.service("svc").pids() == {}
    status, seen = _get(p.url("svc") + "/first")
    assert status == 200 and seen["path"] == "/first"
    s = _stats(p)
    assert s["instances"]["current"] == 1 and s["cold_starts"] == 1
    assert len(s["startup_s"]) == 1 and s["startup_s"][0] > 0
    assert s["instance_list"][0]["startup_s"] == s["startup_s"][0]
    assert list(p.service("svc").pids().values()) == [seen["pgid"]]


def test_an_instance_never_gets_more_than_its_concurrency(make: Make) -> None:
    c = 2
    p = make(concurrency=c, max_instances=1, pending_timeout_s=30)
    url = p.url("svc")
    # c requests can meet inside the one instance: it really serves them in parallel
    key = uuid.uuid4().hex
    with ThreadPoolExecutor(c) as pool:
        met = list(pool.map(lambda _: _get(f"{url}/?barrier={key}&parties={c}"), range(c)))
    assert [s for s, _ in met] == [200] * c
    # c+1 never can: the (c+1)th waits in the pending queue, not in the instance
    key = uuid.uuid4().hex
    q = f"{url}/?barrier={key}&parties={c + 1}&timeout=1.5"
    with ThreadPoolExecutor(c + 1) as pool:
        broken = list(pool.map(lambda _: _get(q), range(c + 1)))
    assert [s for s, _ in broken] == [500] * (c + 1)
    assert all(b["active"] <= c for _, b in broken)
    # c+3 slow requests: all served, never more than c at once inside the instance
    with ThreadPoolExecutor(c + 3) as pool:
        slow = list(pool.map(lambda _: _get(f"{url}/?hold=0.4"), range(c + 3)))
    assert [s for s, _ in slow] == [200] * (c + 3)
    assert max(b["max_active"] for _, b in slow) == c
    s = _stats(p)
    assert s["peak_in_flight_per_instance"] == c and s["pending_waits"]["count"] >= 3
    assert s["instances"]["peak"] == 1


def test_scale_out_before_every_slot_is_taken(make: Make) -> None:
    """concurrency 4 at 60%: a 2nd instance starts at the 3rd concurrent request."""
    p = make(concurrency=4, max_instances=3, pending_timeout_s=30)
    with ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda _: _get(p.url("svc") + "/?hold=1.5"), range(3)))
    assert [s for s, _ in done] == [200] * 3
    s = _stats(p)
    assert s["cold_starts"] == 2 and s["instances"]["peak"] == 2


def test_requests_pend_then_get_the_platforms_429(make: Make, tmp_path: Path) -> None:
    # warm first: a cold start longer than the 1 s pending timeout (a loaded machine)
    # would refuse the busy request itself
    p = make(concurrency=1, max_instances=1, min_instances=1, pending_timeout_s=1.0)
    url = p.url("svc")
    _until("the warm instance serving", lambda: _stats(p)["instances"]["serving"] == 1)
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(_get, f"{url}/busy?hold=4")
        _until("the instance busy", lambda: _stats(p)["in_flight"] == 1)
        status, body = _get(f"{url}/refused")
        assert (status, body.strip()) == (429, NO_INSTANCE_TEXT)
        assert busy.result()[0] == 200
    assert [x["path"] for x in _seen(tmp_path)] == ["/busy"]  # the app never saw it
    s = _stats(p)
    assert s["requests"]["refused"] == 1 and s["pending_waits"]["max_s"] >= 0.9


def test_idle_instances_get_sigterm_and_exit_then_scale_to_zero(make: Make) -> None:
    p = make(concurrency=2, max_instances=2, idle_timeout_s=0.5, shutdown_grace_s=5)
    status, seen = _get(p.url("svc") + "/")
    assert status == 200
    _until("scale to zero", lambda: _stats(p)["instances"]["current"] == 0)
    s = _stats(p)
    (inst,) = s["instance_list"]
    assert inst["shutdown"]["reason"] == "idle" and inst["shutdown"]["outcome"] == "exited"
    assert s["scale_ins"] == 1 and s["shutdowns"] == {"exited": 1}
    assert group_pids(seen["pgid"]) == []
    # a new request starts from zero again
    assert _get(p.url("svc") + "/again")[0] == 200 and _stats(p)["cold_starts"] == 2


def test_an_instance_that_ignores_sigterm_is_killed_after_the_grace(make: Make) -> None:
    p = make("ignore", concurrency=1, max_instances=1, idle_timeout_s=0.5, shutdown_grace_s=1.5)
    status, seen = _get(p.url("svc") + "/")
    assert status == 200 and seen["helper_pid"]
    _until("the shutdown", lambda: _stats(p)["instances"]["current"] == 0)
    (inst,) = _stats(p)["instance_list"]
    assert inst["shutdown"]["outcome"] == "killed after grace"
    assert inst["shutdown"]["seconds"] >= 1.5  # SIGKILL came only after the grace
    assert group_pids(seen["pgid"]) == []  # the helper that ignored SIGTERM too
    assert not _alive(seen["helper_pid"])


def test_min_instances_are_warm_and_never_scaled_in(make: Make) -> None:
    p = make(concurrency=1, max_instances=2, min_instances=1, idle_timeout_s=0.2)
    assert _stats(p)["instances"]["serving"] == 1  # before any request
    time.sleep(1.0)  # five idle periods
    assert _stats(p)["instances"]["serving"] == 1 and _stats(p)["scale_ins"] == 0


def test_a_busy_instance_reclaimed_gracefully_then_hard(make: Make, tmp_path: Path) -> None:
    p = make(concurrency=1, max_instances=1, shutdown_grace_s=1.0, pending_timeout_s=20)
    svc, url = p.service("svc"), p.url("svc")
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(_get, f"{url}/held?hold=30")
        _until("a request in flight", lambda: _stats(p)["in_flight"] == 1)
        # the app itself holds it (the front counts it in flight before it is proxied on):
        # only then can the instance not finish it within the grace
        _until("the instance holding it", lambda: any(tmp_path.glob("holding-*-held")))
        (first,) = svc.pids()
        svc.reclaim(first, graceful=True)
        # unrouted at once: the next request gets a replacement, not the reclaimed one
        status, seen = _get(f"{url}/next")
        assert status == 200 and seen["pgid"] != svc.all_pids()["svc-0"]
        assert held.result()[0] == 503  # its request could not finish within the grace
    gone = _ended(p, first)
    assert (gone["reason"], gone["outcome"]) == ("reclaim", "killed after grace")
    assert _stats(p)["reclaims"] == {"graceful": 1, "hard": 0}
    # hard: SIGKILL at once, through the admin API
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_get, f"{url}/held?hold=30")
        _until("a request in flight", lambda: _stats(p)["in_flight"] == 1)
        (second,) = svc.pids()
        status, body = _post(
            f"{p.admin_url}/services/svc/instances/{second}/reclaim", {"mode": "hard"}
        )
        assert (status, body["reclaim"]) == (200, "hard")
        assert held.result()[0] == 503
    assert _ended(p, second)["outcome"] == "killed"
    assert _stats(p)["reclaims"] == {"graceful": 1, "hard": 1}


def test_the_admin_api_refuses_bad_input(make: Make) -> None:
    p = make(concurrency=1, max_instances=1)
    admin = p.admin_url
    assert _get(f"{admin}/stats")[1]["services"]["svc"]["service"] == "svc"
    cases = [
        (f"{admin}/services/nope/instances/0/reclaim", {}, 404, "no such service"),
        (f"{admin}/services/svc/instances/7/reclaim", {}, 404, "no such instance"),
        (f"{admin}/services/svc/instances/x/reclaim", {}, 400, "bad instance"),
        (f"{admin}/services/svc/instances/0/reclaim", {"mode": "soft"}, 400, "bad mode"),
        (f"{admin}/services/svc/instances/0/explode", {}, 404, "no such action"),
    ]
    for url, body, code, error in cases:
        status, answer = _post(url, body)
        assert (status, answer["error"]) == (code, error) and answer["reason"]
    assert _stats(p)["reclaims"] == {"graceful": 0, "hard": 0}


def test_a_request_cut_at_its_deadline_is_504_while_the_instance_goes_on(
    make: Make, tmp_path: Path
) -> None:
    # warm first: the deadline counts from arrival, so a cold start longer than 1 s (a
    # loaded machine) would cut the request before any instance held it
    p = make(concurrency=1, max_instances=1, min_instances=1, timeout_s=1.0, pending_timeout_s=30)
    url = p.url("svc")
    _until("the warm instance serving", lambda: _stats(p)["instances"]["serving"] == 1)
    status, body = _get(f"{url}/slow?hold=3")
    assert (status, body.strip()) == (504, TIMEOUT_TEXT)
    s = _stats(p)
    assert s["requests"]["timed_out"] == 1 and s["in_flight"] == 1  # it still holds its slot
    _until("the instance to finish it", lambda: [x["path"] for x in _seen(tmp_path)] == ["/slow"])
    _until("its slot back", lambda: _stats(p)["in_flight"] == 0)
    assert _get(f"{url}/after")[0] == 200


def test_billing_adds_up(make: Make) -> None:
    p = make(concurrency=1, max_instances=1, idle_timeout_s=60)
    for _ in range(3):
        assert _get(p.url("svc") + "/?hold=0.25")[0] == 200
    s = _stats(p)
    bill = s["billing"]
    startup = s["startup_s"][0]
    assert bill["instance_seconds"] >= 3 * 0.25 + startup
    assert bill["instance_seconds"] >= bill["unrounded_s"]
    assert bill["instance_seconds"] <= bill["unrounded_s"] + 0.1 * bill["periods"] + 1e-6
    assert round(bill["instance_seconds"] * 10, 6).is_integer()  # 100 ms increments
    assert bill["periods"] >= 3  # idle gaps between the requests are not billed


def test_pause_keeps_a_hung_instance_and_resume_routes_to_it_again(make: Make) -> None:
    p = make(concurrency=1, max_instances=1, pending_timeout_s=20)
    svc = p.service("svc")
    status, first = _get(p.url("svc") + "/")
    (index,) = svc.pids()
    svc.pause(index, unroute=True)
    assert all(_state(pid) == "T" for pid in group_pids(first["pgid"]))
    status, other = _get(p.url("svc") + "/")  # a replacement beyond max: it was unrouted
    assert status == 200 and other["pgid"] != first["pgid"]
    svc.resume(index)
    assert _get(svc.url_of(index) + "/")[1]["pgid"] == first["pgid"]


def test_a_crashed_instance_is_replaced(make: Make) -> None:
    p = make(concurrency=1, max_instances=1)
    status, first = _get(p.url("svc") + "/")
    os.killpg(first["pgid"], signal.SIGKILL)
    _until("the instance to die", lambda: not group_pids(first["pgid"]))
    # the platform notices the exit on its own (a request routed before that may meet the
    # dead instance, as one can on Cloud Run): the state the test starts from
    _until("the platform to see the crash", lambda: _stats(p)["crashes"] == 1)
    status, second = _get(p.url("svc") + "/")
    assert status == 200 and second["pgid"] != first["pgid"]
    assert _stats(p)["crashes"] == 1 and "svc-0" in p.crashed()


def _ended(p: Platform, instance_id: int) -> dict[str, Any]:
    """The instance's shutdown record, once its processes are gone."""

    def _shutdown() -> Any:
        inst = next(i for i in _stats(p)["instance_list"] if i["id"] == instance_id)
        return inst["shutdown"] if inst["state"] == "gone" else None

    return dict(_until(f"instance {instance_id} gone", _shutdown))


def _alive(pid: int) -> bool:
    try:
        return _state(pid) != "Z"
    except FileNotFoundError:
        return False


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rfind(")") + 2]
