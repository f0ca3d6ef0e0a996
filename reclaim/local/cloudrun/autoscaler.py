"""When to start and when to stop instances (pure, so the rule is tested on its own).

Cloud Run's autoscaler (https://cloud.google.com/run/docs/about-instance-autoscaling)
keeps the average request concurrency of a service's instances at 60% of their
maximum concurrency over a one-minute window, scales from zero only on a request,
caps at max_instances, and shuts down instances that stay idle. This emulation
keeps the rule, without the window, so it is deterministic:

- scale out: on every arrival, release, start, stop and tick, the service wants
  ``ceil(demand / (0.6 x concurrency))`` routed instances (demand = requests in
  flight + requests pending), clamped to [min_instances, max_instances], and starts
  the difference. With concurrency 4 that is a second instance at the 3rd
  concurrent request, a third at the 5th: instances are added before every slot
  is taken, not when a request finds none.
- scale in: an instance with no request in flight for idle_timeout_s is shut down
  (never below min_instances). Requests go to the least-loaded instance, so under
  steady load every instance stays busy and none is idle; when load falls, the
  instances that stop getting work are the ones removed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


def desired_instances(
    demand: int, concurrency: int, target: float, min_instances: int, max_instances: int
) -> int:
    """How many routed instances `demand` concurrent requests call for."""
    wanted = math.ceil(demand / (target * concurrency)) if demand > 0 else 0
    return max(min_instances, min(max_instances, wanted))


def to_start(
    demand: int,
    active: int,
    concurrency: int,
    target: float,
    min_instances: int,
    max_instances: int,
) -> int:
    """Instances to start now, given `active` routed instances (serving or starting)."""
    wanted = desired_instances(demand, concurrency, target, min_instances, max_instances)
    return max(0, wanted - active)


@dataclass(frozen=True)
class Idle:
    """What scale-in needs to know about one routed, serving instance."""

    id: int
    in_flight: int
    idle_since: float | None
    """Monotonic time its last request ended (None: it is serving one now)."""


def idle_victims(
    instances: Iterable[Idle], now: float, idle_timeout_s: float, min_instances: int
) -> list[int]:
    """Ids of instances idle for idle_timeout_s, longest idle first, keeping min_instances."""
    views = list(instances)
    idle = [
        v
        for v in views
        if v.in_flight == 0 and v.idle_since is not None and now - v.idle_since >= idle_timeout_s
    ]
    idle.sort(key=lambda v: (v.idle_since, v.id))
    spare = max(0, len(views) - min_instances)
    return [v.id for v in idle[:spare]]
