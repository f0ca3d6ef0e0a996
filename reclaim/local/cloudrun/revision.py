"""Revisions of one service: what a deploy creates, and which one gets the traffic.

Cloud Run creates an immutable revision on every deploy and every change of
settings, environment included
(https://cloud.google.com/run/docs/managing/revisions,
https://cloud.google.com/run/docs/configuring/services/environment-variables:
"Any configuration change leads to the creation of a new revision. Subsequent
revisions will also automatically get this configuration setting unless you make
explicit updates to change it"). Its name is the service's, a five-digit
sequence number and a short random suffix, e.g. ``claim-00002-kav`` (the form
``gcloud run deploy`` reports). Every instance sees its revision's name in
K_REVISION, beside PORT, K_SERVICE and K_CONFIGURATION, which the container
runtime contract reserves
(https://cloud.google.com/run/docs/container-contract#services-env-vars).

Traffic follows the latest *ready* revision: a new revision gets requests once
its first instance listens (the default TCP startup probe); until then the
previous one keeps serving. Requests in flight on the previous revision
continue to completion
(https://cloud.google.com/run/docs/rollouts-rollbacks-traffic-migration:
"In flight requests won't be dropped"); its instances, no longer routed, get
SIGTERM once idle, then the grace, then SIGKILL
(https://cloud.google.com/run/docs/container-contract#instance-shutdown). A
request can last at most the service's request timeout, so a retired revision
has drained by then at the latest; a deploy may set a shorter drain (a local
knob for rollout tests, not a Cloud Run setting) after which busy instances are
SIGTERMed too.

The hard cut above is the best case. Cloud Run's traffic moves are "not instantaneous
... In flight requests won't be dropped and may be directed to either a new revision or
a previous revision during the transition period" (TRAFFIC_DOC): a new request can still
land on the previous revision after the new one is ready. A deploy may ask for that
transition (`transition_s`, a local knob): the previous revision hands over, its live
instances still routed, and takes every new request it has a free slot for (the worst
case of "either"), until the transition ends and it retires as above. That is how a
rollout's skew is tested: a claim of the old code meeting a job of the new one.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from reclaim.local.cloudrun.config import ConfigError

if TYPE_CHECKING:
    import subprocess

Launcher = Callable[[int, str, "Revision"], "subprocess.Popen[bytes]"]
"""(port, label, revision) -> the started process, leader of its own process group.
The revision gives the instance's environment (Revision.instance_env: K_REVISION...)."""

REVISIONS_DOC = "https://cloud.google.com/run/docs/managing/revisions"
TRAFFIC_DOC = "https://cloud.google.com/run/docs/rollouts-rollbacks-traffic-migration"
ENV_DOC = "https://cloud.google.com/run/docs/container-contract#services-env-vars"

RESERVED_ENV = ("PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION")
"""Set by the platform in every instance; a deploy may not set them (ENV_DOC)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SUFFIX_RANDOM = random.Random()


class RevisionState(StrEnum):
    DEPLOYING = "deploying"  # its first instance is starting; the previous one serves
    SERVING = "serving"  # gets every new request (100% of the traffic)
    HANDING_OVER = "handing over"  # a newer one serves; this one still gets new requests
    RETIRED = "retired"  # a newer revision serves; its instances drain, then stop
    FAILED = "failed"  # its first instance never listened; traffic stayed where it was


def revision_name(service: str, number: int, rng: random.Random = _SUFFIX_RANDOM) -> str:
    """``<service>-<00002>-<abc>``, as Cloud Run names a revision it generates."""
    suffix = "".join(rng.choice(string.ascii_lowercase) for _ in range(3))
    return f"{service}-{number:05d}-{suffix}"


def merged_env(
    previous: Mapping[str, str], changes: Mapping[str, str | None] | None
) -> dict[str, str]:
    """The new revision's environment: the previous one's with `changes` applied
    (a None value removes the variable). ConfigError for a name Cloud Run refuses."""
    env = dict(previous)
    for name, value in (changes or {}).items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigError(f"environment variable name {name!r} is not valid")
        if name in RESERVED_ENV:
            raise ConfigError(f"{name} is set by the platform (reserved: {ENV_DOC})")
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str):
            env[name] = value
        else:
            raise ConfigError(f"{name}: the value must be a string (or null to remove it)")
    return env


class Revision:
    """One immutable revision (name, environment, launcher) and where it is in a rollout.

    The mutable fields are the service's to change, under its lock."""

    def __init__(
        self,
        service: str,
        number: int,
        env: Mapping[str, str],
        launcher: Launcher,
        created: float,
        *,
        drain_timeout_s: float | None = None,
        name: str | None = None,
        transition_s: float = 0.0,
    ) -> None:
        if drain_timeout_s is not None and drain_timeout_s < 0:
            raise ConfigError(f"drain_timeout_s={drain_timeout_s} must be >= 0")
        if not 0 <= transition_s <= 3600:
            raise ConfigError(f"transition_s={transition_s} must be within 0..3600")
        self.service = service
        self.number = number
        self.name = name or revision_name(service, number)
        self.env: Mapping[str, str] = dict(env)
        self.launcher = launcher
        self.drain_timeout_s = drain_timeout_s
        """How long the revision it replaces may drain (None: the request timeout)."""
        self.transition_s = transition_s
        """How long the revision it replaces still gets new requests once this one is
        ready (0: a hard cut)."""
        self.handover_until: float | None = None
        self.created = created
        self.state = RevisionState.DEPLOYING
        self.ready_at: float | None = None
        self.retired_at: float | None = None
        self.drain_deadline: float | None = None
        self.failure: str | None = None

    def contract_env(self, port: int) -> dict[str, str]:
        """The variables the container runtime contract sets in each instance (ENV_DOC)."""
        return {
            "PORT": str(port),
            "K_SERVICE": self.service,
            "K_REVISION": self.name,
            "K_CONFIGURATION": self.service,
        }

    def instance_env(self, base: Mapping[str, str], port: int) -> dict[str, str]:
        """An instance's environment: base, this revision's variables, then the contract's."""
        return {**base, **self.env, **self.contract_env(port)}

    def view(self, now: float) -> dict[str, Any]:
        def ago(t: float | None) -> float | None:
            return None if t is None else round(now - t, 3)

        return {
            "name": self.name,
            "number": self.number,
            "state": str(self.state),
            "traffic_percent": 100 if self.state is RevisionState.SERVING else 0,
            "handover_s_left": (
                None
                if self.handover_until is None or self.state is not RevisionState.HANDING_OVER
                else round(max(self.handover_until - now, 0.0), 3)
            ),
            "env": dict(self.env),
            "age_s": ago(self.created),
            "ready_s_ago": ago(self.ready_at),
            "retired_s_ago": ago(self.retired_at),
            "failure": self.failure,
        }
