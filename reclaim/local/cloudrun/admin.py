"""The platform's admin HTTP API (never part of any function's URL).

    GET  /stats                                      every service's figures
    GET  /services/<name>                            one service's figures
    GET  /services/<name>/revisions                  its revisions, which one serves
    POST /services/<name>/revisions                  deploy one: {"env": {"K": "v" | null},
                                                     "drain_timeout_s": 5, "transition_s": 30}
                                                     (each optional)
    POST /services/<name>/instances/<id>/reclaim     {"mode": "graceful" | "hard"}
    POST /services/<name>/instances/<id>/pause       {"unroute": false}
    POST /services/<name>/instances/<id>/resume

Bad input gets a 4xx JSON {"error", "reason"} and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reclaim.local.cloudrun.config import ConfigError
from reclaim.local.cloudrun.service import Service, UnknownInstance
from reclaim.local.json_api import JsonApiServer, Refused, json_object

MAX_BODY = 16 * 1024
_ACTIONS = ("reclaim", "pause", "resume")
_DEPLOY_FIELDS = ("env", "drain_timeout_s", "transition_s")


def _service(services: Mapping[str, Service], name: str) -> Service:
    if name not in services:
        raise Refused(404, "no such service", f"{name!r} is not one of {sorted(services)}")
    return services[name]


def _body(raw: bytes) -> dict[str, Any]:
    return json_object(raw, lambda reason: Refused(400, "bad body", reason))


def act(service: Service, instance: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """Run one admin action; what it did, as JSON."""
    if not instance.isdigit():
        raise Refused(400, "bad instance", f"instance id {instance!r} must be a number")
    instance_id = int(instance)
    try:
        if action == "reclaim":
            mode = body.get("mode", "graceful")
            if mode not in ("graceful", "hard"):
                raise Refused(400, "bad mode", "mode must be 'graceful' or 'hard'")
            service.reclaim(instance_id, graceful=mode == "graceful")
            return {"service": service.name, "instance": instance_id, "reclaim": mode}
        if action == "pause":
            unroute = body.get("unroute", False)
            if not isinstance(unroute, bool):
                raise Refused(400, "bad unroute", "unroute must be true or false")
            service.pause(instance_id, unroute=unroute)
            return {"service": service.name, "instance": instance_id, "paused": True}
        service.resume(instance_id)
        return {"service": service.name, "instance": instance_id, "paused": False}
    except UnknownInstance as exc:
        raise Refused(404, "no such instance", str(exc.args[0])) from None


def deploy(service: Service, body: dict[str, Any]) -> dict[str, Any]:
    """Deploy a revision (revision.py); its name and the service's revisions, as JSON."""
    unknown = sorted(set(body) - set(_DEPLOY_FIELDS))
    if unknown:
        raise Refused(400, "bad revision", f"unknown fields {unknown}; use {_DEPLOY_FIELDS}")
    env = body.get("env") or {}
    if not isinstance(env, dict):
        raise Refused(400, "bad revision", "env must be an object of name: value or null")
    drain = body.get("drain_timeout_s")
    if drain is not None and (isinstance(drain, bool) or not isinstance(drain, int | float)):
        raise Refused(400, "bad revision", "drain_timeout_s must be a number of seconds")
    transition = body.get("transition_s", 0.0)
    if isinstance(transition, bool) or not isinstance(transition, int | float):
        raise Refused(400, "bad revision", "transition_s must be a number of seconds")
    try:
        revision = service.deploy(env, drain_timeout_s=drain, transition_s=transition)
    except ConfigError as exc:
        raise Refused(400, "bad revision", str(exc)) from None
    return {"service": service.name, "revision": revision.name, **service.revisions()}


def _route(services: Mapping[str, Service], method: str, path: str, raw: bytes) -> Any:
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if method == "GET" and parts == ["stats"]:
        return {"services": {name: s.stats() for name, s in services.items()}}
    if method == "GET" and len(parts) == 2 and parts[0] == "services":
        return _service(services, parts[1]).stats()
    if len(parts) == 3 and parts[0] == "services" and parts[2] == "revisions":
        service = _service(services, parts[1])
        return service.revisions() if method == "GET" else deploy(service, _body(raw))
    if len(parts) == 5 and parts[0] == "services" and parts[2] == "instances":
        if parts[4] not in _ACTIONS:
            raise Refused(404, "no such action", f"choose one of {', '.join(_ACTIONS)}")
        if method != "POST":
            raise Refused(405, "method not allowed", "actions are POST")
        return act(_service(services, parts[1]), parts[3], parts[4], _body(raw))
    raise Refused(404, "no such path", path)


class AdminServer(JsonApiServer):
    """The admin API on its own port and daemon thread."""

    def __init__(self, services: Mapping[str, Service], host: str, port: int) -> None:
        def route(method: str, path: str, raw: bytes) -> tuple[int, Any]:
            return 200, _route(services, method, path, raw)

        super().__init__(route, host, port, name="cloudrun-admin", max_body=MAX_BODY)
