"""The fast search for a large job trace: an aggregate model picks the region of the optimum,
and a few job replays choose and price the answer.

The exact search (``optimize.optimal_fleet``, ``procure.optimal_procurement``) replays the
whole trace for every owned size its bound does not rule out, and procurement again for every
committed level: at 200,000 jobs hundreds of replays of about a second each, hours in all.
The fast search instead:

1. builds the **aggregate model**: the trace's demand (firm and preemptible GPUs in use over
   time, the same history the exact plan's growth correction reads) merged into at most
   ``MODEL_LEVELS`` cells of (firm, preemptible) GPUs, each cell at its hours-weighted mean
   (so every GPU-hour of demand is kept); the fluid cost model of it (demand above the owned
   GPUs goes to the cloud at no start-up, idle or packing cost) costs any fleet in
   microseconds. The plan of that model (its owned optimum, sensitivity table, flip points
   and procurement: over ``FAST_PROCUREMENT_FLEETS`` owned sizes on a ``PROCUREMENT_LEVELS``
   model, its cloud GPU-hours scaled to the replay's at the replayed fleet) is computed as
   for a demand history;
2. searches the owned size with **exact replays** (the exact plan's ``CostModel``), starting
   at the aggregate model's optimum: a compass search over the owned sizes (each its
   cheapest node mix) that halves its step when neither neighbour is cheaper, down to sizes
   one largest node apart, then again over adjacent sizes (``two_scale_search``). It stops
   at a local minimum of the replayed cost, not necessarily the global one:
   docs/benchmarks.md measures the gap against the exact search;
3. **prices by replay** what it prints: the recommended fleet, today's fleet, all on demand,
   the runners-up (the cheapest replayed sizes on either side of the choice) and the
   procurement the aggregate model chose (``procure.costed`` with job replays).

So every dollar figure of the fleets printed is the exact model's figure for that fleet;
the sensitivity table and flip points are the aggregate model's (the output says so).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hybridgpu.planner import progress
from hybridgpu.planner.cost import CostModel
from hybridgpu.planner.model import DemandSample, PlanInputs
from hybridgpu.planner.optimize import OwnedSizeCost, cheapest_mixes

SEARCHES = ("auto", "exact", "fast")
FAST_ABOVE_JOBS = 10_000
"""``auto`` searches exactly up to this many jobs (8,000 jobs: about 95 CPU s exact), fast
above."""
MODEL_LEVELS = 1_000
"""At most this many (firm, preemptible) demand levels in the aggregate model."""
FAST_PROCUREMENT_FLEETS = 32
"""Owned sizes (evenly spread) the aggregate model's procurement search weighs."""
PROCUREMENT_LEVELS = 250
"""Demand levels of the aggregate model the procurement search reads (coarser: it weighs
every committed level of every offer in every period for each owned size)."""
_COST_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class SearchInfo:
    """How the plan was searched (reported in ``plan``'s output)."""

    method: str
    """``exact`` or ``fast``."""
    replays: int = 0
    """Owned sizes the fast search costed by replaying the trace."""
    model_levels: int = 0
    """Demand levels of the aggregate model (fast)."""
    model_step_gpus: float = 0.0
    """Width of the aggregate model's cells, GPUs (fast; 1: every level kept)."""
    model_nodes: tuple[int, ...] = ()
    """The aggregate model's own cheapest fleet (fast): where the replays started."""


EXACT_SEARCH = SearchInfo("exact")


def choose_search(search: str, inputs: PlanInputs) -> str:
    """``exact`` or ``fast`` for ``search`` (``auto``: fast above ``FAST_ABOVE_JOBS`` jobs; a
    demand history without jobs is always exact: its model is the fluid one already)."""
    if search not in SEARCHES:
        raise ValueError(f"search {search!r}: one of {', '.join(SEARCHES)}")
    if not inputs.jobs:
        return "exact"
    if search == "auto":
        return "fast" if len(inputs.jobs) > FAST_ABOVE_JOBS else "exact"
    return search


def aggregate_history(
    history: Sequence[DemandSample], limit: int = MODEL_LEVELS
) -> tuple[float, list[DemandSample]]:
    """``history`` merged into at most ``limit`` (firm, preemptible) cells, and the cells'
    width in GPUs (1, 2, 4, ...: the smallest that fits). A cell holds the hours of its
    samples at their hours-weighted mean firm and preemptible GPUs, so total hours and
    GPU-hours (firm and preemptible) are those of ``history``."""
    if limit < 1:
        raise ValueError("the aggregate model needs at least one level")
    step = 1.0
    while True:
        cells: dict[tuple[int, int], list[float]] = {}
        for s in history:
            if s.hours <= 0:
                continue
            key = (round(s.firm_gpus / step), round(s.preemptible_gpus / step))
            cell = cells.get(key)
            if cell is None:
                cells[key] = [s.hours, s.hours * s.firm_gpus, s.hours * s.preemptible_gpus]
            else:
                cell[0] += s.hours
                cell[1] += s.hours * s.firm_gpus
                cell[2] += s.hours * s.preemptible_gpus
            if len(cells) > limit:
                break
        else:
            samples = [DemandSample(h, f / h, p / h) for h, f, p in cells.values()]
            return step, samples
        step *= 2


def model_inputs(inputs: PlanInputs, limit: int = MODEL_LEVELS) -> tuple[float, PlanInputs]:
    """The aggregate model's inputs: the trace's demand history merged (``aggregate_history``)
    and no jobs (the fluid model). A trace's history carries each job's criticality, so no
    preemptible share is applied to it."""
    step, history = aggregate_history(inputs.history, limit)
    return step, replace(inputs, history=tuple(history), jobs=(), preemptible_share=None)


def local_search(
    cost: Callable[[int], float],
    count: int,
    start: int,
    step: int | None = None,
    min_step: int = 1,
    ahead: Callable[[list[int]], None] | None = None,
) -> int:
    """A local minimum of ``cost`` over 0..count-1 from ``start``, at scale ``min_step``: a
    compass search that looks ``step`` away on both sides and moves to the cheaper neighbour
    when it is cheaper (by more than a relative 1e-9), keeps going that way with the step
    doubled while that pays, halves the step when neither neighbour is cheaper, and ends when
    neither neighbour ``min_step`` away is cheaper. ``ahead(indices)`` is told the indices
    about to be costed before ``cost`` is asked for them (both sides: at once)."""
    if count < 1:
        raise ValueError("nothing to search")
    here = min(max(start, 0), count - 1)
    min_step = max(1, min_step)
    step = max(min_step, count // 32 if step is None else step)
    direction = 0
    while True:
        if ahead is not None:
            ahead([here])
        here_cost = cost(here)
        if direction:
            there = here + direction * step
            if 0 <= there < count and ahead is not None:
                ahead([there])
            if 0 <= there < count and cost(there) < here_cost * (1.0 - _COST_EPS):
                here, step = there, step * 2
                continue
            direction = 0
        near = [j for j in (here - step, here + step) if 0 <= j < count]
        if ahead is not None:
            ahead(near)
        sides = [(cost(j), j) for j in near]
        best_cost, best = min(sides, default=(math.inf, here))
        if best_cost < here_cost * (1.0 - _COST_EPS):
            direction = 1 if best > here else -1
            here = best
            continue
        if step <= min_step:
            return here
        step = max(min_step, step // 2)


def two_scale_search(
    cost: Callable[[int], float],
    count: int,
    start: int,
    coarse: int,
    ahead: Callable[[list[int]], None] | None = None,
) -> int:
    """``local_search`` at the scale of ``coarse`` indices first, then of adjacent ones: a
    fleet cost has bumps between sizes a mix of node types makes up (a 4-GPU node is dearer
    per GPU than an 8-GPU one), which stop a search at adjacent sizes too early."""
    here = local_search(cost, count, start, min_step=coarse, ahead=ahead)
    return local_search(cost, count, here, step=1, ahead=ahead)


def fast_fleet(
    model: CostModel, start_gpus: int, spare: Sequence[Sequence[int] | None] = ()
) -> tuple[tuple[int, ...], dict[int, OwnedSizeCost]]:
    """The owned fleet the fast search recommends (``local_search`` over the owned sizes,
    each its cheapest node mix, costed by ``model``: replays), from the size nearest
    ``start_gpus``; and every size it costed, by owned GPUs. The sizes the search costs at
    once (both sides of a step) are replayed side by side (``CostModel.replay_ahead``), a
    worker left idle replaying one of ``spare`` (fleets the plan prices afterwards; None:
    all on demand)."""
    mixes = cheapest_mixes(model)
    costed: dict[int, OwnedSizeCost] = {}

    def cost(i: int) -> float:
        gpus, nodes = mixes[i]
        known = costed.get(gpus)
        if known is None:
            known = costed[gpus] = OwnedSizeCost(gpus, nodes, model.total_dollars(nodes))
            progress.step("fast search: owned sizes replayed", len(costed))
        return known.total_dollars

    start = min(range(len(mixes)), key=lambda i: (abs(mixes[i][0] - start_gpus), i))
    # Sizes one largest node apart, then adjacent ones.
    spacing = mixes[1][0] - mixes[0][0] if len(mixes) > 1 else 1
    coarse = max(1, max(model.gpus_per_node) // max(spacing, 1))

    def ahead(indices: list[int]) -> None:
        fresh = [mixes[i][1] for i in indices if mixes[i][0] not in costed]
        if fresh:
            model.replay_ahead(fresh, spare)

    best = two_scale_search(cost, len(mixes), start, coarse, ahead)
    return mixes[best][1], costed


def runners_up_among(
    costed: dict[int, OwnedSizeCost], owned_gpus: int
) -> tuple[OwnedSizeCost | None, OwnedSizeCost | None]:
    """The cheapest costed sizes owning fewer and more GPUs than ``owned_gpus``."""

    def cheapest(sizes: list[OwnedSizeCost]) -> OwnedSizeCost | None:
        return min(sizes, key=lambda s: (s.total_dollars, s.owned_gpus), default=None)

    below = [s for g, s in costed.items() if g < owned_gpus]
    above = [s for g, s in costed.items() if g > owned_gpus]
    return cheapest(below), cheapest(above)
