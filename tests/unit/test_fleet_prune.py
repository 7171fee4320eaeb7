"""The owned-fleet search costs only the sizes whose lower bound (owned nodes plus the trace's
firm demand above them on demand) could still beat the cheapest found (issue 14: `plan` on
200,000 jobs replayed the trace at every owned size, for the plan, each sensitivity case and
each flip point): the bound is never above a size's cost, and the recommendation and the
runners-up are the ones the scan over every size gives (random traces, prices, growth,
sharing)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridgpu.planner.cost import CostModel, SharedWork
from hybridgpu.planner.io import history_from_jobs
from hybridgpu.planner.model import JobDemand, PlanInputs
from hybridgpu.planner.optimize import (
    _knapsack,
    cheapest_mixes,
    cost_by_owned_gpus,
    optimal_fleet,
    runners_up,
    scan_fleets,
)
from hybridgpu.planner.plan import plan_capacity
from hybridgpu.planner.sensitivity import levers, without_residual_value
from support.planner import CLOUD, node_type, random_jobs

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def trace_inputs(
    jobs: list[JobDemand], growth: float, gpu_hour: float, four_price: float, months: int
) -> PlanInputs:
    return PlanInputs(
        history=tuple(history_from_jobs(jobs)),
        node_types=(node_type("eight", 8, gpu_hour), node_type("four", 4, gpu_hour * four_price)),
        cloud=CLOUD,
        horizon_months=months,
        demand_growth_per_year=growth,
        jobs=tuple(jobs),
    )


inputs_strategy = st.builds(
    trace_inputs,
    jobs=random_jobs(40),
    growth=st.sampled_from([0.0, 0.3, -0.4]),
    gpu_hour=st.sampled_from([0.5, 1.0, 1.6, 3.0]),
    four_price=st.sampled_from([0.9, 1.0, 1.1]),
    months=st.sampled_from([6, 12, 48]),
)


@SETTINGS
@given(inputs=inputs_strategy)
def test_the_bound_never_exceeds_a_sizes_cost(inputs: PlanInputs) -> None:
    model = CostModel(inputs)
    for _, nodes in cheapest_mixes(model):
        assert model.lower_bound(nodes) <= model.total_dollars(nodes)


@SETTINGS
@given(inputs=inputs_strategy)
def test_the_pruned_search_recommends_what_the_scan_over_every_size_does(
    inputs: PlanInputs,
) -> None:
    shared = SharedWork()
    nodes = optimal_fleet(CostModel(inputs, shared))
    assert nodes == scan_fleets(CostModel(inputs, shared))
    model = CostModel(inputs, shared)
    owned = model.owned_gpus(nodes)
    curve = cost_by_owned_gpus(model)
    fewer = [c for c in curve if c.owned_gpus < owned]
    more = [c for c in curve if c.owned_gpus > owned]
    expected = (
        min(fewer, key=lambda c: c.total_dollars) if fewer else None,
        min(more, key=lambda c: c.total_dollars) if more else None,
    )
    assert runners_up(model, owned) == expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=inputs_strategy)
def test_the_plans_sensitivity_cases_are_the_scans(inputs: PlanInputs) -> None:
    """The sensitivity table calls ``optimal_fleet`` with other prices and growth: each
    case's fleet is the scan's on the same inputs."""
    result = plan_capacity(inputs, with_procurement=False)
    assert result.recommended.nodes == scan_fleets(CostModel(inputs))
    varied = [lever.apply(inputs, c) for lever in levers(inputs) for c in lever.table_changes]
    worthless = without_residual_value(inputs)
    if worthless is not None:
        varied.append(worthless)
    assert len(varied) == len(result.sensitivity)
    for case, case_inputs in zip(result.sensitivity, varied, strict=True):
        assert case.nodes == scan_fleets(CostModel(case_inputs))


class _Tied(CostModel):
    """Sizes 0, 4 and 8 GPUs costing 10, 2 and 2 less a relative 5e-10: within the scan's
    1e-9, so the scan keeps 4 GPUs although 8 cost less; bounds of 0 cost every size."""

    COSTS: dict[tuple[int, ...], float] = {(0, 0): 10.0, (0, 1): 2.0, (1, 0): 2.0 * (1 - 5e-10)}

    def total_dollars(self, nodes: Sequence[int]) -> float:
        return self.COSTS[tuple(nodes)]

    def lower_bound(self, nodes: Sequence[int]) -> float:
        return 0.0


def test_near_ties_are_left_to_the_scan() -> None:
    jobs = [JobDemand(0.0, 3600.0, 4, False)]
    model = _Tied(trace_inputs(jobs, 0.0, 1.0, 1.0, 12))
    assert [g for g, _ in cheapest_mixes(model)] == [0, 4, 8]
    assert scan_fleets(model) == (0, 1)
    assert optimal_fleet(model) == (0, 1)


def _knapsack_loop(
    g_max: int, types: tuple[tuple[int, int | None, float], ...]
) -> list[tuple[int, tuple[int, ...]]]:
    """The knapsack as a loop over owned counts, one count at a time (what ``_knapsack``
    computed before it took all counts at once)."""
    best = [math.inf] * (g_max + 1)
    mix: list[tuple[int, ...]] = [()] * (g_max + 1)
    best[0], mix[0] = 0.0, (0,) * len(types)
    for j, (k, max_nodes, node_hour_dollars) in enumerate(types):
        bound = g_max // k if max_nodes is None else min(g_max // k, max_nodes)
        chunk = 1
        while bound > 0:
            take = min(chunk, bound)
            bound -= take
            chunk *= 2
            size, dollars = take * k, take * node_hour_dollars
            for g in range(g_max, size - 1, -1):
                if best[g - size] + dollars < best[g]:
                    best[g] = best[g - size] + dollars
                    counts = list(mix[g - size])
                    counts[j] += take
                    mix[g] = tuple(counts)
    return [(g, mix[g]) for g in range(g_max + 1) if best[g] < math.inf]


@settings(max_examples=300, deadline=None)
@given(
    g_max=st.integers(0, 200),
    types=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4, 8, 16]),
            st.one_of(st.none(), st.integers(0, 30)),
            # Prices with exact ties (proportional ones, equal ones) and without.
            st.one_of(st.sampled_from([1.0, 2.0, 4.0, 8.0, 3.3]), st.floats(0.01, 50.0)),
        ),
        min_size=1,
        max_size=4,
    ).map(tuple),
)
def test_the_knapsack_over_all_counts_at_once_is_the_loop_over_each(
    g_max: int, types: tuple[tuple[int, int | None, float], ...]
) -> None:
    """Every count's cheapest mix, ties kept as the loop keeps them (the earlier mix), is
    the same whether the counts are taken one at a time or all at once."""
    assert _knapsack(g_max, types) == _knapsack_loop(g_max, types)
