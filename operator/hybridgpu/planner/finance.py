"""What a finance team reads off a procurement plan: cash flow by quarter, its net present
value at the cost of capital, the mix of supply, the owned-vs-committed split of the base, the
cost per million tokens and when to use an adjustment window."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridgpu.planner.model import HOURS_PER_MONTH, PlanInputs
from hybridgpu.planner.procure import Procurement


@dataclass(frozen=True, slots=True)
class QuarterCash:
    """Dollars paid in one quarter (``index`` from 0), not discounted."""

    index: int
    capex: float
    owned_operating: float
    committed: float
    on_demand: float
    spot: float
    residual_value: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.capex
            + self.owned_operating
            + self.committed
            + self.on_demand
            + self.spot
            - self.residual_value
        )


def _monthly(plan: Procurement) -> list[tuple[float, float, float]]:
    """(committed, on-demand, spot) dollars of every month: each period's spread evenly."""
    months: list[tuple[float, float, float]] = []
    for cost in plan.periods:
        share = 1.0 / cost.period.months
        for _ in range(cost.period.months):
            months.append(
                (
                    cost.committed_dollars * share,
                    cost.elastic_dollars * share,
                    cost.spot_dollars * share,
                )
            )
    return months


def cash_flow(inputs: PlanInputs, plan: Procurement) -> list[QuarterCash]:
    """Quarter by quarter: owned hardware bought when it is bought (at the start or in a
    later tranche, and again at the end of each life within the horizon), its power and ops
    from then on, the commitment (upfront
    spread over the term), expected on-demand and spot spend, and the owned hardware's
    residual value as an inflow in the last quarter."""
    horizon = inputs.horizon_months
    quarters = math.ceil(horizon / 3)
    capex = [0.0] * quarters
    operating = [0.0] * quarters
    residual = 0.0
    for start, added in plan.tranches():
        for node, count in zip(inputs.node_types, added, strict=True):
            if count == 0:
                continue
            life_months = node.amortization_years * 12
            bought = float(start)
            while bought < horizon - 1e-9:
                capex[int(bought // 3)] += count * node.capex_dollars
                bought += life_months
            cost = node.cost
            hourly = (cost.power_per_hour + cost.ops_per_hour) * count
            for month in range(start, horizon):
                operating[month // 3] += hourly * HOURS_PER_MONTH
            residual += count * node.residual_value_dollars((horizon - start) / 12)
    cloud = [[0.0, 0.0, 0.0] for _ in range(quarters)]
    for month, parts in enumerate(_monthly(plan)):
        for i, dollars in enumerate(parts):
            cloud[month // 3][i] += dollars
    return [
        QuarterCash(
            index=q,
            capex=capex[q],
            owned_operating=operating[q],
            committed=cloud[q][0],
            on_demand=cloud[q][1],
            spot=cloud[q][2],
            residual_value=residual if q == quarters - 1 else 0.0,
        )
        for q in range(quarters)
    ]


def npv(flows: list[QuarterCash], rate_per_year: float, horizon_months: int) -> float:
    """Present value of the cash flow at ``rate_per_year``: capex paid at the start of its
    quarter, other spend mid-quarter, the residual value at the end of the horizon."""

    def discount(years: float) -> float:
        return float((1.0 + rate_per_year) ** -years)

    value = 0.0
    for q in flows:
        start = 3 * q.index / 12
        months = min(3, horizon_months - 3 * q.index)
        middle = start + months / 24
        value += q.capex * discount(start)
        value += (q.owned_operating + q.committed + q.on_demand + q.spot) * discount(middle)
        value -= q.residual_value * discount(horizon_months / 12)
    return value


@dataclass(frozen=True, slots=True)
class Mix:
    """Shares of GPU-hours served and of dollars per kind of supply, 0..1."""

    gpu_hours: dict[str, float]
    dollars: dict[str, float]
    base_owned_share: float
    """Owned GPU-hours over owned + committed GPU-hours paid for (the base capacity)."""


def mix(inputs: PlanInputs, plan: Procurement) -> Mix:
    """Where the demand runs and where the money goes."""
    served = {
        "owned": sum(p.owned_used_gpu_hours for p in plan.periods),
        "committed": sum(p.committed_used_gpu_hours for p in plan.periods),
        "onDemand": sum(p.elastic_gpu_hours for p in plan.periods),
        "spot": sum(p.spot_gpu_hours for p in plan.periods),
    }
    dollars = {
        "owned": sum(p.owned_dollars for p in plan.periods),
        "committed": sum(p.committed_dollars for p in plan.periods),
        "onDemand": sum(p.elastic_dollars for p in plan.periods),
        "spot": sum(p.spot_dollars for p in plan.periods),
    }
    owned_capacity = sum(p.owned_gpus * p.period.hours for p in plan.periods)
    committed_capacity = sum(p.committed_gpu_hours for p in plan.periods)
    base = owned_capacity + committed_capacity
    return Mix(
        gpu_hours=_shares(served),
        dollars=_shares(dollars),
        base_owned_share=owned_capacity / base if base > 0 else 0.0,
    )


def _shares(values: dict[str, float]) -> dict[str, float]:
    total = sum(values.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in values.items()}


@dataclass(frozen=True, slots=True)
class Adjustment:
    """The committed level of ``offer`` changes at the start of ``month``."""

    month: int
    from_units: int
    to_units: int
    offer: str = ""


def adjustments(plan: Procurement) -> list[Adjustment]:
    """Every window whose level differs from the one before, for each offer signed (the
    first window from what is held today, when something is), in the order of the months."""
    out: list[Adjustment] = []
    for i, offer in enumerate(plan.offers):
        levels = plan.schedule_of(i)
        held = offer.current_units
        if held and levels and levels[0] != held:
            out.append(Adjustment(0, held, levels[0], offer.name))
        out += [
            Adjustment(plan.periods[k].period.start_month, levels[k - 1], levels[k], offer.name)
            for k in range(1, len(levels))
            if levels[k] != levels[k - 1]
        ]
    return sorted(out, key=lambda a: a.month)


def next_adjustment_text(plan: Procurement) -> str:
    """The next adjustment window to use, in words (the plan is recomputed on its schedule:
    it always starts from now)."""
    if not plan.offers:
        return "no commitment: nothing to adjust"
    changes = adjustments(plan)
    named = len(plan.offers) > 1  # with one offer, "the commitment" is unambiguous
    if not changes:
        if not plan.levels:
            return "nothing to adjust"
        held = " and ".join(
            f"{u} node(s) of {o.name}" if named else f"{u} committed node(s)"
            for o, u in zip(plan.offers, plan.levels[0], strict=True)
        )
        return f"keep {held} through every window of the horizon"
    month = changes[0].month
    when = (
        "now (the window open today)" if month == 0 else f"at the window starting in month {month}"
    )
    parts = [
        f"{'raise' if a.to_units > a.from_units else 'lower'} the "
        f"{a.offer + ' ' if named else ''}commitment from {a.from_units} to {a.to_units} node(s)"
        for a in changes
        if a.month == month
    ]
    return f"{' and '.join(parts)} {when}"


def cost_per_million_tokens(
    total_dollars: float, demand_gpu_hours: float, tokens_per_gpu_hour: float | None
) -> float | None:
    """Dollars per million tokens of the demand (None without a token rate)."""
    if tokens_per_gpu_hour is None or demand_gpu_hours <= 0:
        return None
    return total_dollars / (demand_gpu_hours * tokens_per_gpu_hour) * 1e6


@dataclass(frozen=True, slots=True)
class ModelFlopsUtilization:
    """Model FLOPs utilization (MFU): the model's FLOPs done over the GPUs' peak, 0..1."""

    peak_tflops_per_gpu: float
    peak_source: str
    busy: float
    """Of a demand-class GPU while it works (the token rate)."""
    paid: float
    """Of every GPU-hour paid for (owned and committed capacity, on-demand and spot billed):
    the busy figure times demand GPU-hours over paid GPU-hours."""


def model_flops_utilization(
    inputs: PlanInputs,
    plan: Procurement,
    demand_gpu_hours: float,
    tokens_per_gpu_hour: float,
    flops_per_token: float,
    peak_tflops_per_gpu: float,
    peak_source: str,
) -> ModelFlopsUtilization:
    """MFU of a busy GPU (tokens/s x FLOPs per token / peak FLOPS) and of the capacity the
    plan pays for, in demand-class GPUs."""
    busy = tokens_per_gpu_hour / 3600.0 * flops_per_token / (peak_tflops_per_gpu * 1e12)
    paid = sum(
        p.owned_gpus * p.period.hours
        + p.committed_gpu_hours
        + p.elastic_gpu_hours
        + p.spot_gpu_hours
        for p in plan.periods
    )
    return ModelFlopsUtilization(
        peak_tflops_per_gpu=peak_tflops_per_gpu,
        peak_source=peak_source,
        busy=busy,
        paid=busy * demand_gpu_hours / paid if paid > 0 else 0.0,
    )
