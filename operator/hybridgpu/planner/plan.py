"""The plan: the cheapest fleet, the fleets it is compared with, how it moves with its inputs,
and the CapacityPlan status of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import (
    CapacityPlanSpec,
    CapacityPlanStatus,
    MonthlyCost,
    OwnedCapital,
    Recommendation,
    SensitivityRow,
)
from hybridgpu.models.capacityplan import (
    FlipPoint as FlipPointStatus,
)
from hybridgpu.planner.cost import CostModel, SharedWork
from hybridgpu.planner.model import (
    CloudRates,
    DemandSample,
    FleetCost,
    JobDemand,
    OwnedNodeType,
    PlanInputs,
)
from hybridgpu.planner.optimize import OwnedSizeCost, cost_by_owned_gpus, optimal_fleet
from hybridgpu.planner.sensitivity import (
    FlipPoint,
    SensitivityCase,
    flip_points,
    sensitivity_cases,
)


@dataclass(frozen=True, slots=True)
class CapitalFigures:
    """A fleet's hardware money over the horizon, dollars: ``charged`` (in the core cost) is
    the value the hardware loses plus the cost of capital; ``residual_value`` is what it is
    still worth at the end (book value), not charged."""

    capex: float
    """The purchase price of the fleet bought at the start."""
    purchases: float
    """Everything bought over the horizon (nodes are bought again at the end of their life)."""
    charged: float
    residual_value: float

    @property
    def cost_of_capital(self) -> float:
        return self.charged - (self.purchases - self.residual_value)


def capital_figures(inputs: PlanInputs, nodes: Sequence[int]) -> CapitalFigures:
    """Capex, capital charged over the horizon and residual value of ``nodes`` (per type)."""
    years = inputs.horizon_months / 12
    pairs = list(zip(inputs.node_types, nodes, strict=True))
    return CapitalFigures(
        capex=sum(n * t.capex_dollars for t, n in pairs),
        purchases=sum(n * t.capex_dollars * t.purchases(years) for t, n in pairs),
        charged=sum(n * t.capital_per_year_dollars * years for t, n in pairs),
        residual_value=sum(n * t.residual_value_dollars(years) for t, n in pairs),
    )


@dataclass(frozen=True)
class CapacityPlanResult:
    """The recommendation, the fleets it is compared with, and how it moves with its inputs."""

    inputs: PlanInputs
    recommended: FleetCost
    current: FleetCost
    all_on_demand_dollars: float
    cost_curve: tuple[OwnedSizeCost, ...]
    sensitivity: tuple[SensitivityCase, ...] = field(default=())
    flip_points: tuple[FlipPoint, ...] = field(default=())

    @property
    def runners_up(self) -> tuple[OwnedSizeCost | None, OwnedSizeCost | None]:
        """The cheapest fleets owning fewer and more GPUs than the recommendation (None when
        there is none): how flat the cost is around the choice."""
        owned = self.recommended.owned_gpus
        fewer = [c for c in self.cost_curve if c.owned_gpus < owned]
        more = [c for c in self.cost_curve if c.owned_gpus > owned]
        return (
            min(fewer, key=lambda c: c.total_dollars) if fewer else None,
            min(more, key=lambda c: c.total_dollars) if more else None,
        )

    @property
    def capital(self) -> CapitalFigures:
        """The recommended fleet's capex, capital charged and residual value."""
        return capital_figures(self.inputs, self.recommended.nodes)

    @property
    def months(self) -> float:
        return float(self.inputs.horizon_months)

    def monthly(self, dollars: float) -> float:
        return dollars / self.months

    @property
    def savings_vs_on_demand(self) -> float:
        """Share of the all-on-demand bill saved, 0..1."""
        return _saving(self.recommended.total_dollars, self.all_on_demand_dollars)

    @property
    def savings_vs_current(self) -> float:
        """Share of today's fleet's total cost saved, 0..1."""
        return _saving(self.recommended.total_dollars, self.current.total_dollars)

    @property
    def break_even_utilization(self) -> float:
        """Utilization above which owning the cheapest node type beats renting on demand, 0..1."""
        return min(break_even_utilizations(self.inputs).values())


def _saving(cost: float, reference: float) -> float:
    return 0.0 if reference <= 0 else 1.0 - cost / reference


def break_even_utilizations(inputs: PlanInputs) -> dict[str, float]:
    """Per node type: the share of hours a GPU must be busy for owning to beat on demand."""
    od = inputs.cloud.on_demand_per_gpu_hour
    return {t.name: t.gpu_hour_dollars / od for t in inputs.node_types}


def plan_capacity(inputs: PlanInputs, *, with_sensitivity: bool = True) -> CapacityPlanResult:
    """The cheapest owned fleet for ``inputs`` and everything reported about it."""
    shared = SharedWork()
    model = CostModel(inputs, shared)
    curve = tuple(cost_by_owned_gpus(model))
    nodes = optimal_fleet(model)
    current = tuple(t.current_nodes for t in inputs.node_types)
    cases: list[SensitivityCase] = []
    flips: list[FlipPoint] = []
    if with_sensitivity:
        cases = sensitivity_cases(inputs, shared)
        flips = flip_points(inputs, nodes, shared)
    return CapacityPlanResult(
        inputs=inputs,
        recommended=model.fleet_cost(nodes),
        current=model.fleet_cost(current),
        all_on_demand_dollars=model.all_on_demand_dollars(),
        cost_curve=curve,
        sensitivity=tuple(cases),
        flip_points=tuple(flips),
    )


def inputs_from_spec(
    spec: CapacityPlanSpec,
    history: Sequence[DemandSample],
    jobs: Sequence[JobDemand] = (),
) -> PlanInputs:
    """PlanInputs of a CapacityPlan spec and a demand history (and its jobs, for a trace)."""
    cloud = spec.cloud
    return PlanInputs(
        history=tuple(history),
        node_types=tuple(
            OwnedNodeType(
                name=c.name,
                gpus_per_node=c.gpus_per_node,
                capex_dollars=c.capex_per_node,
                amortization_years=c.amortization_years,
                power_watts=c.power_watts_per_node,
                pue=c.pue,
                electricity_per_kwh=c.electricity_per_kwh,
                ops_per_node_hour=c.ops_per_node_hour,
                max_nodes=c.max_nodes,
                current_nodes=c.current_nodes,
                cost_of_capital_per_year=spec.cost_of_capital_percent_per_year / 100.0,
            )
            for c in spec.candidates
        ),
        cloud=CloudRates(
            on_demand_per_gpu_hour=cloud.on_demand_per_gpu_hour,
            spot_per_gpu_hour=cloud.spot_per_gpu_hour,
            spot_interruptions_per_hour=cloud.spot_interruptions_per_hour,
            spot_restart_overhead_hours=parse_duration_seconds(cloud.spot_restart_overhead) / 3600,
            node_startup_hours=parse_duration_seconds(cloud.node_startup) / 3600,
            idle_release_hours=parse_duration_seconds(cloud.idle_before_release) / 3600,
        ),
        horizon_months=spec.horizon_months,
        demand_growth_per_year=spec.demand_growth_percent_per_year / 100.0,
        preemptible_share=spec.preemptible_share,
        jobs=tuple(jobs),
    )


def plan_status(result: CapacityPlanResult) -> CapacityPlanStatus:
    """The CapacityPlan status fields of a result (conditions and times are the caller's)."""
    fleet = result.recommended
    months = result.months
    capital = result.capital
    return CapacityPlanStatus(
        recommendations=_recommendations(result.inputs, fleet.nodes),
        recommended_nodes=sum(fleet.nodes),
        expected_owned_utilization=round(fleet.owned_utilization, 4),
        expected_elastic_gpu_hours=round(fleet.elastic_gpu_hours / months, 1),
        expected_spot_gpu_hours=round(fleet.spot_gpu_hours / months, 1),
        monthly_cost=MonthlyCost(
            core=round(fleet.core_dollars / months, 2),
            elastic=round(fleet.elastic_dollars / months, 2),
            spot=round(fleet.spot_dollars / months, 2),
            total=round(fleet.total_dollars / months, 2),
        ),
        savings_vs_on_demand_percent=round(100 * result.savings_vs_on_demand, 2),
        savings_vs_current_percent=round(100 * result.savings_vs_current, 2),
        break_even_utilization=round(result.break_even_utilization, 4),
        sensitivity=[
            SensitivityRow(
                parameter=c.parameter,
                change=c.change,
                recommended_nodes=c.total_nodes,
                monthly_cost=round(c.monthly_dollars, 2),
            )
            for c in result.sensitivity
        ],
        owned_capital=OwnedCapital(
            capex=round(capital.capex, 2),
            charged=round(capital.charged, 2),
            cost_of_capital=round(capital.cost_of_capital, 2),
            residual_value=round(capital.residual_value, 2),
        ),
        flip_points=[
            FlipPointStatus(
                parameter=f.parameter,
                change=f.label,
                value=f.value,
                recommended_nodes=None if f.nodes is None else sum(f.nodes),
                recommendations=[] if f.nodes is None else _recommendations(result.inputs, f.nodes),
            )
            for f in result.flip_points
        ],
    )


def _recommendations(inputs: PlanInputs, nodes: Sequence[int]) -> list[Recommendation]:
    return [
        Recommendation(name=t.name, nodes=n) for t, n in zip(inputs.node_types, nodes, strict=True)
    ]
