"""The local Cloud Run platform: fronts that route, cap, queue, scale and reclaim.

Modules: config (settings and the documented numbers), autoscaler (when to start
and stop instances), pending (the pending queue), billing (request-based billing),
instance (process lifecycle and signals), revision (what a deploy creates and
which revision gets the traffic), service (one service's instances and
slots), front (the service's URL), admin (the admin HTTP API), platform (all of
it together). docs/local-cloud.md, "The local Cloud Run platform", describes the
behaviour and the Cloud Run pages it follows.
"""

from reclaim.local.cloudrun.config import ConfigError, ServiceConfig
from reclaim.local.cloudrun.platform import Platform
from reclaim.local.cloudrun.revision import Revision, RevisionState
from reclaim.local.cloudrun.service import Service, UnknownInstance

__all__ = [
    "ConfigError",
    "Platform",
    "Revision",
    "RevisionState",
    "Service",
    "ServiceConfig",
    "UnknownInstance",
]
