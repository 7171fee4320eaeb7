"""The plan: the cheapest fleet, the fleets it is compared with, how it moves with its inputs,
and the CapacityPlan status of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import (
    CapacityPlanSpec,
    CapacityPlanStatus,
    MonthlyCost,
    Recommendation,
    SensitivityRow,
)
from hybridgpu.planner.cost import CostModel, ReplayCache
from hybridgpu.planner.model import (
    CloudRates,
    DemandSample,
    FleetCost,
    JobDemand,
    OwnedNodeType,
    PlanInputs,
)
from hybridgpu.planner.optimize import OwnedSizeCost, cost_by_owned_gpus, optimal_fleet


@dataclass(frozen=True, slots=True)
class SensitivityCase:
    """The plan again with one input changed."""

    parameter: str
    change: str
    nodes: tuple[int, ...]
    monthly_dollars: float
    savings_vs_on_demand: float

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes)


@dataclass(frozen=True)
class CapacityPlanResult:
    """The recommendation, the fleets it is compared with, and how it moves with its inputs."""

    inputs: PlanInputs
    recommended: FleetCost
    current: FleetCost
    all_on_demand_dollars: float
    cost_curve: tuple[OwnedSizeCost, ...]
    sensitivity: tuple[SensitivityCase, ...] = field(default=())

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


def _with_electricity(inputs: PlanInputs, factor: float) -> PlanInputs:
    types = tuple(
        replace(t, electricity_per_kwh=t.electricity_per_kwh * factor) for t in inputs.node_types
    )
    return replace(inputs, node_types=types)


def _with_amortization(inputs: PlanInputs, delta_years: float) -> PlanInputs:
    types = tuple(
        replace(t, amortization_years=max(t.amortization_years + delta_years, 0.5))
        for t in inputs.node_types
    )
    return replace(inputs, node_types=types)


def sensitivity_inputs(inputs: PlanInputs) -> list[tuple[str, str, PlanInputs]]:
    """The inputs the sensitivity table varies: spot price, electricity, amortization, growth."""
    cloud = inputs.cloud
    growth = inputs.demand_growth_per_year
    cases: list[tuple[str, str, PlanInputs]] = []
    for pct in (-30, 30):
        spot = replace(cloud, spot_per_gpu_hour=cloud.spot_per_gpu_hour * (1 + pct / 100))
        cases.append(("spot price", f"{pct:+d}%", replace(inputs, cloud=spot)))
    for pct in (-50, 50):
        cases.append(("electricity price", f"{pct:+d}%", _with_electricity(inputs, 1 + pct / 100)))
    for years in (-1, 1):
        cases.append(("amortization years", f"{years:+d}y", _with_amortization(inputs, years)))
    for points in (-20, 20):
        grown = max(growth + points / 100, -0.9)
        cases.append(
            ("demand growth", f"{points:+d}pp/y", replace(inputs, demand_growth_per_year=grown))
        )
    return cases


def plan_capacity(inputs: PlanInputs, *, with_sensitivity: bool = True) -> CapacityPlanResult:
    """The cheapest owned fleet for ``inputs`` and everything reported about it."""
    replays: ReplayCache = {}
    model = CostModel(inputs, replays)
    curve = tuple(cost_by_owned_gpus(model))
    nodes = optimal_fleet(model)
    current = tuple(t.current_nodes for t in inputs.node_types)
    cases: list[SensitivityCase] = []
    if with_sensitivity:
        for parameter, change, varied in sensitivity_inputs(inputs):
            other = CostModel(varied, replays)
            other_nodes = optimal_fleet(other)
            other_total = other.total_dollars(other_nodes)
            cases.append(
                SensitivityCase(
                    parameter=parameter,
                    change=change,
                    nodes=other_nodes,
                    monthly_dollars=other_total / varied.horizon_months,
                    savings_vs_on_demand=_saving(other_total, other.all_on_demand_dollars()),
                )
            )
    return CapacityPlanResult(
        inputs=inputs,
        recommended=model.fleet_cost(nodes),
        current=model.fleet_cost(current),
        all_on_demand_dollars=model.all_on_demand_dollars(),
        cost_curve=curve,
        sensitivity=tuple(cases),
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
    return CapacityPlanStatus(
        recommendations=[
            Recommendation(name=t.name, nodes=n)
            for t, n in zip(result.inputs.node_types, fleet.nodes, strict=True)
        ],
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
    )
