"""The cheapest owned fleet: marginal analysis for one node type (fluid model), a bounded
knapsack over owned GPUs for any number of types."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from hybridgpu.planner import progress
from hybridgpu.planner.cost import CostModel

# Relative slack when comparing dollar totals, so float noise does not flip a choice.
_COST_EPS = 1e-9


def optimal_single_type(model: CostModel, type_index: int = 0) -> int:
    """Fewest nodes of one type minimizing the total cost (others owned: none), for the
    fluid model only.

    Buys the next node while the cloud dollars it saves exceed what it costs. In the fluid
    model the saving of successive nodes of one type never grows (the cloud bill is convex in
    owned GPUs), so the first node that does not pay ends it. A job replay has no such
    property, nor does a mix of types: ``optimal_fleet`` looks at every owned size instead
    (costing those its lower bound does not rule out).
    """
    if model.inputs.jobs:
        raise ValueError("marginal analysis is exact for the fluid model only: use optimal_fleet")
    node = model.inputs.node_types[type_index]
    k = node.work_gpus_per_node
    node_dollars = node.node_hour_dollars * model.horizon_hours
    limit = model.max_useful_gpus // k
    if node.max_nodes is not None:
        limit = min(limit, node.max_nodes)
    nodes = 0
    while nodes < limit:
        saving = model.cloud_dollars(_only(model, type_index, nodes)) - model.cloud_dollars(
            _only(model, type_index, nodes + 1)
        )
        if saving <= node_dollars * (1.0 + _COST_EPS):
            break
        nodes += 1
    return nodes


def _only(model: CostModel, type_index: int, nodes: int) -> tuple[int, ...]:
    counts = [0] * len(model.gpus_per_node)
    counts[type_index] = nodes
    return tuple(counts)


@dataclass(frozen=True, slots=True)
class OwnedSizeCost:
    """The cheapest way to own exactly ``owned_gpus`` GPUs and what it costs in total."""

    owned_gpus: int
    nodes: tuple[int, ...]
    total_dollars: float


def cheapest_mixes(model: CostModel) -> list[tuple[int, tuple[int, ...]]]:
    """For every owned GPU count that node types can make up, up to ``max_useful_gpus``, the
    cheapest node mix owning exactly that many (GPUs of the demand's class).

    A bounded knapsack over the node types (binary splitting of each type's node bound),
    made once per node types' sizes, bounds and prices and ``max_useful_gpus`` among the
    plan's variants (``SharedWork.mixes``: the sensitivity table and flip points moving a
    cloud price ask for the same mixes hundreds of times).
    """
    types = tuple(
        (t.work_gpus_per_node, t.max_nodes, t.node_hour_dollars) for t in model.inputs.node_types
    )
    key = (model.max_useful_gpus, types)
    known = model.shared.mixes.get(key)
    if known is None:
        known = model.shared.mixes[key] = _knapsack(*key)
    return list(known)


def _knapsack(
    g_max: int, types: tuple[tuple[int, int | None, float], ...]
) -> list[tuple[int, tuple[int, ...]]]:
    """``cheapest_mixes`` of node types of (GPUs, most nodes, dollars per node-hour).

    Each chunk of ``take`` nodes is a 0/1 item: every owned count ``g`` takes it when the
    cheapest mix of ``g - size`` before this chunk plus its dollars is cheaper than the
    cheapest of ``g`` before it (strictly: the earlier mix stays among equals). All counts
    at once, as arrays (the flip points and the sensitivity table ask for a new knapsack at
    every price they try: in a loop over counts this was a third of their time)."""
    best = np.full(g_max + 1, math.inf)
    best[0] = 0.0
    mix = np.zeros((g_max + 1, len(types)), dtype=np.int64)
    for j, (k, max_nodes, node_hour_dollars) in enumerate(types):
        bound = g_max // k
        if max_nodes is not None:
            bound = min(bound, max_nodes)
        chunk = 1
        while bound > 0:
            take = min(chunk, bound)
            bound -= take
            chunk *= 2
            size, dollars = take * k, take * node_hour_dollars
            with_chunk = best[: g_max + 1 - size] + dollars  # from the counts before the chunk
            better = np.flatnonzero(with_chunk < best[size:])
            if better.size:
                best[better + size] = with_chunk[better]
                mix[better + size] = mix[better]  # a copy of the rows before this chunk
                mix[better + size, j] += take
    reachable = np.flatnonzero(best < math.inf)
    return [
        (g, tuple(counts))
        for g, counts in zip(reachable.tolist(), mix[reachable].tolist(), strict=True)
    ]


def cost_by_owned_gpus(model: CostModel) -> list[OwnedSizeCost]:
    """For every owned GPU count that node types can make up, its cheapest fleet and total
    cost (``cheapest_mixes``)."""
    return [
        OwnedSizeCost(g, nodes, model.total_dollars(nodes)) for g, nodes in cheapest_mixes(model)
    ]


def optimal_fleet(model: CostModel) -> tuple[int, ...]:
    """Nodes per type minimizing the total cost over the horizon; ties: fewest owned GPUs.

    The answer is ``scan_fleets``'s (every size in order, a size replacing the choice only
    when cheaper by more than a relative 1e-9), found without costing every size: sizes are
    costed in the order of their ``CostModel.lower_bound``, until the next bound is above
    the cheapest cost found by a relative ``_BAND``. Why it is the scan's answer: the scan's
    choice never costs more than the cheapest size seen divided by (1 - 1e-9) (an induction
    over the scan), so it is within ``_BAND`` of the cheapest of all; every size not costed
    is above that (its bound is), so when only one costed size is within ``_BAND`` of the
    cheapest, that size is the scan's choice. When several are (near ties), the scan itself
    decides, over every size."""
    mixes = cheapest_mixes(model)
    costs = _costed_by_bound(model, mixes, range(len(mixes)))
    cheapest = min(costs.values())
    near = [i for i, dollars in costs.items() if dollars <= cheapest * (1.0 + _BAND)]
    if len(near) == 1:
        return mixes[near[0]][1]
    return scan_fleets(model)


def scan_fleets(model: CostModel) -> tuple[int, ...]:
    """``optimal_fleet`` by costing every size in order (the definition it keeps)."""
    sizes = cost_by_owned_gpus(model)
    choice = sizes[0]
    for size in sizes[1:]:
        if size.total_dollars < choice.total_dollars * (1.0 - _COST_EPS):
            choice = size
    return choice.nodes


_BAND = 1e-6
"""Relative band above the cheapest size that ``optimal_fleet`` costs exactly (far wider than
the scan's 1e-9, so float rounding cannot put a size outside it that the scan would pick)."""


def _costed_by_bound(
    model: CostModel, mixes: list[tuple[int, tuple[int, ...]]], among: Iterable[int]
) -> dict[int, float]:
    """Total dollars of the sizes ``among`` (positions in ``mixes``) whose lower bound is
    within ``_BAND`` of the cheapest cost found, costed cheapest bound first: every size
    left out costs more than that band above the cheapest of ``among``."""
    bounds = {i: model.lower_bound(mixes[i][1]) for i in among}
    costs: dict[int, float] = {}
    cheapest = math.inf
    for i in sorted(bounds, key=lambda i: (bounds[i], i)):
        if bounds[i] > cheapest * (1.0 + _BAND):
            break
        costs[i] = model.total_dollars(mixes[i][1])
        cheapest = min(cheapest, costs[i])
        progress.step("owned fleet sizes costed", len(costs), len(bounds))
    return costs


def runners_up(
    model: CostModel, owned_gpus: int
) -> tuple[OwnedSizeCost | None, OwnedSizeCost | None]:
    """The cheapest sizes owning fewer and more GPUs than ``owned_gpus`` (the first in size
    order among equal costs; None when there is none), as the minimum of
    ``cost_by_owned_gpus`` on each side, costing only the sizes whose lower bound does not
    already exceed the cheapest found on that side."""
    mixes = cheapest_mixes(model)
    out: list[OwnedSizeCost | None] = []
    for side in (
        [i for i, (g, _) in enumerate(mixes) if g < owned_gpus],
        [i for i, (g, _) in enumerate(mixes) if g > owned_gpus],
    ):
        if not side:
            out.append(None)
            continue
        costs = _costed_by_bound(model, mixes, side)
        best = min(costs, key=lambda i: (costs[i], i))
        out.append(OwnedSizeCost(mixes[best][0], mixes[best][1], costs[best]))
    return out[0], out[1]
