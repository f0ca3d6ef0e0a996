"""The local Cloud Run: one front and one set of instances per service, and an admin API.

platform = Platform(host="127.0.0.1", admin_port=0)
platform.add(ServiceConfig("claim", concurrency=4, max_instances=2), launcher, port=0)
platform.start()
platform.url("claim")            # the service's one URL
platform.service("claim").reclaim(0, graceful=True)
platform.service("claim").deploy({"FLAG": "on"})   # a new revision; traffic moves when ready
platform.service("claim").revisions()             # names, which one serves, instances of each
platform.stop()                  # no instance outlives it
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reclaim.local.cloudrun.admin import AdminServer
from reclaim.local.cloudrun.config import ServiceConfig
from reclaim.local.cloudrun.front import Front
from reclaim.local.cloudrun.iam import Issuer
from reclaim.local.cloudrun.instance import Spawner
from reclaim.local.cloudrun.revision import Launcher
from reclaim.local.cloudrun.service import Service


class Platform:
    """Services by name, each behind its front; start() and stop() take them all."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        admin_port: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.host = host
        self._admin_port = admin_port
        self._log = log
        self._spawner: Spawner | None = None
        self.services: dict[str, Service] = {}
        self._fronts: dict[str, Front] = {}
        self._admin: AdminServer | None = None
        self.issuer = Issuer()
        """Signs the local cloud's ID tokens; every front checks them (cloudrun/iam.py)."""

    def add(self, config: ServiceConfig, launcher: Launcher, port: int = 0) -> Service:
        """Declare a service (validated now; its front listens on `port` right away)."""
        if config.name in self.services:
            raise ValueError(f"service {config.name!r} added twice")
        if self._spawner is None:
            self._spawner = Spawner()
        log = self._log
        service = Service(
            config,
            launcher,
            self._spawner,
            host=self.host,
            log=None if log is None else (lambda line: log(f"{config.name}: {line}")),
        )
        self.services[config.name] = service
        self._fronts[config.name] = Front(service, self.host, port, self.issuer)
        return service

    def service(self, name: str) -> Service:
        return self.services[name]

    def url(self, name: str) -> str:
        return self._fronts[name].url

    def identity_token(self, name: str, email: str) -> str:
        """An ID token for `email` that service `name`'s front accepts (the local
        `gcloud auth print-identity-token --audiences=<its URL>`)."""
        return self.issuer.mint(email, self.url(name))

    @property
    def admin_url(self) -> str | None:
        return None if self._admin is None else self._admin.url

    def start(self) -> None:
        """Fronts, admin API, then min_instances of every service (waited for)."""
        for front in self._fronts.values():
            front.start()
        if self._admin_port is not None:
            self._admin = AdminServer(self.services, self.host, self._admin_port)
            self._admin.start()
        for service in self.services.values():
            service.start(wait=False)
        for service in self.services.values():
            service.start_wait()

    def stop(self) -> None:
        """Fronts first (no new request), then every instance, then the admin API."""
        for front in self._fronts.values():
            front.stop()
        for service in self.services.values():
            service.stop()
        if self._admin is not None:
            self._admin.stop()
            self._admin = None
        if self._spawner is not None:
            self._spawner.stop()
            self._spawner = None

    def stats(self) -> dict[str, Any]:
        return {"services": {name: s.stats() for name, s in self.services.items()}}

    def all_pids(self) -> dict[str, int]:
        """label -> pid of every instance ever started, for orphan checks."""
        out: dict[str, int] = {}
        for service in self.services.values():
            out.update(service.all_pids())
        return out

    def crashed(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for service in self.services.values():
            out.update(service.crashed())
        return out
