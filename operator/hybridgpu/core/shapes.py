"""Which node shapes to buy for pods that fit nowhere: bin packing across pools (pure).

Pods of k GPUs are packed into new nodes of every pool they may use (1-, 4-, 8-GPU shapes,
several GPU models and prices), choosing the shapes so that the packing costs the fewest
dollars per hour, not the first pool in some order: a half-empty 8-GPU node is bought only
when it is cheaper than the smaller nodes that would hold the same pods.

Variable-sized bin packing is NP-hard; the greedy rule here is the classic one: open the
node whose first-fit-decreasing fill (the largest pod left, then the others largest first)
costs least per GPU it carries, and repeat. It works on counts per pod size, so a tick with
thousands of pending pods costs O(nodes opened x shapes x distinct sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shape:
    """A pool new nodes may come from."""

    pool: str
    gpus: int
    """GPUs per node."""
    price_per_hour: float
    """Dollars per node-hour."""


def fill(sizes: dict[int, int], capacity: int, first: int) -> dict[int, int]:
    """Pods (count per size) that a node of ``capacity`` GPUs takes first-fit decreasing,
    starting with one pod of size ``first``."""
    taken = {first: 1}
    room = capacity - first
    for size in sorted(sizes, reverse=True):
        if room <= 0:
            break
        count = sizes[size] - taken.get(size, 0)
        fits = min(count, room // size) if size > 0 else 0
        if fits > 0:
            taken[size] = taken.get(size, 0) + fits
            room -= fits * size
    return taken


def pack(
    sizes: dict[int, int],
    shapes: Sequence[Shape],
    open_node: Callable[[Shape], bool],
) -> dict[int, int]:
    """Open nodes for pods of ``sizes`` (GPUs -> count) among ``shapes``, cheapest per GPU
    carried first; ``open_node`` opens one node of a shape or says False when a limit
    (maxNodes, per-tick cap, budget) stops that shape, which is then not tried again.
    Returns the pods (GPUs -> count) that no shape could take."""
    left = {k: v for k, v in sizes.items() if v > 0}
    usable = [s for s in shapes if s.gpus > 0]
    unplaced: dict[int, int] = {}
    while left:
        largest = max(left)
        best: tuple[tuple[float, int, str], Shape, dict[int, int]] | None = None
        for shape in usable:
            if shape.gpus < largest:
                continue
            taken = fill(left, shape.gpus, largest)
            carried = sum(k * n for k, n in taken.items())
            key = (shape.price_per_hour / carried, shape.gpus, shape.pool)
            if best is None or key < best[0]:
                best = (key, shape, taken)
        if best is None:
            unplaced[largest] = unplaced.get(largest, 0) + left.pop(largest)
            continue
        _, shape, taken = best
        if not open_node(shape):
            usable = [s for s in usable if s is not shape]
            continue
        for size, n in taken.items():
            left[size] -= n
            if left[size] == 0:
                del left[size]
    return unplaced
