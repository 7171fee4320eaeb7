"""When owned GPUs free up: the arithmetic behind waiting instead of launching (pure).

``decide()`` describes each owned node to this forecast: how many GPUs are free now (less
those already promised to waiting pods) and when the others come back. A Job that states its
expected duration (annotation ``hybridgpu.io/expected-duration``) gives its GPUs back when
its run should end, at once when it is past that; for critical and standard work a
preemptible Job gives them up as soon as it may be preempted (``preemption.minRuntime``).
Work whose end nobody knows holds its GPUs for good as far as the forecast goes, so a cluster
without annotations only waits for preemptible Jobs about to become movable.

``earliest`` answers "which owned node of these pools has k GPUs free soonest, and when".
Per (pool, k) the forecast keeps a heap of when each node has k GPUs free, built when pods of
k GPUs first ask (a tick asks for a few sizes, not every size up to a node's GPUs). A node
that lost GPUs (a pod placed, GPUs promised) is described again only when one of its old
entries reaches the top of a heap, and its entry is made again in that heap alone; a node
that gained some (Jobs moved off it) is described and entered in every heap at once, so a
query never misses a sooner node. A query costs O(log nodes) amortized.
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
    """What a node offers now; asked when the node is added, after ``touch`` when it gained
    GPUs, and when an entry of a node that lost some is looked at."""
    _versions: dict[str, int] = field(default_factory=dict)
    """Per node, bumped at each change: entries of an older version may be too early."""
    _views: dict[str, tuple[int, NodeView]] = field(default_factory=dict)
    """Per node, the version it was last described at and what it said then."""
    _nodes: dict[str, list[str]] = field(default_factory=dict)
    """Per pool, its nodes in the order they were added."""
    _heaps: dict[tuple[str, int], list[tuple[float, str, int]]] = field(default_factory=dict)
    """Per (pool, k) asked for so far, the heap of (time, node, version) for k GPUs."""
    _entered: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    """Per heap, the version of each node's newest entry (older ones are dropped unseen)."""

    def add(self, name: str) -> None:
        """Describe a node (again) now, and enter it in every heap."""
        version = self._versions.get(name, -1) + 1
        self._versions[name] = version
        view = self.describe(name)
        pool = view[0]
        if name not in self._views:
            self._nodes.setdefault(pool, []).append(name)
        self._views[name] = (version, view)
        for (of_pool, gpus), heap in self._heaps.items():
            if of_pool == pool:
                self._entered[of_pool, gpus][name] = version
                at = self._time(view, gpus)
                if at is not None:
                    heapq.heappush(heap, (at, name, version))

    def touch(self, name: str, *, gained: bool) -> None:
        """The node changed: described again at once when it ``gained`` GPUs, else when one
        of its entries is next looked at (it can only have become later)."""
        if name not in self._versions:
            return
        if gained:
            self.add(name)
        else:
            self._versions[name] += 1

    def earliest(self, pools: Iterable[str], gpus: int) -> tuple[float, str] | None:
        """The node of ``pools`` that has ``gpus`` GPUs free soonest: (time, node name)."""
        if gpus <= 0:
            return None
        best: tuple[float, str] | None = None
        versions = self._versions
        for pool in pools:
            heap = self._heaps.get((pool, gpus))
            if heap is None:
                if pool not in self._nodes:
                    continue
                heap = self._heap(pool, gpus)
            entered = self._entered[pool, gpus]
            while heap:
                at, name, version = heap[0]
                current = versions[name]
                if version == current:
                    if best is None or (at, name) < best:
                        best = (at, name)
                    break
                heapq.heappop(heap)
                if entered[name] == current:
                    continue  # superseded by a newer entry further down
                # The node changed since: its entry may be too early, look again.
                entered[name] = current
                at_now = self._time(self._view(name, current), gpus)
                if at_now is not None:
                    heapq.heappush(heap, (at_now, name, current))
        return best

    def _heap(self, pool: str, gpus: int) -> list[tuple[float, str, int]]:
        """The heap of the pool's nodes for ``gpus`` GPUs, from what each last said (a node
        that lost GPUs since is looked at again when its entry comes up)."""
        entries = []
        entered: dict[str, int] = {}
        for name in self._nodes[pool]:
            version, view = self._views[name]
            entered[name] = version
            at = self._time(view, gpus)
            if at is not None:
                entries.append((at, name, version))
        heapq.heapify(entries)
        self._heaps[pool, gpus] = entries
        self._entered[pool, gpus] = entered
        return entries

    def _view(self, name: str, version: int) -> NodeView:
        known = self._views[name]
        if known[0] == version:
            return known[1]
        view = self.describe(name)
        self._views[name] = (version, view)
        return view

    def _time(self, view: NodeView, gpus: int) -> float | None:
        """When the node has ``gpus`` GPUs free: now for its free ones, then when the
        (gpus - free)-th GPU held comes back; None if it never has that many."""
        _, capacity, free, releases = view
        if gpus > capacity:
            return None
        if gpus <= free:
            return self.now
        back = gpus - free - 1
        if back >= len(releases):
            return None  # fewer GPUs come back than the node lacks for this size
        at = releases[back]
        return at if at > self.now else self.now
