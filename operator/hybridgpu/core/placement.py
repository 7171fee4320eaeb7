"""Where a pod goes: one placer for decide(), the simulator's scheduler and the planner's
replay (pure).

Two rules, and nothing else decides placement anywhere:

- **which pools, in which order** (``placement_order``): the tiers its criticality allows
  (critical and standard: owned and on-demand; preemptible: owned and spot, on-demand too
  when the policy allows it), the GPU models it may use (``serves_models``), nodes big
  enough; cheapest marginal GPU-hour first (committed capacity costs nothing more, owned
  GPUs their power), then by name;
- **which node of a pool** (``FreeGPUs.take``): best fit, the fullest node that still has
  room (kube-scheduler's MostAllocated score), the lowest name among equals.

The plan-versus-simulation check of ``hybridgpu plan`` depends on the three agreeing; a test
places the same pods through all three (tests/unit/test_placement.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar, cast

from sortedcontainers import SortedList

from hybridgpu.core.cost import marginal_gpu_hour_dollars
from hybridgpu.models.pool import Tier, serves_models
from hybridgpu.models.snapshot import Criticality, PoolState

CORE = Tier.CORE.value
ELASTIC = Tier.ELASTIC.value
SPOT = Tier.SPOT.value


K = TypeVar("K", str, int)
"""Node keys: names (decide(), the simulator) or indices (the planner)."""


class FreeGPUs(Generic[K]):
    """Nodes by their free GPUs, for best-fit placement: O(log n) per change and per fit.

    The sorted index is built on the first question that needs the order (``best_fit``,
    ``with_free``, ``by_free``, ``most_free``) and kept up to date from then on: decide()
    makes several per pool and tick, and most of them are never asked (a SortedList of a
    few dozen nodes costs more to build than the rest of a small tick's ledger)."""

    __slots__ = ("_by_free", "_free", "total")

    def __init__(self, nodes: Iterable[tuple[K, int]] = ()) -> None:
        """``nodes``: (node, free GPUs) pairs."""
        self._free: dict[K, int] = dict(nodes)
        self._by_free: SortedList[tuple[int, K]] | None = None
        self.total = sum(self._free.values())
        """Free GPUs on all the nodes."""

    def _index(self) -> SortedList[tuple[int, K]]:
        by_free = self._by_free
        if by_free is None:
            free = self._free
            by_free = self._by_free = SortedList(zip(free.values(), free.keys(), strict=True))
        return by_free

    def __len__(self) -> int:
        return len(self._free)

    def __contains__(self, node: object) -> bool:
        return node in self._free

    def free(self, node: K) -> int | None:
        """The node's free GPUs; None for a node not held here."""
        return self._free.get(node)

    def put(self, node: K, free: int) -> None:
        """Add the node, or set its free GPUs."""
        old = self._free.get(node)
        by_free = self._by_free
        if old is not None:
            if by_free is not None:
                by_free.remove((old, node))
            self.total -= old
        self._free[node] = free
        if by_free is not None:
            by_free.add((free, node))
        self.total += free

    def discard(self, node: K) -> None:
        old = self._free.pop(node, None)
        if old is not None:
            if self._by_free is not None:
                self._by_free.remove((old, node))
            self.total -= old

    def best_fit(self, gpus: int) -> K | None:
        """The fullest node with at least ``gpus`` free (the lowest among equals), or None."""
        by_free = self._by_free
        if by_free is None:
            # Most questions decide() asks find no room (the scheduler took what fitted):
            # answered from the free counts, without building the index.
            if not self._free or max(self._free.values()) < gpus:
                return None
            by_free = self._index()
        at = by_free.bisect_left((gpus,))
        return by_free[at][1] if at < len(by_free) else None

    def take(self, gpus: int) -> K | None:
        """Place ``gpus`` on the best fit and return it (None: no node has room)."""
        node = self.best_fit(gpus)
        if node is not None:
            self.put(node, self._free[node] - gpus)
        return node

    def with_free(self, free: int) -> list[K]:
        """The nodes with exactly ``free`` GPUs free, in order."""
        if not self._free:
            return []
        by_free = self._index()
        lo = by_free.bisect_left((free,))
        hi = by_free.bisect_left((free + 1,))
        return [node for _, node in by_free[lo:hi]]

    def by_free(self) -> Sequence[tuple[int, K]]:
        """(free GPUs, node) of every node, the fewest free first (a read-only view)."""
        if not self._free:
            return ()
        return cast("Sequence[tuple[int, K]]", self._index())

    @property
    def most_free(self) -> int:
        """The most free GPUs on any node (0 without nodes)."""
        by_free = self._by_free
        if by_free is None:
            return max(self._free.values(), default=0)
        return by_free[-1][0] if by_free else 0


class NumberedFreeGPUs:
    """``FreeGPUs`` for nodes numbered 0..n-1 (the planner's replay): the same best fit, the
    fullest node with room and the lowest number among equals, for a fraction of the cost.

    A node holds a few GPUs (units), so its free count is a small number: per count, the set
    of nodes with that many free is one int used as a bit set (node i is bit i), and the
    counts that have nodes are another. A change flips two bits; a best fit finds the lowest
    count with nodes from ``gpus`` up and its lowest node, with a few C-level int operations
    instead of a sorted list's search and shifts (a third of a 200,000-job replay's time)."""

    __slots__ = ("_counts", "_free", "_nodes_with", "total")

    def __init__(self, free: Iterable[int] = ()) -> None:
        """``free``: each node's free GPUs, by node number."""
        self._free = list(free)
        if any(count < 0 for count in self._free):
            raise ValueError("a node cannot have fewer than 0 GPUs free")
        self._nodes_with = [0] * (max(self._free, default=0) + 1)
        """Per free count, the nodes with exactly that many free (bit i: node i)."""
        for node, count in enumerate(self._free):
            self._nodes_with[count] |= 1 << node
        self._counts = sum(1 << count for count, nodes in enumerate(self._nodes_with) if nodes)
        """The free counts some node has (bit f: count f)."""
        self.total = sum(self._free)
        """Free GPUs on all the nodes."""

    def __len__(self) -> int:
        return len(self._free)

    def free(self, node: int) -> int:
        """The node's free GPUs."""
        return self._free[node]

    @property
    def frees(self) -> Sequence[int]:
        """Every node's free GPUs, by node number (a live read-only view: change them with
        ``put``)."""
        return self._free

    def put(self, node: int, free: int) -> None:
        """Set the node's free GPUs."""
        old = self._free[node]
        if free == old:
            return
        nodes_with = self._nodes_with
        if free >= len(nodes_with):
            nodes_with.extend([0] * (free + 1 - len(nodes_with)))
        elif free < 0:
            raise ValueError(f"a node cannot have {free} GPUs free")
        bit = 1 << node
        left = nodes_with[old] ^ bit
        nodes_with[old] = left
        if not left:
            self._counts ^= 1 << old
        nodes_with[free] |= bit
        self._counts |= 1 << free
        self._free[node] = free
        self.total += free - old

    def best_fit(self, gpus: int) -> int | None:
        """The fullest node with at least ``gpus`` free (the lowest number among equals), or
        None."""
        if gpus < 0:
            gpus = 0
        counts = self._counts >> gpus
        if not counts:
            return None
        free = (counts & -counts).bit_length() - 1 + gpus
        nodes = self._nodes_with[free]
        return (nodes & -nodes).bit_length() - 1

    def most_free_first(self) -> Iterator[tuple[int, int]]:
        """(free GPUs, node) of every node, the most free first and the highest number first
        among equals (``reversed(FreeGPUs.by_free())``)."""
        for free in range(len(self._nodes_with) - 1, -1, -1):
            nodes = self._nodes_with[free]
            while nodes:
                node = nodes.bit_length() - 1
                yield free, node
                nodes ^= 1 << node


def placement_tiers(criticality: str, *, on_demand_for_preemptible: bool) -> frozenset[str]:
    """The tiers a pod of ``criticality`` may run on: admission keeps preemptible pods on
    owned and spot nodes unless the policy lets them onto on-demand ones."""
    if criticality == Criticality.PREEMPTIBLE:
        return frozenset((CORE, SPOT, ELASTIC) if on_demand_for_preemptible else (CORE, SPOT))
    return frozenset((CORE, ELASTIC))


def placement_order(
    pools: Sequence[PoolState],
    gpus: int,
    criticality: str,
    models: tuple[str, ...] = (),
    *,
    on_demand_for_preemptible: bool,
    pinned: str | None = None,
) -> list[PoolState]:
    """The pools whose free GPUs a pod of ``gpus`` may take, in the order it takes them:
    cheapest marginal GPU-hour first (at each pool's current provider price), then by name.
    A pod ``pinned`` to a pool (a Job moved there) may use that pool only."""
    if pinned is not None:
        return [p for p in pools if p.name == pinned and p.spec.gpu.per_node >= gpus]
    tiers = placement_tiers(criticality, on_demand_for_preemptible=on_demand_for_preemptible)
    eligible = [
        p
        for p in pools
        if p.spec.tier in tiers
        and p.spec.gpu.per_node >= gpus
        and serves_models(p.spec.gpu, models)
    ]
    return sorted(
        eligible,
        key=lambda p: (marginal_gpu_hour_dollars(p.spec, p.spot_price_per_node_hour), p.name),
    )
