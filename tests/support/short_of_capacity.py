"""The kwok provider of a cloud that can run short of capacity, for tests of what the operator
does while a pool cannot launch (a spot pool without spot capacity).

``ShortOfCapacity`` is the product's kwok provider (hybridgpu.cloud.kwok) whose growth of a
pool named in its ``short`` set raises CapacityUnavailable, as EC2's
InsufficientInstanceCapacity does; the Nodes already there stay. A Reconciler builds it for
pools of type ``fake`` given ``OperatorOptions(fake_provider=FACTORY)``; the test reaches the
instance it built with ``reconciler.providers.for_spec(spec)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hybridgpu.cloud.base import CapacityUnavailable
from hybridgpu.cloud.kwok import KwokProvider
from hybridgpu.models.pool import GPUPoolSpec

FACTORY = "support.short_of_capacity:ShortOfCapacity"


class ShortOfCapacity(KwokProvider):
    """A KwokProvider (1 s boot by default) whose pools in ``short`` cannot grow."""

    def __init__(self, clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        kwargs.setdefault("boot_delay_seconds", 1.0)
        super().__init__(clock, **kwargs)
        self.short: set[str] = set()
        """Pools the cloud has no capacity for now."""

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        if pool in self.short and nodes > self.target(pool, spec):
            raise CapacityUnavailable(f"InsufficientInstanceCapacity: no capacity for {pool}")
        super().set_target(pool, spec, nodes)
