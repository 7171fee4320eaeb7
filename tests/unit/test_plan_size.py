"""A plan's search stays bounded however far the demand grows: the owned-fleet search never
spans more GPUs than the candidates can own (the rest is rented and priced as such), the
procurement search keeps no figure per owned fleet and committed level, and what is still
too large to search is refused before any work, naming the inputs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hybridgpu.models.limits import MAX_NODES
from hybridgpu.planner.cost import CostModel
from hybridgpu.planner.model import CloudRates, DemandSample, PlanInputs
from hybridgpu.planner.optimize import cheapest_mixes, optimal_fleet
from hybridgpu.planner.procure import (
    CommittedOffer,
    ProcurementModel,
    check_plan_size,
    optimal_procurement,
)
from support.planner import node_type

pytestmark = pytest.mark.unit


def grown_inputs(growth: float, max_nodes: int | None, types: int = 1) -> PlanInputs:
    """10 firm GPUs and 5 preemptible all day, over 120 months growing ``growth`` a year."""
    return PlanInputs(
        history=(DemandSample(24.0, 10.0, 5.0),),
        node_types=tuple(
            replace(node_type(f"t{i}", gpus=8, gpu_hour=1.0), max_nodes=max_nodes)
            for i in range(types)
        ),
        cloud=CloudRates(6.0, 2.5),
        horizon_months=120,
        demand_growth_per_year=growth,
    )


def test_the_owned_search_spans_only_the_gpus_the_candidates_can_own():
    """Demand grown 1000 % a year for 10 years peaks near 4e11 GPUs: main sized the knapsack
    by that peak (an array of 4e11 entries, a MemoryError at once). Three nodes of 8 GPUs
    are all that can be owned, so 0..24 GPUs are searched (what each saves is within the
    1e-9 tie of a 7e15-dollar total, so the fewest may win), and every other GPU-hour is
    rented: owned, on-demand and spot GPU-hours add up to the demand."""
    model = CostModel(grown_inputs(10.0, max_nodes=3))
    assert model.total.peak > 1e11
    assert model.max_useful_gpus == 24
    assert [g for g, _ in cheapest_mixes(model)] == [0, 8, 16, 24]
    assert optimal_fleet(model)[0] <= 3
    for nodes in [(0,), (3,)]:
        cost = model.fleet_cost(nodes)
        served = cost.owned_used_gpu_hours + cost.elastic_gpu_hours + cost.spot_gpu_hours
        assert served == pytest.approx(cost.demand_gpu_hours, rel=1e-12)
        assert cost.elastic_gpu_hours > 0.6 * cost.demand_gpu_hours  # firm: 10 of 15 GPUs


def test_without_max_nodes_a_type_owns_at_most_the_node_count_limit():
    """No maxNodes: a type is bounded by the node-count limit (MAX_NODES), not the peak."""
    model = CostModel(grown_inputs(10.0, max_nodes=None))
    assert model.max_ownable_gpus == MAX_NODES * 8
    assert model.max_useful_gpus == MAX_NODES * 8
    # Below the limit the peak decides, as before.
    small = CostModel(grown_inputs(0.2, max_nodes=None))
    assert small.max_useful_gpus == math.ceil(small.total.peak - 1e-9) + 7 == 100


def test_a_plan_too_large_to_search_is_refused_before_any_work(monkeypatch):
    """1000 % growth with a committed offer without maxNodes: 5e10 committed levels. The
    plan says so (the offer, the peak and the field that bounds them) before the owned
    search; main started it and died of a MemoryError."""
    from hybridgpu.planner import plan as plan_module

    def searched(*_: object) -> None:
        raise AssertionError("the owned fleet was searched before the size check")

    monkeypatch.setattr(plan_module, "optimal_fleet", searched)
    deal = CommittedOffer(name="3y", term_years=3, per_gpu_hour=3.0, gpus_per_unit=8)
    with pytest.raises(
        ValueError, match=r"3y signed together: .*peaks at .*committed\[\]\.maxNodes"
    ):
        plan_module.plan_capacity(grown_inputs(10.0, max_nodes=3), offers=[deal])


def test_too_many_owned_gpu_counts_are_refused_naming_the_candidates():
    """Three 8-GPU types without maxNodes can own 2.4 million GPUs, more owned GPU counts
    than the search spans: one line naming the candidates, the peak and maxNodes."""
    with pytest.raises(
        ValueError,
        match=r"owned fleet search: 2,400,000 owned GPU counts of "
        r"candidates t0, t1, t2 .*1000% growth.*candidates\[\]\.maxNodes",
    ):
        check_plan_size(grown_inputs(10.0, max_nodes=None, types=3), [])
    check_plan_size(grown_inputs(10.0, max_nodes=1000, types=3), [])  # 24,000: searched


def test_procurement_keeps_no_figure_per_fleet_and_committed_level():
    """The procurement search asked the fluid model once per period, committed level and
    owned fleet and kept every answer: entries grew as the grown peak squared (14.9 GB at
    a 36,000-GPU peak). Only the nothing-committed answers (the lower bound's, one per
    period and fleet) are kept now, and the plan is the same."""
    inputs = replace(grown_inputs(0.5, max_nodes=1), horizon_months=24)
    deal = CommittedOffer(name="1y", term_years=1, per_gpu_hour=3.5, gpus_per_unit=1)
    kept: list[ProcurementModel] = []
    original = ProcurementModel.__init__

    def spy(self: ProcurementModel, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        kept.append(self)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(ProcurementModel, "__init__", spy)
    try:
        plan = optimal_procurement(inputs, [deal], prune=False)
    finally:
        monkeypatch.undo()
    assert plan.offers == (deal,)
    assert any(m.offers for m in kept)
    for model in kept:
        assert all(committed == 0 for _, committed, _ in model._fluid_usages)
