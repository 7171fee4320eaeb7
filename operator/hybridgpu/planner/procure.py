"""Procurement: the mix of owned, committed, on-demand and spot capacity a buyer signs, period
by period over the horizon.

Four kinds of supply serve the demand of each period (a quarter, or a commitment's adjustment
window):

- **owned** nodes, bought at the start (``OwnedNodeType``: capital recovery, power, ops; paid
  every hour);
- **committed** cloud capacity (``CommittedOffer``: a reservation, savings plan or lease of a
  1- or 3-year term), a level of ``units`` nodes per period, paid every hour whether used or
  not. Raising the level in a window adds a tranche that ends with the contract (delivery in
  phases); lowering it is allowed by at most ``max_decrease`` of the level per window, and
  freely when the term ends (renewal). It serves firm (critical + standard) work only, as
  on-demand capacity does;
- **on demand** for firm demand above owned + committed;
- **spot** for preemptible demand above what owned nodes leave (with reruns), or on demand
  when reruns make spot dearer.

A commitment signed within the horizon is paid to the end of its term, which may lie past
the horizon (a 3-year lease renewed in month 36 of a 48-month plan runs to month 72). The
plan charges that tail: the committed level of the last period is kept for the tail's months
at the last period's demand, and what it costs more than committing nothing then (payments
less the on-demand and spot spend it saves; never a gain) is added to the last period. So a
tranche near the end of the horizon is signed only when it pays for itself over the months a
buyer is bound to it.

Fluid (a demand history): firm demand fills committed capacity first (it can serve nothing
else), then owned GPUs; preemptible demand fills what owned GPUs leave. This order is optimal
for any fleet: an owned GPU saves at least as much on firm work as on preemptible work, and a
committed one can only save on firm work. Jobs (a trace): ``replay_jobs`` with the committed
nodes as well as the owned ones; with demand growth the replay's extra cloud hours over the
fluid model at today's demand are added to the fluid model of the period's demand.

``optimal_procurement`` is exact over the candidate grid: for every owned size (the cheapest
node mix of it, as ``optimize.cost_by_owned_gpus``) a dynamic programme over the periods finds
the cheapest committed level of each period under the adjustment rules, for each offer; the
best of all is the plan.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hybridgpu.core.cost import HOURS_PER_YEAR
from hybridgpu.planner.cost import CostModel, SharedWork, _fluid_usage
from hybridgpu.planner.model import (
    HOURS_PER_MONTH,
    DurationCurve,
    PlanInputs,
    Usage,
)
from hybridgpu.planner.optimize import cheapest_mixes
from hybridgpu.planner.replay import replay_jobs

_COST_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class CommittedOffer:
    """Committed cloud capacity on offer: a term, a price, how it may be adjusted."""

    name: str
    term_years: int
    per_gpu_hour: float
    """Effective hourly price per GPU, paid every hour of the term, dollars."""
    upfront_per_gpu: float = 0.0
    """Paid once per GPU when the term starts (and again at each renewal), dollars."""
    gpus_per_unit: int = 8
    """Capacity is committed in whole nodes of this many GPUs."""
    adjustment_months: int = 3
    """Length of an adjustment window: the level may change at the start of each."""
    max_decrease: float = 0.0
    """A window may lower the level by at most this share of it (0.1 = 10 %); 0: never
    within a term."""
    max_increase: float | None = None
    """A window may raise the level by at most this share of it (a co-terminous tranche);
    None: by any amount. At a renewal the level is free either way."""
    max_units: int | None = None
    current_units: int = 0
    """Committed today (a re-plan): the level cannot fall below what the rules allow."""
    started_months_ago: int = 0
    """When the current term started: the windows and renewals fall on its calendar."""

    def __post_init__(self) -> None:
        if self.term_years not in (1, 3):
            raise ValueError(f"committed offer {self.name}: termYears must be 1 or 3")
        if not 1 <= self.adjustment_months <= 12 * self.term_years:
            raise ValueError(
                f"committed offer {self.name}: adjustmentMonths must be 1 to the term's months"
            )
        if not 0 <= self.max_decrease <= 1:
            raise ValueError(f"committed offer {self.name}: the decrease must be 0 to 100%")
        if self.max_increase is not None and self.max_increase < 0:
            raise ValueError(f"committed offer {self.name}: the increase must be 0% or more")
        if self.current_units < 0:
            raise ValueError(f"committed offer {self.name}: currentNodes must be 0 or more")
        if not 0 <= self.started_months_ago < 12 * self.term_years:
            raise ValueError(
                f"committed offer {self.name}: termStartedMonthsAgo must be 0 to the term's "
                "months less 1"
            )

    @property
    def first_levels(self) -> tuple[int, int | None]:
        """The lowest and highest level (None: any) of the first window, from today's
        commitment: any level when nothing is committed; at least the current level when its
        term starts now; within a term, at a window, what a window may lower it to; between
        windows, the current level (it changes only when a window starts)."""
        if self.current_units == 0:
            return 0, None
        ago = self.started_months_ago
        if ago == 0:
            return self.current_units, None
        if ago % self.adjustment_months:
            return self.current_units, self.current_units
        return self.lowest_after(self.current_units), self.highest_after(self.current_units)

    @property
    def effective_per_gpu_hour(self) -> float:
        """Hourly price with the upfront payment spread over the term, dollars per GPU-hour."""
        return self.per_gpu_hour + self.upfront_per_gpu / (self.term_years * HOURS_PER_YEAR)

    def lowest_after(self, units: int) -> int:
        """The lowest level a window may set after ``units`` within the term."""
        return max(math.ceil(units * (1.0 - self.max_decrease) - 1e-9), 0)

    def highest_after(self, units: int) -> int | None:
        """The highest level a window may set after ``units`` within the term (None: any)."""
        if self.max_increase is None:
            return None
        return math.floor(units * (1.0 + self.max_increase) + 1e-9)


@dataclass(frozen=True, slots=True)
class Period:
    """One period of the horizon: months [start_month, start_month + months)."""

    index: int
    start_month: int
    months: int

    @property
    def hours(self) -> float:
        return self.months * HOURS_PER_MONTH


def periods(horizon_months: int, months_per_period: int, offset: int = 0) -> list[Period]:
    """The horizon cut into periods of ``months_per_period`` on a calendar that started
    ``offset`` months ago (the first and last may be shorter)."""
    out: list[Period] = []
    start = 0
    while start < horizon_months:
        to_boundary = months_per_period - (start + offset) % months_per_period
        months = min(to_boundary, horizon_months - start)
        out.append(Period(len(out), start, months))
        start += months
    return out


def is_renewal(offer: CommittedOffer, period: Period) -> bool:
    """A term of ``offer`` starts with this period (today's term's calendar: the first
    period without a current term, then every term length)."""
    return (period.start_month + offer.started_months_ago) % (12 * offer.term_years) == 0


@dataclass(frozen=True, slots=True)
class PeriodCost:
    """What one period costs with a given fleet and commitment, and where demand runs."""

    period: Period
    owned_dollars: float
    committed_dollars: float
    elastic_dollars: float
    spot_dollars: float
    owned_used_gpu_hours: float
    committed_gpu_hours: float
    """Committed GPU-hours paid for (level x hours)."""
    committed_used_gpu_hours: float
    elastic_gpu_hours: float
    spot_gpu_hours: float
    after_horizon_months: int = 0
    """Months the commitment of this (last) period runs past the horizon."""
    after_horizon_paid_dollars: float = 0.0
    """Committed payments due in those months."""
    after_horizon_dollars: float = 0.0
    """What those months cost more than committing nothing then, at this period's demand
    (0 or more): charged to the plan."""

    @property
    def total_dollars(self) -> float:
        return (
            self.owned_dollars
            + self.committed_dollars
            + self.elastic_dollars
            + self.spot_dollars
            + self.after_horizon_dollars
        )


class ProcurementModel:
    """The cost of any owned fleet and committed level in any period of the horizon."""

    def __init__(
        self,
        inputs: PlanInputs,
        offer: CommittedOffer | None,
        shared: SharedWork | None = None,
    ) -> None:
        self.inputs = inputs
        self.offer = offer
        self.shared = SharedWork() if shared is None else shared
        self.owned_model = CostModel(inputs, self.shared)
        self.periods = periods(
            inputs.horizon_months,
            offer.adjustment_months if offer is not None else 3,
            offer.started_months_ago if offer is not None else 0,
        )
        self.unit_gpus = offer.gpus_per_unit if offer is not None else 1
        self.after_horizon_months = _after_horizon_months(offer, self.periods)
        self._levels = _history_levels(inputs)
        self._window_hours = _window_hours(inputs)
        self._curves: dict[tuple[tuple[float, ...], int], tuple[DurationCurve, DurationCurve]] = {}
        self._committed_used: dict[tuple[tuple[float, ...], int], float] = {}
        self._replays: dict[tuple[tuple[int, ...], int], Usage] = {}
        self._factors = {p.index: _period_factors(inputs, p) for p in self.periods}
        self._period_costs: dict[
            tuple[tuple[float, ...], int, tuple[int, ...], int, bool], PeriodCost
        ] = {}
        firm_peak = max((f for f, _, _ in self._levels), default=0.0)
        grown = max((max(fs) for fs in self._factors.values()), default=1.0)
        units = math.ceil(firm_peak * grown / self.unit_gpus - 1e-9) if offer is not None else 0
        if offer is not None and offer.max_units is not None:
            units = min(units, offer.max_units)
        if offer is not None:
            units = max(units, offer.current_units)
        self.max_units = units
        """Committing to more than the firm peak never pays: the level could be lowered to it
        (every window allows that) and serve the same work for less."""

    # ------------------------------------------------------------------ usage
    def _fluid(self, factors: tuple[float, ...], committed_gpus: int, owned_gpus: int) -> Usage:
        """GPU-hours per calendar month at these demand factors (one per month, averaged)."""
        key = (factors, committed_gpus)
        curves = self._curves.get(key)
        if curves is None:
            firm_points: list[tuple[float, float]] = []
            total_points: list[tuple[float, float]] = []
            used = 0.0
            per_month = 1.0 / len(factors)
            for factor in factors:
                for firm, preemptible, hours in self._levels:
                    weight = hours * per_month
                    left = max(firm * factor - committed_gpus, 0.0)
                    used += min(firm * factor, committed_gpus) * weight
                    firm_points.append((left, weight))
                    total_points.append((left + preemptible * factor, weight))
            curves = self._curves[key] = (DurationCurve(firm_points), DurationCurve(total_points))
            self._committed_used[key] = used
        usage = _fluid_usage(curves[0], curves[1], owned_gpus, self.inputs.cloud)
        return replace(usage, committed=self._committed_used[key])

    def _replay(self, nodes: tuple[int, ...], units: int) -> Usage:
        """GPU-hours per calendar month of the trace replayed on this fleet."""
        key = (nodes, units)
        usage = self._replays.get(key)
        if usage is None and units == 0 and self.inputs.demand_growth_per_year == 0:
            # The owned-only replay the plan's fleet search made already (shared cache).
            usage = self.owned_model.usage(nodes).scaled(1.0 / self.inputs.horizon_months)
        if usage is None:
            sizes = [
                k
                for n, k in zip(nodes, self.owned_model.gpus_per_node, strict=True)
                for _ in range(n)
            ]
            usage = replay_jobs(
                self.inputs.jobs,
                sizes,
                self.inputs.cloud,
                committed_node_gpus=[self.unit_gpus] * units,
                share_replicas=self.inputs.share_replicas,
            ).scaled(HOURS_PER_MONTH / self._window_hours)
            self._replays[key] = usage
        return usage

    def usage(self, period: Period, nodes: Sequence[int], units: int) -> Usage:
        """GPU-hours of ``period`` with ``nodes`` owned (per type) and ``units`` committed."""
        owned = self.owned_model.owned_gpus(nodes)
        committed = units * self.unit_gpus
        factors = self._factors[period.index]
        if not self.inputs.jobs:
            monthly = self._fluid(factors, committed, owned)
        else:
            monthly = self._replay(tuple(nodes), units)
            if any(f != 1.0 for f in factors):
                flat = self._fluid((1.0,), committed, owned)
                grown = self._fluid(factors, committed, owned)
                monthly = Usage(
                    owned=max(grown.owned + monthly.owned - flat.owned, 0.0),
                    elastic=max(grown.elastic + monthly.elastic - flat.elastic, 0.0),
                    spot=max(grown.spot + monthly.spot - flat.spot, 0.0),
                    committed=max(grown.committed + monthly.committed - flat.committed, 0.0),
                )
        return monthly.scaled(period.months)

    def period_cost(self, period: Period, nodes: Sequence[int], units: int) -> PeriodCost:
        """The full breakdown of one period (periods of the same months and demand factors
        cost the same: without growth, every full window)."""
        last = period.index == len(self.periods) - 1 and self.after_horizon_months > 0
        key = (self._factors[period.index], period.months, tuple(nodes), units, last)
        known = self._period_costs.get(key)
        if known is not None:
            return replace(known, period=period)
        cost = self._period_cost(period, nodes, units)
        if last and units > 0:
            cost = self._with_tail(cost, nodes)
        self._period_costs[key] = cost
        return cost

    def _with_tail(self, cost: PeriodCost, nodes: Sequence[int]) -> PeriodCost:
        """``cost`` of the last period with the commitment's months past the horizon."""
        period = cost.period
        months = self.after_horizon_months
        none = self.period_cost(period, nodes, 0)
        scale = months / period.months
        # Owned nodes cost the same either way: only cloud spend and payments differ.
        extra = (cost.total_dollars - none.total_dollars) * scale
        return replace(
            cost,
            after_horizon_months=months,
            after_horizon_paid_dollars=cost.committed_dollars * scale,
            after_horizon_dollars=max(extra, 0.0),
        )

    def _period_cost(self, period: Period, nodes: Sequence[int], units: int) -> PeriodCost:
        cloud = self.inputs.cloud
        usage = self.usage(period, nodes, units)
        owned_hourly = sum(
            n * t.node_hour_dollars for n, t in zip(nodes, self.inputs.node_types, strict=True)
        )
        committed_gpu_hours = units * self.unit_gpus * period.hours
        price = self.offer.effective_per_gpu_hour if self.offer is not None else 0.0
        return PeriodCost(
            period=period,
            owned_dollars=owned_hourly * period.hours,
            committed_dollars=committed_gpu_hours * price,
            elastic_dollars=usage.elastic * cloud.on_demand_per_gpu_hour,
            spot_dollars=usage.spot * cloud.spot_per_gpu_hour,
            owned_used_gpu_hours=usage.owned,
            committed_gpu_hours=committed_gpu_hours,
            committed_used_gpu_hours=usage.committed,
            elastic_gpu_hours=usage.elastic,
            spot_gpu_hours=usage.spot,
        )

    def period_dollars(self, period: Period, nodes: Sequence[int], units: int) -> float:
        return self.period_cost(period, nodes, units).total_dollars

    def feasible(self, schedule: Sequence[int]) -> bool:
        """Whether a committed level per period keeps the offer's adjustment rules."""
        if len(schedule) != len(self.periods) or any(u < 0 for u in schedule):
            return False
        if self.offer is None:
            return all(u == 0 for u in schedule)
        cap = self.offer.max_units
        if cap is not None and max(schedule) > max(cap, self.offer.current_units):
            return False
        low, high = self.offer.first_levels
        if schedule[0] < low or (high is not None and schedule[0] > high):
            return False
        for period, before, after in zip(self.periods[1:], schedule, schedule[1:], strict=False):
            if is_renewal(self.offer, period):
                continue
            highest = self.offer.highest_after(before)
            if after < self.offer.lowest_after(before) or (highest is not None and after > highest):
                return False
        return True


def _history_levels(inputs: PlanInputs) -> list[tuple[float, float, float]]:
    """(firm GPUs, preemptible GPUs, calendar-month share) of the history, merged by level:
    the history stands for one month."""
    history_hours = sum(s.hours for s in inputs.history)
    share = None if inputs.jobs else inputs.preemptible_share
    merged: dict[tuple[float, float], float] = {}
    for s in inputs.history:
        if share is None:
            firm, preemptible = s.firm_gpus, s.preemptible_gpus
        else:
            firm, preemptible = s.total_gpus * (1.0 - share), s.total_gpus * share
        merged[(firm, preemptible)] = merged.get((firm, preemptible), 0.0) + s.hours
    return [(f, p, h / history_hours * HOURS_PER_MONTH) for (f, p), h in merged.items()]


def _period_factors(inputs: PlanInputs, period: Period) -> tuple[float, ...]:
    """The demand factor of each month of the period (compounded monthly, mid-month)."""
    growth = inputs.demand_growth_per_year
    return tuple(
        1.0 if growth == 0 else (1.0 + growth) ** ((month + 0.5) / 12)
        for month in range(period.start_month, period.start_month + period.months)
    )


def _after_horizon_months(offer: CommittedOffer | None, parts: Sequence[Period]) -> int:
    """Months the term running in the last period goes on past the horizon (terms start at
    month 0 and every term length after)."""
    if offer is None or not parts:
        return 0
    term = 12 * offer.term_years
    last = parts[-1]
    ago = offer.started_months_ago
    end = ((last.start_month + ago) // term + 1) * term - ago
    return max(end - (last.start_month + last.months), 0)


def _window_hours(inputs: PlanInputs) -> float:
    if not inputs.jobs:
        return 1.0
    start = min(j.arrival_seconds for j in inputs.jobs)
    end = max(j.arrival_seconds + j.duration_seconds for j in inputs.jobs)
    return max(end - start, 1.0) / 3600.0


@dataclass(frozen=True)
class Procurement:
    """A fleet, a committed offer and its level per period, and what they cost."""

    offer: CommittedOffer | None
    nodes: tuple[int, ...]
    schedule: tuple[int, ...]
    """Committed units (nodes of the offer) per period."""
    periods: tuple[PeriodCost, ...] = field(default=())

    @property
    def total_dollars(self) -> float:
        return sum(p.total_dollars for p in self.periods)


def _window_argmins(values: Sequence[float], windows: Sequence[tuple[int, int]]) -> list[int]:
    """For each ``(lo, hi)`` window (both bounds non-decreasing from one window to the next),
    the index of the cheapest of ``values[lo..hi]``, the lowest among equals (a monotone
    queue: O(len(values) + len(windows)))."""
    out: list[int] = []
    queue: deque[int] = deque()
    pushed = 0
    for lo, hi in windows:
        while pushed <= hi:
            value = values[pushed]
            while queue and values[queue[-1]] > value * (1.0 + _COST_EPS) + 1e-9:
                queue.pop()
            queue.append(pushed)
            pushed += 1
        while queue[0] < lo:
            queue.popleft()
        out.append(queue[0])
    return out


def _next_window(model: ProcurementModel, period: Period, units: int) -> tuple[int, int]:
    """The levels ``period`` may set after ``units`` (all of them at a renewal)."""
    assert model.offer is not None
    top = model.max_units
    if is_renewal(model.offer, period):
        return 0, top
    highest = model.offer.highest_after(units)
    return model.offer.lowest_after(units), top if highest is None else min(highest, top)


def best_schedule(model: ProcurementModel, nodes: Sequence[int]) -> tuple[tuple[int, ...], float]:
    """The cheapest committed level per period with ``nodes`` owned, and the total dollars.

    Backward over the periods: the cheapest rest of the horizon from each level; a window
    may go to any level from ``lowest_after`` to ``highest_after`` of the level before (any
    level at a renewal). Both bounds grow with the level, so the best next level of every
    level is a sliding-window minimum. Ties go to the lower level.
    """
    periods_ = model.periods
    levels = range(model.max_units + 1)
    if model.offer is None:
        total = sum(model.period_dollars(p, nodes, 0) for p in periods_)
        return (0,) * len(periods_), total
    after = [0.0] * (model.max_units + 1)  # cheapest from the next period on, by level
    here_by_period: list[list[float]] = []  # per period: the cheapest from it on, by level
    for period in reversed(periods_):
        here = [model.period_dollars(period, nodes, u) + after[u] for u in levels]
        here_by_period.append(here)
        if period.index > 0:
            windows = [_next_window(model, period, u) for u in levels]
            after = [here[i] for i in _window_argmins(here, windows)]
    here_by_period.reverse()
    lowest, highest = model.offer.first_levels
    top = model.max_units if highest is None else min(highest, model.max_units)
    schedule = _window_argmins(here_by_period[0], [(lowest, top)])
    for period in periods_[1:]:
        window = _next_window(model, period, schedule[-1])
        schedule += _window_argmins(here_by_period[period.index], [window])
    total = sum(model.period_dollars(p, nodes, u) for p, u in zip(periods_, schedule, strict=True))
    return tuple(schedule), total


def optimal_procurement(
    inputs: PlanInputs,
    offers: Sequence[CommittedOffer],
    shared: SharedWork | None = None,
) -> Procurement:
    """The cheapest owned fleet, committed offer and committed level per period: every owned
    size (its cheapest node mix), every offer (and none), the best schedule of each. An offer
    held today (``current_units``) is the only choice: it is paid until its term ends, and
    one plan signs one offer."""
    shared = SharedWork() if shared is None else shared
    held = [o for o in offers if o.current_units > 0]
    if len(held) > 1:
        raise ValueError(
            "committed offers: only one can be held today (currentNodes): "
            + ", ".join(o.name for o in held)
        )
    choices: Sequence[CommittedOffer | None] = held or (None, *offers)
    best: Procurement | None = None
    best_dollars = math.inf
    for offer in choices:
        model = ProcurementModel(inputs, offer, shared)
        for _, nodes in cheapest_mixes(model.owned_model):
            schedule, dollars = best_schedule(model, nodes)
            if dollars < best_dollars * (1.0 - _COST_EPS) - 1e-9:
                best_dollars = dollars
                best = Procurement(offer, tuple(nodes), schedule)
    assert best is not None
    return costed(inputs, best, shared)


def costed(inputs: PlanInputs, plan: Procurement, shared: SharedWork | None = None) -> Procurement:
    """``plan`` with the cost of each of its periods."""
    model = ProcurementModel(inputs, plan.offer, shared)
    return replace(
        plan,
        periods=tuple(
            model.period_cost(p, plan.nodes, u)
            for p, u in zip(model.periods, plan.schedule, strict=True)
        ),
    )
