"""Revisions on the local Cloud Run, over HTTP, with real instance processes
(fake_functions.py under functions-framework): a deploy starts a new revision, new
requests reach it once its first instance listens, requests in flight finish on the
old one, whose instances then get SIGTERM, the grace and SIGKILL. Every step is
arranged by state: a request is held inside an instance by a barrier that the test
releases by calling that instance directly, and a new revision's start-up is held by
a gate file."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from reclaim.local.cloud import ROOT
from reclaim.local.cloudrun import Platform, Revision, ServiceConfig
from reclaim.local.procs import function_args, group_pids, spawn
from tests import polling

FAKE = ROOT / "tests" / "local" / "fake_functions.py"
NAME = re.compile(r"svc-(\d{5})-[a-z]{3}")
Launcher = Callable[[int, str, Revision], Any]


def _call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def wait_for(what: str, fn: Callable[[], Any]) -> Any:
    return polling.wait_for(what, fn, timeout=60, interval=0.05)


class Rig:
    """One service `svc` on a started platform, and the launchers of its revisions."""

    def __init__(self, tmp_path: Path, sigterm: str, **fields: Any) -> None:
        self.tmp = tmp_path
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "WORKERS": "1",
            "THREADS": str(fields.get("concurrency", 80)),
            "FAKE_SIGTERM": sigterm,
        }
        self.platform = Platform(admin_port=0)
        self.svc = self.platform.add(ServiceConfig("svc", **fields), self.launcher())
        self.platform.start()

    def launcher(self, target: str = "echo", gate: Path | None = None) -> Launcher:
        """functions-framework serving `target`; with a gate, it waits for that file
        to exist before it starts (a start-up the test releases)."""

        def launch(port: int, label: str, revision: Revision) -> Any:
            args = function_args(FAKE, target, "127.0.0.1", port)
            if gate is not None:
                wait = f'while [ ! -e "{gate}" ]; do sleep 0.02; done; exec "$@"'
                args = ["sh", "-c", wait, "sh", *args]
            return spawn(
                args,
                env=revision.instance_env(self.env, port),
                log_path=self.tmp / f"{label}.log",
                cwd=ROOT,
                long_lived_thread=True,
            )

        return launch

    @property
    def url(self) -> str:
        return self.platform.url("svc")

    def revisions(self) -> dict[str, Any]:
        return _call(f"{self.platform.admin_url}/services/svc/revisions")[1]

    def revision(self, name: str) -> dict[str, Any]:
        return next(r for r in self.revisions()["revisions"] if r["name"] == name)

    def instance(self, instance_id: int) -> dict[str, Any]:
        insts = self.svc.stats()["instance_list"]
        return next(i for i in insts if i["id"] == instance_id)

    def serving(self, name: str) -> bool:
        return self.revisions()["serving"] == name

    def drained(self, name: str) -> bool:
        return bool(self.revision(name)["drained"])

    def held(self, pool: ThreadPoolExecutor, key: str) -> Future[tuple[int, Any]]:
        """A request held inside an instance until release(key) meets it there."""
        future = pool.submit(_call, f"{self.url}/held?barrier={key}&parties=2&timeout=90")
        wait_for("the held request in flight", lambda: self.svc.stats()["in_flight"] == 1)
        return future

    def release(self, instance_id: int, key: str) -> None:
        """Meet the held request at its barrier, calling its instance directly."""
        status, _ = _call(f"{self.svc.url_of(instance_id)}/?barrier={key}&parties=2")
        assert status == 200


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def _make(sigterm: str = "exit", **fields: Any) -> Rig:
        made.append(Rig(tmp_path, sigterm, **fields))
        return made[-1]

    yield _make
    for r in made:
        r.platform.stop()


def test_a_rollout_while_a_request_is_in_flight(rig: Callable[..., Rig], tmp_path: Path) -> None:
    r = rig(concurrency=2, max_instances=2, shutdown_grace_s=5, pending_timeout_s=60)
    first = r.revisions()["serving"]
    assert NAME.fullmatch(first) and NAME.fullmatch(first).group(1) == "00001"  # type: ignore[union-attr]
    with ThreadPoolExecutor(2) as pool:
        key = uuid.uuid4().hex
        held = r.held(pool, key)
        (old_id,) = r.svc.pids()
        gate = tmp_path / "gate"
        second = r.svc.deploy({"FAKE_SIGTERM": "ignore"}, launcher=r.launcher(gate=gate)).name
        assert NAME.fullmatch(second) and second.split("-")[1] == "00002"
        # deploying: its instance waits at the gate, the old revision takes new requests
        assert r.revision(second)["state"] == "deploying" and r.serving(first)
        status, seen = _call(f"{r.url}/while-deploying")
        assert status == 200 and seen["revision"] == first and seen["helper_pid"] is None
        gate.touch()
        wait_for("the new revision serving", lambda: r.serving(second))
        # the old instance keeps its request in flight, unrouted: new ones reach the new one
        old = r.instance(old_id)
        assert (old["state"], old["routed"], old["draining"], old["in_flight"]) == (
            "serving",
            False,
            True,
            1,
        )
        assert r.revision(first)["state"] == "retired" and not r.drained(first)
        after = [_call(f"{r.url}/after-{i}") for i in range(3)]
        assert [(s, b["revision"]) for s, b in after] == [(200, second)] * 3
        assert all(b["helper_pid"] is not None for _, b in after)  # the new env is in effect
        assert r.revision(second)["traffic_percent"] == 100
        assert r.revision(first)["traffic_percent"] == 0
        # the held request finishes on the old revision; only then is the old one stopped
        assert r.instance(old_id)["shutdown"] is None
        r.release(old_id, key)
        status, body = held.result()
        assert status == 200 and body["revision"] == first
    wait_for("the old revision drained", lambda: r.drained(first))
    gone = r.instance(old_id)["shutdown"]
    assert (gone["reason"], gone["outcome"]) == ("rollout", "exited")
    s = r.svc.stats()
    assert s["requests"]["lost"] == 0 and s["requests"]["refused"] == 0
    assert s["requests"]["answered"] == s["requests"]["received"] == 5
    assert s["deploys"] == 1


def test_old_instances_that_ignore_sigterm_are_killed_after_the_grace(
    rig: Callable[..., Rig],
) -> None:
    r = rig("ignore", concurrency=1, max_instances=1, shutdown_grace_s=1.5)
    status, seen = _call(f"{r.url}/")
    assert status == 200 and seen["helper_pid"]
    (old_id,) = r.svc.pids()
    first = seen["revision"]
    second = _call(f"{r.platform.admin_url}/services/svc/revisions", {"env": {"X": "1"}})[1]
    assert second["revision"] != first and second["latest"] == second["revision"]
    wait_for("the old revision drained", lambda: r.drained(first))
    gone = r.instance(old_id)["shutdown"]
    assert (gone["reason"], gone["outcome"]) == ("rollout", "killed after grace")
    assert gone["seconds"] >= 1.5  # SIGKILL came only after the grace
    assert group_pids(seen["pgid"]) == []  # its helper that ignored SIGTERM too
    assert _call(f"{r.url}/")[1]["revision"] == second["revision"]


def test_a_drain_time_sigterms_busy_old_instances(rig: Callable[..., Rig]) -> None:
    """drain_timeout_s=0: the old revision's busy instance is SIGTERMed when the new one
    serves; its request, stuck past the grace, is lost (503) as on any shutdown."""
    r = rig("ignore", concurrency=1, max_instances=1, shutdown_grace_s=1.0, pending_timeout_s=60)
    with ThreadPoolExecutor(1) as pool:
        held = r.held(pool, uuid.uuid4().hex)
        (old_id,) = r.svc.pids()
        first = r.revisions()["serving"]
        second = r.svc.deploy(drain_timeout_s=0).name
        wait_for("the new revision serving", lambda: r.serving(second))
        assert held.result()[0] == 503
    wait_for("the old revision drained", lambda: r.drained(first))
    gone = r.instance(old_id)["shutdown"]
    assert (gone["reason"], gone["outcome"]) == ("rollout", "killed after grace")
    assert r.revision(second)["env"] == {} and r.svc.stats()["requests"]["lost"] == 1


def test_a_revision_that_cannot_start_fails_and_traffic_stays(rig: Callable[..., Rig]) -> None:
    r = rig(concurrency=1, max_instances=1)
    first = _call(f"{r.url}/")[1]["revision"]
    broken = r.svc.deploy({"A": "1"}, launcher=r.launcher(target="no_such_function")).name
    wait_for("the broken revision failed", lambda: r.revision(broken)["state"] == "failed")
    assert r.revision(broken)["failure"] and r.serving(first)
    assert r.revision(first)["state"] == "serving" and r.revision(first)["instances"]["serving"]
    assert _call(f"{r.url}/")[1]["revision"] == first
    # the next deploy builds on the latest revision's settings, the failed one's (as the
    # service's template on Cloud Run), here with the code fixed: it serves
    third = r.svc.deploy({"B": "2"}, launcher=r.launcher()).name
    assert third.split("-")[1] == "00003"
    wait_for("the third revision serving", lambda: r.serving(third))
    assert r.revision(third)["env"] == {"A": "1", "B": "2"}
    assert _call(f"{r.url}/")[1]["revision"] == third
    assert r.svc.deploy({"A": None}).env == {"B": "2"}  # null removes a variable


def test_deploying_refuses_bad_input_and_deploys_nothing(rig: Callable[..., Rig]) -> None:
    r = rig(concurrency=1, max_instances=1)
    url = f"{r.platform.admin_url}/services/svc/revisions"
    cases = [
        ({"env": {"K_REVISION": "mine"}}, 400, "reserved"),
        ({"env": {"PORT": "1"}}, 400, "reserved"),
        ({"env": {"1BAD": "x"}}, 400, "not valid"),
        ({"env": {"A": 1}}, 400, "string"),
        ({"env": ["A=1"]}, 400, "object"),
        ({"drain_timeout_s": -1}, 400, ">= 0"),
        ({"drain_timeout_s": "soon"}, 400, "number"),
        ({"image": "x"}, 400, "unknown fields"),
    ]
    for body, code, reason in cases:
        status, answer = _call(url, body)
        assert (status, answer["error"]) == (code, "bad revision"), body
        assert reason in answer["reason"], answer
    status, answer = _call(f"{r.platform.admin_url}/services/nope/revisions", {})
    assert (status, answer["error"]) == (404, "no such service")
    listing = r.revisions()
    assert [x["number"] for x in listing["revisions"]] == [1]
    assert r.svc.stats()["deploys"] == 0 and r.svc.stats()["instances"]["started"] == 0
