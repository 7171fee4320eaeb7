"""When owned GPUs free up: the arithmetic behind waiting instead of launching (pure).

``decide()`` describes each owned node to this forecast: how many GPUs are free now (less
those already promised to waiting pods) and when the others come back. A Job that states its
expected duration (annotation ``hybridgpu.io/expected-duration``) gives its GPUs back when
its run should end, at once when it is past that; for critical and standard work a
preemptible Job gives them up as soon as it may be preempted (``preemption.minRuntime``).
Work whose end nobody knows holds its GPUs for good as far as the forecast goes, so a cluster
without annotations only waits for preemptible Jobs about to become movable.

``earliest`` answers "which owned node of these pools has k GPUs free soonest, and when".
Per node the forecast keeps the earliest time each k = 1..capacity GPUs are free, and per
(pool, k) a heap of those times. A node that lost GPUs (a pod placed, GPUs promised) is
described again only when its old entry reaches the top of a heap; a node that gained some
(Jobs moved off it) at once, so a query never misses a sooner node. A query costs O(log
nodes) amortized.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

NodeView = tuple[str, int, int, tuple[float, ...]]
"""(pool, GPUs per node, GPUs free now less those promised, [when each GPU held comes back]
in time order: a pod of 2 GPUs that ends at t gives t twice)."""


@dataclass(slots=True)
class OwnedForecast:
    """Earliest times owned nodes have k GPUs free (seconds since the epoch)."""

    now: float
    describe: Callable[[str], NodeView]
    """What a node offers now; asked when the node is added and again after ``touch``."""
    _versions: dict[str, int] = field(default_factory=dict)
    _stale: set[str] = field(default_factory=set)
    _heaps: dict[str, list[list[tuple[float, str, int]]]] = field(default_factory=dict)
    """Per pool, the heap of (time, node, version) for k GPUs at index k - 1."""

    def add(self, name: str) -> None:
        """Describe a node (again) now."""
        self._stale.discard(name)
        version = self._versions.get(name, -1) + 1
        self._versions[name] = version
        pool, capacity, free, releases = self.describe(name)
        if free <= 0 and not releases:
            return  # nothing free, nothing coming back
        heaps = self._heaps.get(pool)
        if heaps is None:
            heaps = self._heaps[pool] = []
        while len(heaps) < capacity:
            heaps.append([])
        # Heap k - 1 gets when the node has k GPUs free: now for the free ones, then when
        # the (k - free)-th GPU held comes back. One entry per distinct time, shared. (One
        # loop over the sizes measured faster than a loop per kind of entry.)
        entry = (self.now, name, version)
        for k in range(1, capacity + 1):
            if k > free:
                back = k - free - 1
                if back >= len(releases):
                    break  # fewer GPUs come back than the node lacks for this size
                at = releases[back]
                if at > entry[0]:
                    entry = (at, name, version)
            heapq.heappush(heaps[k - 1], entry)

    def touch(self, name: str, *, gained: bool) -> None:
        """The node changed: described again at once when it ``gained`` GPUs, else when its
        entry is next looked at (it can only have become later)."""
        if name not in self._versions:
            return
        if gained:
            self.add(name)
        else:
            self._stale.add(name)

    def earliest(self, pools: Iterable[str], gpus: int) -> tuple[float, str] | None:
        """The node of ``pools`` that has ``gpus`` GPUs free soonest: (time, node name)."""
        best: tuple[float, str] | None = None
        for pool in pools:
            heaps = self._heaps.get(pool)
            if heaps is None or not 0 < gpus <= len(heaps):
                continue
            heap = heaps[gpus - 1]
            versions = self._versions
            stale = self._stale
            while heap:
                at, name, version = heap[0]
                if versions[name] != version:
                    heapq.heappop(heap)  # superseded by a newer entry
                    continue
                if name in stale:
                    self.add(name)  # its entry may be too early: look again
                    continue
                if best is None or (at, name) < best:
                    best = (at, name)
                break
        return best
