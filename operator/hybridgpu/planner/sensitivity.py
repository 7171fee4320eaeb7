"""How the plan moves with its inputs: the plan again with one input changed (the sensitivity
table), and per input and direction the nearest change that changes the recommended fleet
(its flip points)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hybridgpu.planner.cost import CostModel, SharedWork, SideBySide
from hybridgpu.planner.model import OwnedNodeType, PlanInputs
from hybridgpu.planner.optimize import optimal_fleet

# Flip search: the fractions of a lever's range looked at, nearest first; between the last
# one that keeps the fleet and the first that changes it, bisection narrows the change down.
_SEARCH_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0)
_BISECTIONS = 12


@dataclass(frozen=True, slots=True)
class Lever:
    """One input the sensitivity table moves. ``apply(inputs, change)`` gives the inputs with
    the change: relative (0.3 = +30 %) when ``relative``, else in the lever's own unit."""

    parameter: str
    relative: bool
    unit: str
    table_changes: tuple[float, ...]
    lowest_change: float
    highest_change: float
    apply: Callable[[PlanInputs, float], PlanInputs]
    value: Callable[[PlanInputs], str]
    """The input's value in ``inputs``, with its unit (for the flip points)."""

    def label(self, change: float) -> str:
        """The change as the table shows it: +30%, -1y, +20pp/y."""
        shown = 100 * change if self.relative or self.unit.startswith("pp") else change
        digits = 2 if abs(shown) < 1 else 1
        return f"{shown:+.{digits}f}".removesuffix(".00").removesuffix(".0") + self.unit


def _types(inputs: PlanInputs, change: Callable[[OwnedNodeType], OwnedNodeType]) -> PlanInputs:
    return replace(inputs, node_types=tuple(change(t) for t in inputs.node_types))


def _spot(inputs: PlanInputs, change: float) -> PlanInputs:
    price = inputs.cloud.spot_per_gpu_hour * (1 + change)
    return replace(inputs, cloud=replace(inputs.cloud, spot_per_gpu_hour=price))


def _on_demand(inputs: PlanInputs, change: float) -> PlanInputs:
    price = inputs.cloud.on_demand_per_gpu_hour * (1 + change)
    return replace(inputs, cloud=replace(inputs.cloud, on_demand_per_gpu_hour=price))


def _electricity(inputs: PlanInputs, change: float) -> PlanInputs:
    return _types(
        inputs, lambda t: replace(t, electricity_per_kwh=t.electricity_per_kwh * (1 + change))
    )


def _capex(inputs: PlanInputs, change: float) -> PlanInputs:
    return _types(inputs, lambda t: replace(t, capex_dollars=t.capex_dollars * (1 + change)))


def _amortization(inputs: PlanInputs, change: float) -> PlanInputs:
    return _types(
        inputs,
        lambda t: replace(t, amortization_years=max(t.amortization_years + change, 0.5)),
    )


def _cost_of_capital(inputs: PlanInputs, change: float) -> PlanInputs:
    return _types(
        inputs,
        lambda t: replace(
            t, cost_of_capital_per_year=max(t.cost_of_capital_per_year + change, 0.0)
        ),
    )


def _growth(inputs: PlanInputs, change: float) -> PlanInputs:
    return replace(inputs, demand_growth_per_year=max(inputs.demand_growth_per_year + change, -0.9))


def _per_type(inputs: PlanInputs, show: Callable[[OwnedNodeType], str]) -> str:
    return ", ".join(dict.fromkeys(show(t) for t in inputs.node_types))


def levers(inputs: PlanInputs) -> tuple[Lever, ...]:
    """The inputs the sensitivity table moves, with today's value of each."""
    growth = inputs.demand_growth_per_year
    shortest_life = min(t.amortization_years for t in inputs.node_types)
    lowest_rate = min(t.cost_of_capital_per_year for t in inputs.node_types)
    return (
        Lever(
            "spot price", True, "%", (-0.3, 0.3), -0.9, 3.0, _spot,
            lambda i: f"${i.cloud.spot_per_gpu_hour:,.2f}/GPU-h",
        ),
        Lever(
            "on-demand price", True, "%", (), -0.9, 3.0, _on_demand,
            lambda i: f"${i.cloud.on_demand_per_gpu_hour:,.2f}/GPU-h",
        ),
        Lever(
            "electricity price", True, "%", (-0.5, 0.5), -1.0, 3.0, _electricity,
            lambda i: _per_type(i, lambda t: f"${t.electricity_per_kwh:,.3f}/kWh"),
        ),
        Lever(
            "capex", True, "%", (-0.2, 0.2), -0.9, 3.0, _capex,
            lambda i: _per_type(i, lambda t: f"{t.name} ${t.capex_dollars:,.0f}"),
        ),
        Lever(
            "amortization years", False, "y", (-1.0, 1.0), 0.5 - shortest_life, 10.0,
            _amortization,
            lambda i: _per_type(i, lambda t: f"{t.amortization_years:.3g} years"),
        ),
        Lever(
            "cost of capital", False, "pp", (-0.04, 0.04), -lowest_rate, 0.3, _cost_of_capital,
            lambda i: _per_type(i, lambda t: f"{100 * t.cost_of_capital_per_year:.1f}%/year"),
        ),
        Lever(
            "demand growth", False, "pp/y", (-0.2, 0.2), -0.9 - growth, 2.0, _growth,
            lambda i: f"{100 * i.demand_growth_per_year:+.1f}%/year",
        ),
    )  # fmt: skip


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


@dataclass(frozen=True, slots=True)
class FlipPoint:
    """The nearest change of one input, in one direction, that changes the recommended fleet:
    ``nodes`` at ``change``, today's fleet still at ``kept`` (the largest change looked at that
    keeps it). ``nodes`` is None when the searched range (to ``change``) ends first."""

    parameter: str
    direction: int  # -1 down, +1 up
    change: float
    kept: float
    label: str
    value: str
    nodes: tuple[int, ...] | None

    @property
    def found(self) -> bool:
        return self.nodes is not None


def _saving(cost: float, reference: float) -> float:
    return 0.0 if reference <= 0 else 1.0 - cost / reference


def _case(parameter: str, change: str, varied: PlanInputs, shared: SharedWork) -> SensitivityCase:
    model = CostModel(varied, shared)
    nodes = optimal_fleet(model)
    total = model.total_dollars(nodes)
    return SensitivityCase(
        parameter=parameter,
        change=change,
        nodes=nodes,
        monthly_dollars=total / varied.horizon_months,
        savings_vs_on_demand=_saving(total, model.all_on_demand_dollars()),
    )


def without_residual_value(inputs: PlanInputs) -> PlanInputs | None:
    """The inputs with owned hardware worth nothing when the horizon ends (recovered over the
    horizon instead of its longer life); None when no node type outlives the horizon."""
    horizon_years = inputs.horizon_months / 12
    if all(t.amortization_years <= horizon_years for t in inputs.node_types):
        return None
    return _types(
        inputs, lambda t: replace(t, amortization_years=min(t.amortization_years, horizon_years))
    )


def sensitivity_cases(inputs: PlanInputs, shared: SharedWork) -> list[SensitivityCase]:
    """The plan recomputed with each lever's table changes, and with no residual value."""
    cases = [
        _case(lever.parameter, lever.label(change), lever.apply(inputs, change), shared)
        for lever in levers(inputs)
        for change in lever.table_changes
    ]
    worthless = without_residual_value(inputs)
    if worthless is not None:
        cases.append(_case("residual value", "none", worthless, shared))
    return cases


def flip_points(
    inputs: PlanInputs,
    nodes: tuple[int, ...],
    shared: SharedWork,
    side_by_side: SideBySide | None = None,
) -> list[FlipPoint]:
    """For every lever and direction, the smallest change found that makes the plan recommend
    another fleet than ``nodes``: a scan over ``_SEARCH_FRACTIONS`` of the lever's range, then
    bisection. A change and change back between two scanned points is not seen. With
    ``side_by_side`` (and more than one worker) the levers' searches run at once; the same
    points."""

    def fleet(lever: Lever, change: float) -> tuple[int, ...]:
        return optimal_fleet(CostModel(lever.apply(inputs, change), shared))

    def search(lever: Lever, direction: int, end: float) -> FlipPoint:
        kept, changed, other = 0.0, None, nodes
        for fraction in _SEARCH_FRACTIONS:
            other = fleet(lever, end * fraction)
            if other != nodes:
                changed = end * fraction
                break
            kept = end * fraction
        if changed is None:
            return FlipPoint(
                lever.parameter, direction, end, end, f"none to {lever.label(end)}",
                lever.value(lever.apply(inputs, end)), None,
            )  # fmt: skip
        for _ in range(_BISECTIONS):
            middle = (kept + changed) / 2
            middle_fleet = fleet(lever, middle)
            if middle_fleet == nodes:
                kept = middle
            else:
                changed, other = middle, middle_fleet
        return FlipPoint(
            lever.parameter, direction, changed, kept, lever.label(changed),
            lever.value(lever.apply(inputs, changed)), other,
        )  # fmt: skip

    searches = [
        (lever, direction, end)
        for lever in levers(inputs)
        for direction, end in ((-1, lever.lowest_change), (1, lever.highest_change))
        if end * direction > 0  # else nothing to search on this side (e.g. already at 0 %)
    ]
    if side_by_side is None or side_by_side.workers < 2 or len(searches) < 2:
        return [search(*s) for s in searches]
    found = side_by_side.run(
        {str(i): (lambda _, s=s: search(*s)) for i, s in enumerate(searches)}  # type: ignore[misc]
    )
    return [found[str(i)] for i in range(len(searches))]
