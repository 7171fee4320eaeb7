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
   and procurement) is computed as for a demand history;
2. searches the owned size with **exact replays** (the exact plan's ``CostModel``), starting
   at the aggregate model's optimum: a compass search over the owned sizes (each its
   cheapest node mix) that halves its step when neither neighbour is cheaper, down to the
   adjacent sizes. It stops at a local minimum of the replayed cost, not necessarily the
   global one: docs/benchmarks.md measures the gap against the exact search;
3. **prices by replay** what it prints: the recommended fleet, today's fleet, all on demand,
   the runners-up (the cheapest replayed sizes on either side of the choice) and the
   procurement the aggregate model chose (``procure.costed`` with job replays).

So every dollar figure of the fleets printed is the exact model's figure for that fleet;
the sensitivity table and flip points are the aggregate model's (the output says so).
"""

from __future__ import annotations

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
    cost: Callable[[int], float], count: int, start: int, step: int | None = None
) -> int:
    """A local minimum of ``cost`` over 0..count-1 from ``start``: a compass search that moves
    to a neighbour ``step`` away when it is cheaper (by more than a relative 1e-9), doubles
    the step after a move in the same direction and halves it when neither neighbour is
    cheaper, and ends when neither adjacent index is cheaper."""
    if count < 1:
        raise ValueError("nothing to search")
    here = min(max(start, 0), count - 1)
    step = max(1, count // 32) if step is None else max(1, step)
    direction = 0
    while True:
        here_cost = cost(here)
        moved = False
        order = (direction, -direction) if direction else (-1, 1)
        for d in order:
            there = here + d * step
            if 0 <= there < count and cost(there) < here_cost * (1.0 - _COST_EPS):
                step = step * 2 if d == direction else step
                here, direction, moved = there, d, True
                break
        if moved:
            continue
        if step == 1:
            return here
        step = max(1, step // 2)
        direction = 0


def fast_fleet(
    model: CostModel, start_gpus: int
) -> tuple[tuple[int, ...], dict[int, OwnedSizeCost]]:
    """The owned fleet the fast search recommends (``local_search`` over the owned sizes,
    each its cheapest node mix, costed by ``model``: replays), from the size nearest
    ``start_gpus``; and every size it costed, by owned GPUs."""
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
    best = local_search(cost, len(mixes), start)
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
