"""The procurement search skips a fleet whose lower bound (owned nodes plus the firm demand
above them at the cheapest price that can serve it) already loses to the best plan found:
the bound is never above what the fleet's best schedule costs (random traces, offers,
growth), and the plan with pruning is the plan without it."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybridgpu.planner.procure as procure
from hybridgpu.planner.io import history_from_jobs
from hybridgpu.planner.model import CloudRates, DemandSample, JobDemand, PlanInputs
from hybridgpu.planner.optimize import cheapest_mixes
from hybridgpu.planner.procure import (
    CommittedOffer,
    ProcurementModel,
    best_schedule,
    offer_choices,
    optimal_procurement,
)
from support.planner import CLOUD, node_type, random_jobs

pytestmark = pytest.mark.unit

jobs_strategy = random_jobs(30)


def offer(name: str, price: float, unit: int, term: int, decrease: float) -> CommittedOffer:
    return CommittedOffer(
        name=name, term_years=term, per_gpu_hour=price, gpus_per_unit=unit, max_decrease=decrease
    )


offers_strategy = st.lists(
    st.builds(
        offer,
        name=st.sampled_from(["a", "b"]),
        price=st.sampled_from([1.0, 2.0, 3.5]),
        unit=st.sampled_from([4, 8]),
        term=st.sampled_from([1, 3]),
        decrease=st.sampled_from([0.0, 0.5]),
    ),
    max_size=2,
    unique_by=lambda o: o.name,
)


def trace_inputs(jobs: list[JobDemand], growth: float, gpu_hour: float, months: int) -> PlanInputs:
    return PlanInputs(
        history=tuple(history_from_jobs(jobs)),
        node_types=(node_type("eight", 8, gpu_hour), node_type("four", 4, gpu_hour * 1.1)),
        cloud=CLOUD,
        horizon_months=months,
        demand_growth_per_year=growth,
        jobs=tuple(jobs),
    )


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    jobs=jobs_strategy,
    offers=offers_strategy,
    growth=st.sampled_from([0.0, 0.3, -0.4]),
    gpu_hour=st.sampled_from([0.8, 1.6, 3.0]),
    months=st.sampled_from([6, 12]),
)
def test_the_bound_never_exceeds_a_fleets_best_schedule(
    jobs: list[JobDemand], offers: list[CommittedOffer], growth: float, gpu_hour: float, months: int
) -> None:
    inputs = trace_inputs(jobs, growth, gpu_hour, months)
    for choice in offer_choices(offers):
        model = ProcurementModel(inputs, choice)
        for _, nodes in cheapest_mixes(model.owned_model):
            _, dollars = best_schedule(model, nodes)
            assert model.lower_bound(nodes) <= dollars


@SETTINGS
@given(
    jobs=jobs_strategy,
    offers=offers_strategy,
    growth=st.sampled_from([0.0, 0.3, -0.4]),
    gpu_hour=st.sampled_from([0.8, 1.6, 3.0]),
    months=st.sampled_from([6, 12, 48]),
)
def test_the_level_bounds_never_exceed_the_level_costs(
    jobs: list[JobDemand], offers: list[CommittedOffer], growth: float, gpu_hour: float, months: int
) -> None:
    """``lower_table`` entry by entry below ``cost_table`` (the months past the horizon in
    the last period included): what lets ``best_schedule`` leave levels out."""
    inputs = trace_inputs(jobs, growth, gpu_hour, months)
    for choice in offer_choices(offers):
        model = ProcurementModel(inputs, choice)
        for _, nodes in cheapest_mixes(model.owned_model)[:4]:
            for period in model.periods:
                assert (model.lower_table(period, nodes) <= model.cost_table(period, nodes)).all()


def test_a_limit_leaves_levels_out_and_keeps_the_schedule() -> None:
    """Firm demand of 16 GPUs all day, one 8-GPU offer: with the best schedule's own cost
    (and a margin) as the limit, the high levels are never replayed, and the schedule is the
    one found without a limit."""
    jobs = [JobDemand(float(h * 3600), 3600.0, 8, False) for h in range(24) for _ in range(2)]
    inputs = trace_inputs(jobs, 0.2, 3.0, 12)
    model = ProcurementModel(inputs, (offer("a", 2.0, 8, 1, 0.0),))
    schedule, dollars = best_schedule(model, (0, 0))
    replays = len(model._replays)
    limited = ProcurementModel(inputs, model.offers)
    assert best_schedule(limited, (0, 0), dollars * (1 + 1e-6)) == (schedule, dollars)
    assert len(limited._replays) < replays
    assert best_schedule(limited, (0, 0), dollars * 0.5) == ((), math.inf)


@SETTINGS
@given(
    jobs=jobs_strategy,
    offers=offers_strategy,
    growth=st.sampled_from([0.0, 0.3]),
    gpu_hour=st.sampled_from([0.8, 1.6, 3.0]),
)
def test_pruning_changes_no_plan(
    jobs: list[JobDemand], offers: list[CommittedOffer], growth: float, gpu_hour: float
) -> None:
    inputs = trace_inputs(jobs, growth, gpu_hour, 12)
    assert optimal_procurement(inputs, offers) == optimal_procurement(inputs, offers, prune=False)


@SETTINGS
@given(
    samples=st.lists(
        st.tuples(
            st.sampled_from([1.0, 5.0, 20.0]),
            st.integers(0, 40).map(float),
            st.integers(0, 20).map(float),
        ),
        min_size=1,
        max_size=8,
    ),
    offers=offers_strategy,
    growth=st.sampled_from([0.0, 0.3]),
    gpu_hour=st.sampled_from([0.8, 1.6, 3.0]),
)
def test_pruning_changes_no_fluid_plan(
    samples: list[tuple[float, float, float]],
    offers: list[CommittedOffer],
    growth: float,
    gpu_hour: float,
) -> None:
    inputs = PlanInputs(
        history=tuple(DemandSample(h, f, p) for h, f, p in samples),
        node_types=(node_type("eight", 8, gpu_hour),),
        cloud=CloudRates(4.0, 1.5),
        horizon_months=12,
        demand_growth_per_year=growth,
    )
    for choice in offer_choices(offers):
        model = ProcurementModel(inputs, choice)
        for _, nodes in cheapest_mixes(model.owned_model):
            assert model.lower_bound(nodes) <= best_schedule(model, nodes)[1]
    assert optimal_procurement(inputs, offers) == optimal_procurement(inputs, offers, prune=False)


def test_pruning_skips_fleets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steady firm demand of 16 GPUs for a day and a short peak of 80: owning about the
    steady part is cheapest; the fleets far above it (their owned nodes alone dearer than
    that) are never scheduled."""
    jobs = [JobDemand(float(h * 3600), 3600.0, 8, False) for h in range(24) for _ in range(2)]
    jobs += [JobDemand(5 * 3600.0, 1800.0, 8, False) for _ in range(8)]  # a short peak
    inputs = trace_inputs(jobs, 0.2, 1.0, 12)
    offers = [offer("a", 2.0, 8, 1, 0.0)]
    scheduled: list[tuple[int, ...]] = []

    def counted(model: ProcurementModel, nodes: tuple[int, ...], limit: float = math.inf) -> object:
        scheduled.append(tuple(nodes))
        return best_schedule(model, nodes, limit)

    monkeypatch.setattr(procure, "best_schedule", counted)
    pruned = optimal_procurement(inputs, offers)
    with_pruning = len(scheduled)
    scheduled.clear()
    full = optimal_procurement(inputs, offers, prune=False)
    assert pruned == full
    assert sum(pruned.nodes) <= 3
    assert with_pruning < len(scheduled) / 2
