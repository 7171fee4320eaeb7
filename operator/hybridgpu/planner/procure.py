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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from hybridgpu.core.cost import HOURS_PER_YEAR
from hybridgpu.planner import progress
from hybridgpu.planner.cost import CostModel, ReplayKey, SharedWork, _fluid_usage
from hybridgpu.planner.model import (
    HOURS_PER_MONTH,
    DurationCurve,
    PlanInputs,
    Usage,
)
from hybridgpu.planner.optimize import cheapest_mixes
from hybridgpu.planner.replay import replay_committed

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
    return periods_of(horizon_months, [(months_per_period, offset)])


def periods_of(horizon_months: int, calendars: Sequence[tuple[int, int]]) -> list[Period]:
    """The horizon cut at the start of every window of every calendar ``(months per window,
    months since the calendar started)``: one period per stretch with no window starting."""
    out: list[Period] = []
    start = 0
    while start < horizon_months:
        months = min(
            [horizon_months - start]
            + [length - (start + offset) % length for length, offset in calendars]
        )
        out.append(Period(len(out), start, months))
        start += months
    return out


def is_renewal(offer: CommittedOffer, period: Period) -> bool:
    """A term of ``offer`` starts with this period (today's term's calendar: the first
    period without a current term, then every term length)."""
    return (period.start_month + offer.started_months_ago) % (12 * offer.term_years) == 0


def is_window(offer: CommittedOffer, period: Period) -> bool:
    """An adjustment window of ``offer`` starts with this period."""
    return (period.start_month + offer.started_months_ago) % offer.adjustment_months == 0


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
    owned_gpus: int = 0
    """Owned GPUs (of the demand's class) in service in this period."""
    after_horizon_months: int = 0
    """Months the commitment of this (last) period runs past the horizon (the longest term
    when several offers are signed)."""
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


Levels = tuple[int, ...]
"""Committed units (nodes) of each offer signed together, in the model's order of offers."""


class ProcurementModel:
    """The cost of any owned fleet and committed levels in any period of the horizon, with
    no offer, one, or several offers signed together (e.g. a 3-year base, a 1-year top-up
    and a monthly-adjustable savings plan)."""

    def __init__(
        self,
        inputs: PlanInputs,
        offers: CommittedOffer | Sequence[CommittedOffer] | None,
        shared: SharedWork | None = None,
        owned_tranche_months: int | None = None,
    ) -> None:
        if owned_tranche_months is not None and owned_tranche_months < 1:
            raise ValueError("owned tranches: the months between purchases must be 1 or more")
        if offers is None:
            offers = ()
        elif isinstance(offers, CommittedOffer):
            offers = (offers,)
        self.inputs = inputs
        self.offers: tuple[CommittedOffer, ...] = tuple(offers)
        self.shared = SharedWork() if shared is None else shared
        self.owned_model = CostModel(inputs, self.shared)
        self.owned_tranche_months = owned_tranche_months
        """Owned nodes may be bought at the start of every this many months (None: at the
        start only)."""
        calendars = [(o.adjustment_months, o.started_months_ago) for o in self.offers]
        if owned_tranche_months is not None:
            calendars.append((owned_tranche_months, 0))
        self.periods = periods_of(inputs.horizon_months, calendars or [(3, 0)])
        self.after_horizon_by_offer = tuple(_after_horizon_months(o, self.periods) for o in offers)
        self.after_horizon_months = max(self.after_horizon_by_offer, default=0)
        self._levels_key = None if inputs.jobs else inputs.preemptible_share
        """What the levels depend on besides the history and jobs (``SharedWork`` is for one
        of each): the preemptible share, for a history without criticalities."""
        known = self.shared.history_levels.get(self._levels_key)
        if known is None:
            levels = _history_levels(inputs)
            arrays = (
                np.array([[f, p, h] for f, p, h in levels], dtype=float).reshape(-1, 3).T
                if self.shared.fast
                else None
            )
            known = self.shared.history_levels[self._levels_key] = (levels, arrays)
        self._levels: list[tuple[float, float, float]] = known[0]
        self._level_arrays: np.ndarray | None = known[1]
        """The history's levels and (the fast search's) the same as arrays (firm,
        preemptible, month share) for ``_fluid_arrays``: the same for every model of the
        plan (a 200,000-job trace's history has 100,000s of samples)."""
        self._window_hours = _window_hours(inputs)
        self._curves: dict[tuple[tuple[float, ...], int], tuple[DurationCurve, DurationCurve]] = {}
        self._committed_used: dict[tuple[tuple[float, ...], int], float] = {}
        self._fluid_usages: dict[tuple[tuple[float, ...], int, int], Usage] = {}
        """``_fluid`` with nothing committed (``lower_bound``'s, once per fleet and period).
        With committed GPUs it is not kept: one entry per period, committed level and owned
        fleet searched grew as the grown peak squared (14.9 GB at a 36,000-GPU peak)."""
        self._replays: dict[tuple[tuple[int, ...], tuple[int, ...]], Usage] = {}
        self._factors = {p.index: _period_factors(inputs, p) for p in self.periods}
        self._period_costs: dict[
            tuple[tuple[float, ...], int, tuple[int, ...], Levels, bool], PeriodCost
        ] = {}
        firm_peak = max((f for f, _, _ in self._levels), default=0.0)
        grown = max((max(fs) for fs in self._factors.values()), default=1.0)
        self.firm_peak_gpus = math.ceil(firm_peak * grown)
        caps = []
        for offer in self.offers:
            units = math.ceil(firm_peak * grown / offer.gpus_per_unit - 1e-9)
            if offer.max_units is not None:
                units = min(units, offer.max_units)
            caps.append(max(units, offer.current_units))
        self.max_units_by_offer: Levels = tuple(caps)
        """Committing to more than the firm peak under any one offer never pays: its level
        could be lowered to it (every window allows that) and serve the same work for less."""
        self._level_windows: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._firm_slack: float | None = None
        self._groups: dict[tuple[bytes, ...], list[tuple[tuple[int, ...], np.ndarray]]] = {}
        self._trace_firm: DurationCurve | None = None

    def is_purchase_window(self, period: Period) -> bool:
        """Owned nodes may be bought at the start of ``period`` (always the first)."""
        tranche = self.owned_tranche_months
        return period.index == 0 or (tranche is not None and period.start_month % tranche == 0)

    @property
    def offer(self) -> CommittedOffer | None:
        """The first offer (the only one, when one is signed)."""
        return self.offers[0] if self.offers else None

    @property
    def max_units(self) -> int:
        """The first offer's highest level searched (0 without an offer)."""
        return self.max_units_by_offer[0] if self.offers else 0

    def levels(self, units: int | Sequence[int]) -> Levels:
        """``units`` as one level per offer (an int: the only offer's; 0 without an offer)."""
        if isinstance(units, int):
            if not self.offers:
                if units:
                    raise ValueError("no committed offer to commit to")
                return ()
            if len(self.offers) != 1:
                raise ValueError("give one level per offer")
            return (units,)
        return tuple(units)

    def committed_node_gpus(self, levels: Levels) -> tuple[int, ...]:
        """The committed nodes' sizes, in GPUs (sorted: the replay's key)."""
        return tuple(
            sorted(
                o.gpus_per_unit for o, u in zip(self.offers, levels, strict=True) for _ in range(u)
            )
        )

    # ------------------------------------------------------------ lower bound
    def lower_bound(self, nodes: Sequence[int]) -> float:
        """Dollars ``best_schedule(self, nodes)`` cannot go below, without a replay: the owned
        nodes, plus in each period the firm demand above the owned GPUs at the cheapest price
        that can serve it (an offer's effective price if every committed GPU were busy, else
        on demand). Spot, the months past the horizon and idle committed or cloud GPUs only
        add to it.

        Why it holds with a trace: a critical or standard job runs from its arrival for its
        duration on an owned, a committed or an on-demand GPU (the replay never delays,
        evicts or moves one; cloud GPUs are billed from their launch), so with G owned and C
        committed GPUs the replay's on-demand GPU-hours are at least the trace's firm demand
        above G + C. With growth, the plan adds the fluid model's grown demand less its flat
        demand to the replay; their difference from the trace's own demand curve is bounded
        (``_slack``). Committing C GPUs is paid every hour, at least as much as what C GPUs
        could serve of the demand above G, so committed plus on-demand dollars are at least
        the cheapest price times the firm GPU-hours above G. A relative margin of 1e-9 covers
        float rounding; the search skips a fleet only when this bound already loses."""
        nodes = tuple(nodes)
        owned = self.owned_model.owned_gpus(nodes)
        hourly = self._owned_hourly(nodes)
        cloud = self.inputs.cloud
        od = cloud.on_demand_per_gpu_hour
        cheapest = min([od, *(o.effective_per_gpu_hour for o in self.offers)])
        jobs = bool(self.inputs.jobs)
        grows = jobs and self.inputs.demand_growth_per_year != 0
        slack = self._slack() if grows else 0.0
        total = 0.0
        firm = 0.0
        for period in self.periods:
            total += hourly * period.hours
            if jobs and not grows:
                above = self._trace_firm_above(owned)
            else:
                above = self._fluid(self._factors[period.index], 0, owned).elastic
            firm += period.months * max(cheapest * above - od * slack, 0.0)
        return (total + firm) * (1.0 - 1e-9)

    def _trace_firm_curve(self) -> DurationCurve:
        """The trace's firm demand, GPU-hours per calendar month (the replay's scale)."""
        if self._trace_firm is None:
            from hybridgpu.planner.model import history_from_intervals

            samples = history_from_intervals(
                (j.arrival_seconds, j.arrival_seconds + j.duration_seconds, j.demand_gpus, False)
                for j in self.inputs.jobs
                if not j.preemptible
            )
            scale = HOURS_PER_MONTH / self._window_hours
            self._trace_firm = DurationCurve((s.firm_gpus, s.hours * scale) for s in samples)
        return self._trace_firm

    def _trace_firm_above(self, gpus: float) -> float:
        """GPU-hours per month of the trace's firm demand above ``gpus``, less a margin."""
        curve = self._trace_firm_curve()
        above = curve.total_gpu_hours - curve.gpu_hours_below(gpus)
        return max(above - 1e-9 * curve.total_gpu_hours, 0.0)

    def _slack(self) -> float:
        """How far the fluid model's flat firm demand above any capacity x (GPU-hours per
        month) exceeds the trace's own: the most the growth correction can take off a
        replay's on-demand hours below the grown fluid model's (0 when the history is the
        trace's demand, plus a float margin)."""
        if self._firm_slack is None:
            trace = self._trace_firm_curve()
            flat_key = ((1.0,), 0)
            self._fluid((1.0,), 0, 0)
            flat = self._curves[flat_key][0]
            points = {0.0, *trace.levels, *flat.levels}
            worst = 0.0
            for x in points:
                fluid_above = flat.total_gpu_hours - flat.gpu_hours_below(x)
                trace_above = trace.total_gpu_hours - trace.gpu_hours_below(x)
                worst = max(worst, fluid_above - trace_above)
            self._firm_slack = worst + 1e-9 * (flat.total_gpu_hours + trace.total_gpu_hours)
        return self._firm_slack

    # ------------------------------------------------------------------ usage
    def _fluid_arrays(
        self, factors: tuple[float, ...], committed_gpus: np.ndarray, owned_gpus: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``_fluid`` at every committed GPU count of ``committed_gpus`` at once, summed over
        the levels directly instead of read off curves built per count (the fast search's:
        no curve per count is built or kept): owned, elastic, spot and committed GPU-hours
        per calendar month, one entry per count."""
        assert self._level_arrays is not None
        firm_levels, preemptible, weights = self._level_arrays
        committed = committed_gpus.astype(float)[:, None]
        owned = np.zeros(len(committed_gpus))
        elastic = np.zeros(len(committed_gpus))
        total = np.zeros(len(committed_gpus))
        used = np.zeros(len(committed_gpus))
        per_month = 1.0 / len(factors)
        for factor in factors:
            firm = firm_levels * factor
            left = np.maximum(firm[None, :] - committed, 0.0)
            used += (np.minimum(firm[None, :], committed) @ weights) * per_month
            elastic += (np.maximum(left - owned_gpus, 0.0) @ weights) * per_month
            demand = left + preemptible * factor
            owned += (np.minimum(demand, owned_gpus) @ weights) * per_month
            total += (demand @ weights) * per_month
        preemptible_out = np.maximum(total - owned - elastic, 0.0)
        cloud = self.inputs.cloud
        on_demand_scale, spot_scale = self.shared.cloud_scale
        if cloud.spot_is_used:
            spot = preemptible_out * cloud.spot_rerun_factor * spot_scale
            return owned, elastic * on_demand_scale, spot, used
        return owned, (elastic + preemptible_out) * on_demand_scale, np.zeros_like(owned), used

    def _fluid(self, factors: tuple[float, ...], committed_gpus: int, owned_gpus: int) -> Usage:
        """GPU-hours per calendar month at these demand factors (one per month, averaged)."""
        known = self._fluid_usages.get((factors, committed_gpus, owned_gpus))
        if known is not None:
            return known
        if self._level_arrays is not None:
            parts = self._fluid_arrays(factors, np.array([committed_gpus]), owned_gpus)
            usage = Usage(*(float(a[0]) for a in parts))
            if not committed_gpus:
                self._fluid_usages[(factors, committed_gpus, owned_gpus)] = usage
            return usage
        key = (factors, committed_gpus)
        curves = self._curves.get(key)
        shared_key = (factors, committed_gpus, self._levels_key)
        if curves is None and shared_key in self.shared.period_curves:
            *pair, used = self.shared.period_curves[shared_key]
            curves = self._curves[key] = (pair[0], pair[1])
            self._committed_used[key] = used
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
            self.shared.period_curves[shared_key] = (*curves, used)
        usage = _fluid_usage(curves[0], curves[1], owned_gpus, self.inputs.cloud)
        usage = Usage(usage.owned, usage.elastic, usage.spot, self._committed_used[key])
        if not committed_gpus:
            self._fluid_usages[(factors, committed_gpus, owned_gpus)] = usage
        return usage

    def _replay(self, nodes: tuple[int, ...], committed_nodes: tuple[int, ...]) -> Usage:
        """GPU-hours per calendar month of the trace replayed on this fleet."""
        key = (nodes, committed_nodes)
        usage = self._replays.get(key)
        if usage is None and not committed_nodes and self.inputs.demand_growth_per_year == 0:
            # The owned-only replay the plan's fleet search made already (shared cache).
            usage = self.owned_model.usage(nodes).scaled(1.0 / self.inputs.horizon_months)
        if usage is None:
            sizes, owned_key = self._owned_sizes(nodes)
            raw = self.shared.committed_usage(committed_nodes, owned_key)
            if raw is None:
                made = replay_committed(
                    self.inputs.jobs,
                    sizes,
                    self.inputs.cloud,
                    committed_nodes,
                    share_replicas=self.inputs.share_replicas,
                )
                raw = self._keep_replay(committed_nodes, owned_key, made)
            usage = raw.scaled(HOURS_PER_MONTH / self._window_hours)
            self._replays[key] = usage
        return usage

    def _owned_sizes(self, nodes: tuple[int, ...]) -> tuple[list[int], ReplayKey]:
        """The owned nodes' GPUs in the order replayed, and their key among the replays."""
        sizes = [
            k for n, k in zip(nodes, self.owned_model.gpus_per_node, strict=True) for _ in range(n)
        ]
        cloud = self.inputs.cloud
        timing = (
            cloud.spot_is_used,
            cloud.spot_rerun_factor,
            cloud.spot_restart_overhead_hours,
            cloud.node_startup_hours,
            cloud.idle_release_hours,
        )
        return sizes, (tuple(sorted(sizes)), timing, self.inputs.share_replicas)

    def _keep_replay(
        self, committed_nodes: tuple[int, ...], owned_key: ReplayKey, made: tuple[Usage, bool]
    ) -> Usage:
        """Record a replay with committed nodes (and whether they were enough) for the plan's
        other models; its usage."""
        raw, enough = made
        self.shared.committed_replays[(committed_nodes, owned_key)] = raw
        if enough:
            self.shared.enough_committed.setdefault(owned_key, []).append((committed_nodes, raw))
        return raw

    def replays_wanted(
        self, plan: Procurement
    ) -> list[tuple[list[int], tuple[int, ...], ReplayKey]]:
        """The replays (owned node sizes, committed node sizes, the owned nodes' key) that
        costing ``plan`` makes and the shared work does not hold, in the order it makes
        them."""
        out: list[tuple[list[int], tuple[int, ...], ReplayKey]] = []
        if not self.inputs.jobs:
            return out
        for k, (_, units) in enumerate(zip(self.periods, plan.levels, strict=True)):
            nodes = plan.fleet_at(k)
            committed = self.committed_node_gpus(self.levels(units))
            if (nodes, committed) in self._replays:
                continue
            if not committed and self.inputs.demand_growth_per_year == 0:
                continue  # the owned-only replay (``_replay``)
            sizes, owned_key = self._owned_sizes(nodes)
            if self.shared.committed_usage(committed, owned_key) is None:
                out.append((sizes, committed, owned_key))
        return out

    def usage(self, period: Period, nodes: Sequence[int], units: int | Sequence[int]) -> Usage:
        """GPU-hours of ``period`` with ``nodes`` owned (per type) and ``units`` committed."""
        return self._usage(period, tuple(nodes), self.committed_node_gpus(self.levels(units)))

    def _usage(
        self, period: Period, nodes: tuple[int, ...], committed_nodes: tuple[int, ...]
    ) -> Usage:
        owned = self.owned_model.owned_gpus(nodes)
        committed = sum(committed_nodes)
        factors = self._factors[period.index]
        if not self.inputs.jobs:
            monthly = self._fluid(factors, committed, owned)
        else:
            monthly = self._replay(nodes, committed_nodes)
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

    def _cloud_dollars(
        self, period: Period, nodes: tuple[int, ...], committed_nodes: tuple[int, ...]
    ) -> float:
        """On-demand and spot dollars of ``period``."""
        usage = self._usage(period, nodes, committed_nodes)
        cloud = self.inputs.cloud
        return usage.elastic * cloud.on_demand_per_gpu_hour + usage.spot * cloud.spot_per_gpu_hour

    def period_cost(
        self, period: Period, nodes: Sequence[int], units: int | Sequence[int]
    ) -> PeriodCost:
        """The full breakdown of one period (periods of the same months and demand factors
        cost the same: without growth, every full window)."""
        levels = self.levels(units)
        last = period.index == len(self.periods) - 1 and self.after_horizon_months > 0
        key = (self._factors[period.index], period.months, tuple(nodes), levels, last)
        known = self._period_costs.get(key)
        if known is not None:
            return replace(known, period=period)
        cost = self._period_cost(period, nodes, levels)
        if last and any(levels):
            cost = self._with_tail(cost, tuple(nodes), levels)
        self._period_costs[key] = cost
        return cost

    def _tail_segments(self) -> list[tuple[int, tuple[bool, ...]]]:
        """The months past the horizon in stretches: (months, which offers still bind)."""
        ends = sorted(set(self.after_horizon_by_offer) - {0})
        out = []
        before = 0
        for end in ends:
            out.append((end - before, tuple(m >= end for m in self.after_horizon_by_offer)))
            before = end
        return out

    def _with_tail(self, cost: PeriodCost, nodes: tuple[int, ...], levels: Levels) -> PeriodCost:
        """``cost`` of the last period with the commitments' months past the horizon: in each
        stretch, what the offers still bound then cost more than committing nothing, at the
        last period's demand (never a gain)."""
        period = cost.period
        none = self._cloud_dollars(period, nodes, ())
        charged = 0.0
        for months, binding in self._tail_segments():
            bound = tuple(u if b else 0 for u, b in zip(levels, binding, strict=True))
            payments = self._payments(period, bound)
            cloud = self._cloud_dollars(period, nodes, self.committed_node_gpus(bound))
            charged += max(payments + cloud - none, 0.0) * months / period.months
        paid = sum(
            self._payments(period, tuple(u if i == j else 0 for j, u in enumerate(levels)))
            * self.after_horizon_by_offer[i]
            / period.months
            for i in range(len(levels))
        )
        return replace(
            cost,
            after_horizon_months=self.after_horizon_months,
            after_horizon_paid_dollars=paid,
            after_horizon_dollars=charged,
        )

    def _payments(self, period: Period, levels: Levels) -> float:
        """Committed dollars of ``period`` at ``levels``."""
        return sum(
            u * o.gpus_per_unit * o.effective_per_gpu_hour * period.hours
            for o, u in zip(self.offers, levels, strict=True)
        )

    def _owned_hourly(self, nodes: Sequence[int]) -> float:
        return sum(
            n * t.node_hour_dollars for n, t in zip(nodes, self.inputs.node_types, strict=True)
        )

    def _period_cost(self, period: Period, nodes: Sequence[int], levels: Levels) -> PeriodCost:
        cloud = self.inputs.cloud
        committed_nodes = self.committed_node_gpus(levels)
        usage = self._usage(period, tuple(nodes), committed_nodes)
        return PeriodCost(
            period=period,
            owned_dollars=self._owned_hourly(nodes) * period.hours,
            committed_dollars=self._payments(period, levels),
            elastic_dollars=usage.elastic * cloud.on_demand_per_gpu_hour,
            spot_dollars=usage.spot * cloud.spot_per_gpu_hour,
            owned_used_gpu_hours=usage.owned,
            committed_gpu_hours=sum(committed_nodes) * period.hours,
            committed_used_gpu_hours=usage.committed,
            elastic_gpu_hours=usage.elastic,
            spot_gpu_hours=usage.spot,
            owned_gpus=self.owned_model.owned_gpus(nodes),
        )

    def period_dollars(
        self, period: Period, nodes: Sequence[int], units: int | Sequence[int]
    ) -> float:
        return self.period_cost(period, nodes, units).total_dollars

    def cost_table(
        self, period: Period, nodes: Sequence[int], wanted: np.ndarray | None = None
    ) -> np.ndarray:
        """``period_dollars`` at every level of every offer (an array indexed by the levels;
        shape (1,) without an offer), the same figures without building each breakdown.
        With ``wanted`` (a boolean array of that shape) only those entries: the others are
        infinite, and no replay is made for them alone."""
        nodes = tuple(nodes)
        shape = tuple(u + 1 for u in self.max_units_by_offer)
        grids = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
        table = np.full(shape or (1,), self._owned_hourly(nodes) * period.hours)
        for offer, grid in zip(self.offers, grids, strict=True):
            table = table + grid * (
                offer.gpus_per_unit * offer.effective_per_gpu_hour * period.hours
            )
        table = table + self._cloud_table(period, nodes, shape, grids, wanted)
        last = period.index == len(self.periods) - 1 and self.after_horizon_months > 0
        if last and self.offers:
            none = self._cloud_dollars(period, nodes, ())
            for months, binding in self._tail_segments():
                bound = [g if b else 0 * g for g, b in zip(grids, binding, strict=True)]
                extra = self._cloud_table(period, nodes, shape, bound, wanted) - none
                for offer, grid in zip(self.offers, bound, strict=True):
                    extra = extra + grid * (
                        offer.gpus_per_unit * offer.effective_per_gpu_hour * period.hours
                    )
                table = table + np.maximum(extra, 0.0) * (months / period.months)
        return np.asarray(table, dtype=float)

    def _cloud_table(
        self,
        period: Period,
        nodes: tuple[int, ...],
        shape: tuple[int, ...],
        grids: Sequence[np.ndarray],
        wanted: np.ndarray | None = None,
    ) -> np.ndarray:
        """Cloud dollars at the levels of ``grids`` (arrays of each offer's level); with
        ``wanted``, infinite where it is False unless the same committed nodes are wanted
        elsewhere."""
        if not self.offers:
            return np.array([self._cloud_dollars(period, nodes, ())])
        if not self.inputs.jobs:
            # The fluid model depends on the committed GPUs only, and not past the firm peak.
            gpus = sum(
                (g * o.gpus_per_unit for o, g in zip(self.offers, grids, strict=True)),
                start=np.zeros(shape, dtype=int),
            )
            gpus = np.minimum(gpus, self.firm_peak_gpus)
            counts, where = np.unique(gpus, return_inverse=True)
            if self._level_arrays is not None:
                owned_gpus = self.owned_model.owned_gpus(nodes)
                factors = self._factors[period.index]
                _, elastic, spot, _ = self._fluid_arrays(factors, counts, owned_gpus)
                cloud = self.inputs.cloud
                monthly = elastic * cloud.on_demand_per_gpu_hour + spot * cloud.spot_per_gpu_hour
                return np.asarray((monthly * period.months)[where.reshape(shape)])
            values = np.array(
                [self._cloud_dollars(period, nodes, (int(k),) if k else ()) for k in counts]
            )
            return np.asarray(values[where.reshape(shape)])
        out = np.empty(shape)
        flat = out.reshape(-1)
        wanted_flat = None if wanted is None else wanted.reshape(-1)
        for committed_nodes, where in self._committed_groups(grids):
            if wanted_flat is not None and not wanted_flat[where].any():
                flat[where] = math.inf
                continue
            flat[where] = self._cloud_dollars(period, nodes, committed_nodes)
        return out

    def lower_table(self, period: Period, nodes: Sequence[int]) -> np.ndarray:
        """What ``cost_table(period, nodes)`` cannot go below at each entry, without a
        replay: the owned nodes, the committed payments, and on demand the trace's firm
        demand above the owned and committed GPUs (the replay's on-demand hours are at least
        that: a critical or standard job runs at its arrival for its duration on a
        committed, an owned or an on-demand GPU), through the growth correction (which
        grows with the replay's hours). Spot and the months past the horizon are at least
        0. A trace only; a relative margin of 1e-9 covers float rounding."""
        nodes = tuple(nodes)
        shape = tuple(u + 1 for u in self.max_units_by_offer)
        grids = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
        table = np.full(shape or (1,), self._owned_hourly(nodes) * period.hours)
        gpus = np.zeros(shape or (1,), dtype=int)
        for offer, grid in zip(self.offers, grids, strict=True):
            table = table + grid * (
                offer.gpus_per_unit * offer.effective_per_gpu_hour * period.hours
            )
            gpus = gpus + grid * offer.gpus_per_unit
        owned = self.owned_model.owned_gpus(nodes)
        factors = self._factors[period.index]
        od = self.inputs.cloud.on_demand_per_gpu_hour
        counts, where = np.unique(gpus, return_inverse=True)
        elastic = []
        for committed in counts.tolist():
            above = self._trace_firm_above(owned + committed)
            if any(f != 1.0 for f in factors):
                flat = self._fluid((1.0,), committed, owned)
                grown = self._fluid(factors, committed, owned)
                above = max(grown.elastic + above - flat.elastic, 0.0)
            elastic.append(above * period.months * od)
        table = table + np.array(elastic)[where.reshape(table.shape)]
        return np.asarray(table * (1.0 - 1e-9), dtype=float)

    def _committed_groups(
        self, grids: Sequence[np.ndarray]
    ) -> list[tuple[tuple[int, ...], np.ndarray]]:
        """The level combinations of ``grids`` grouped by the committed nodes they make
        (offers of the same node size make the same nodes from many combinations): each
        group's nodes and flat positions. The same for every period and fleet."""
        key = tuple(g.tobytes() for g in grids)
        groups = self._groups.get(key)
        if groups is None:
            by_nodes: dict[tuple[int, ...], list[int]] = {}
            columns = [g.reshape(-1).tolist() for g in grids]
            for position, levels in enumerate(zip(*columns, strict=True)):
                by_nodes.setdefault(self.committed_node_gpus(levels), []).append(position)
            groups = self._groups[key] = [
                (nodes, np.array(where, dtype=int)) for nodes, where in by_nodes.items()
            ]
        return groups

    def level_window(self, i: int, period: Period, before: int) -> tuple[int, int]:
        """The levels offer ``i`` may take in ``period`` after ``before`` in the one before
        (the first period: from what is held today)."""
        offer = self.offers[i]
        top = self.max_units_by_offer[i]
        if period.index == 0:
            lowest, highest = offer.first_levels
            return min(lowest, top), top if highest is None else min(highest, top)
        if is_renewal(offer, period):
            return 0, top
        if not is_window(offer, period):
            return before, before
        highest = offer.highest_after(before)
        return offer.lowest_after(before), top if highest is None else min(highest, top)

    def level_windows(self, i: int, period: Period) -> tuple[np.ndarray, np.ndarray]:
        """``level_window`` after every level of offer ``i``: the lowest and highest levels."""
        key = (i, period.index)
        known = self._level_windows.get(key)
        if known is None:
            windows = [
                self.level_window(i, period, u) for u in range(self.max_units_by_offer[i] + 1)
            ]
            known = (np.array([w[0] for w in windows]), np.array([w[1] for w in windows]))
            self._level_windows[key] = known
        return known

    def feasible(self, schedule: Sequence[int | Sequence[int]]) -> bool:
        """Whether committed levels per period (an int per period for one offer, a level per
        offer otherwise) keep every offer's adjustment rules."""
        if len(schedule) != len(self.periods):
            return False
        if not self.offers:
            return all(not s for s in schedule)
        rows = [self.levels(s) if isinstance(s, int) else tuple(s) for s in schedule]
        if any(len(r) != len(self.offers) for r in rows):
            return False
        return all(self.feasible_levels(i, [r[i] for r in rows]) for i in range(len(self.offers)))

    def feasible_levels(self, i: int, column: Sequence[int]) -> bool:
        """Whether offer ``i``'s level per period keeps its rules (on the model's periods:
        between two of its windows the level holds)."""
        offer = self.offers[i]
        if len(column) != len(self.periods) or any(u < 0 for u in column):
            return False
        cap = offer.max_units
        if cap is not None and max(column) > max(cap, offer.current_units):
            return False
        before = 0
        for period, level in zip(self.periods, column, strict=True):
            if not self._allowed(i, period, before, level):
                return False
            before = level
        return True

    def _allowed(self, i: int, period: Period, before: int, level: int) -> bool:
        """``level`` keeps offer ``i``'s rules after ``before`` (no cap on the level)."""
        offer = self.offers[i]
        if period.index == 0:
            lowest, highest = offer.first_levels
        elif is_renewal(offer, period):
            return True
        elif not is_window(offer, period):
            return level == before
        else:
            lowest, highest = offer.lowest_after(before), offer.highest_after(before)
        return level >= lowest and (highest is None or level <= highest)


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
    """A fleet, the committed offers signed (none, one, or several together) and their levels
    per period, and what they cost."""

    offers: tuple[CommittedOffer, ...]
    nodes: tuple[int, ...]
    """Owned nodes per type bought at the start (with tranches: the first period's fleet)."""
    levels: tuple[Levels, ...]
    """Committed units (nodes) of each offer, per period."""
    periods: tuple[PeriodCost, ...] = field(default=())
    fleets: tuple[tuple[int, ...], ...] = field(default=())
    """Owned nodes per type in every period when they are bought in tranches (never fewer
    than in the period before); empty: ``nodes`` throughout."""
    owned_tranche_months: int | None = None
    """Owned nodes could be bought every this many months (None: at the start only)."""

    def fleet_at(self, k: int) -> tuple[int, ...]:
        """Owned nodes per type in period ``k``."""
        return self.fleets[k] if self.fleets else self.nodes

    def tranches(self) -> list[tuple[int, tuple[int, ...]]]:
        """(month, nodes bought per type) of every purchase: at the start, then every period
        whose fleet grows (needs the periods' costs for their months)."""
        out = [(0, self.nodes)] if any(self.nodes) else []
        for k in range(1, len(self.fleets)):
            added = tuple(b - a for a, b in zip(self.fleets[k - 1], self.fleets[k], strict=True))
            if any(added):
                out.append((self.periods[k].period.start_month, added))
        return out

    @property
    def offer(self) -> CommittedOffer | None:
        """The first offer signed (the base: the longest term), if any."""
        return self.offers[0] if self.offers else None

    @property
    def schedule(self) -> tuple[int, ...]:
        """The first offer's level per period (0 without an offer)."""
        return tuple(row[0] if row else 0 for row in self.levels)

    def schedule_of(self, i: int) -> tuple[int, ...]:
        """Offer ``i``'s level per period."""
        return tuple(row[i] for row in self.levels)

    @property
    def total_dollars(self) -> float:
        return sum(p.total_dollars for p in self.periods)


def _range_min(values: np.ndarray, lows: np.ndarray, highs: np.ndarray, axis: int) -> np.ndarray:
    """Along ``axis``, position k of the result is the minimum of ``values`` over positions
    ``lows[k]..highs[k]`` (a sparse table: O(n log n))."""
    values = np.moveaxis(values, axis, 0)
    n = values.shape[0]
    tables = [values]
    width = 1
    while 2 * width <= n:
        prior = tables[-1]
        tables.append(np.minimum(prior[: n - 2 * width + 1], prior[width : n - width + 1]))
        width *= 2
    span = highs - lows + 1
    level = np.floor(np.log2(span)).astype(int)
    out = np.empty_like(values)
    for k in np.unique(level):
        at = np.nonzero(level == k)[0]
        table = tables[k]
        out[at] = np.minimum(table[lows[at]], table[highs[at] - (1 << k) + 1])
    return np.moveaxis(out, 0, axis)


def _cheapest_in(values: np.ndarray, box: Sequence[tuple[int, int]]) -> Levels:
    """The levels of the cheapest entry of ``values`` within ``box`` (per axis, lowest and
    highest level), the lowest levels among equals."""
    part = values[tuple(slice(lo, hi + 1) for lo, hi in box)]
    best = float(part.min())
    flat = int(np.argmax(part.ravel() <= best * (1.0 + _COST_EPS) + 1e-9))
    return tuple(
        int(i) + lo for i, (lo, _) in zip(np.unravel_index(flat, part.shape), box, strict=True)
    )


def best_schedule(
    model: ProcurementModel, nodes: Sequence[int], limit: float = math.inf
) -> tuple[tuple[Levels, ...], float]:
    """The cheapest committed levels per period with ``nodes`` owned, and the total dollars.

    Backward over the periods: the cheapest rest of the horizon from every combination of
    levels. Each offer moves on its own rules (at its windows from ``lowest_after`` to
    ``highest_after`` of its level before, anything at a renewal, nothing between windows);
    both bounds grow with the level, so the best next levels of every combination are a
    minimum over a box, taken one offer's axis at a time with range-minimum tables. Ties go
    to the lower levels.

    With a finite ``limit`` (a trace), an entry (a period's levels) is left out, infinite
    and not replayed, when no schedule through it can cost ``limit`` or less: its
    ``lower_table`` entry plus the lowest entry of every other period is above it. The
    schedule is then the same as without, whenever the best schedule costs less than the
    limit by more than the ties' relative 1e-9: every entry a choice may fall on (within
    1e-9 of the best rest of the horizon) is kept, with its exact cost, and so are the best
    rests of the horizon after it. Otherwise the dollars returned are those of some
    schedule, at least the best (math.inf when every schedule is left out).
    """
    parts = model.periods
    if not model.offers:
        total = sum(model.period_dollars(p, nodes, ()) for p in parts)
        return ((),) * len(parts), total
    wanted: list[np.ndarray | None] = [None] * len(parts)
    if limit < math.inf and model.inputs.jobs:
        bounds = [model.lower_table(p, nodes) for p in parts]
        floor = sum(float(bound.min()) for bound in bounds)
        kept = [floor - float(bound.min()) + bound <= limit for bound in bounds]
        if not all(k.any() for k in kept):
            return (), math.inf
        wanted = list(kept)
    shape = tuple(u + 1 for u in model.max_units_by_offer)
    after = np.zeros(shape)  # cheapest from the next period on, by the levels of this one
    here_by_period: list[np.ndarray] = []
    for period in reversed(parts):
        here = model.cost_table(period, nodes, wanted[period.index]) + after
        here_by_period.append(here)
        if period.index > 0:
            after = here
            for axis in range(len(shape)):
                lows, highs = model.level_windows(axis, period)
                after = _range_min(after, lows, highs, axis)
    here_by_period.reverse()
    schedule: list[Levels] = []
    before: Levels = (0,) * len(shape)
    for period in parts:
        box = [model.level_window(i, period, u) for i, u in enumerate(before)]
        before = _cheapest_in(here_by_period[period.index], box)
        if not math.isfinite(here_by_period[period.index][before]):
            return (), math.inf  # every schedule from here was left out
        schedule.append(before)
    total = sum(model.period_dollars(p, nodes, u) for p, u in zip(parts, schedule, strict=True))
    return tuple(schedule), total


_MAX_PHASED_FLEETS = 5000
"""Node mixes searched with tranches (several node types): beyond it, set maxNodes."""


def fleet_grid(model: ProcurementModel) -> list[tuple[int, ...]]:
    """Every owned fleet a tranche plan may reach: nodes per type up to the type's bound
    (``maxNodes``, and never past ``max_useful_gpus``), fewest owned GPUs first. One type: 0
    to its bound; several: every mix (a tranche adds nodes to the fleet held, so the cheapest
    mix of each size is not enough)."""
    owned = model.owned_model
    top = owned.max_useful_gpus
    ranges = []
    for node, k in zip(model.inputs.node_types, owned.gpus_per_node, strict=True):
        bound = top // k
        if node.max_nodes is not None:
            bound = min(bound, node.max_nodes)
        ranges.append(range(bound + 1))
    count = math.prod(len(r) for r in ranges)
    if count > _MAX_PHASED_FLEETS:
        raise ValueError(
            f"owned tranches: {count:,} node mixes of {len(ranges)} candidate types to search "
            f"(at most {_MAX_PHASED_FLEETS:,}): set candidates[].maxNodes"
        )
    fleets = [f for f in itertools.product(*ranges) if owned.owned_gpus(f) <= top]
    return sorted(fleets, key=lambda f: (owned.owned_gpus(f), f))


def _grows_to(fleets: Sequence[tuple[int, ...]]) -> np.ndarray | None:
    """reach[a, b]: fleet b keeps every node of fleet a (a tranche may add nodes, never
    remove them); None when that is every later fleet of the list (one node type)."""
    if all(len(f) == 1 for f in fleets):
        return None
    grid = np.array(fleets)
    return np.asarray(np.all(grid[None, :, :] >= grid[:, None, :], axis=2), dtype=bool)


def _best_grown(values: np.ndarray, reach: np.ndarray | None) -> np.ndarray:
    """Along axis 0 (fleets), position a of the result is the minimum of ``values`` over the
    fleets ``a`` may grow to."""
    if reach is None:
        return np.minimum.accumulate(values[::-1], axis=0)[::-1]
    out = np.empty_like(values)
    for a in range(values.shape[0]):
        out[a] = values[reach[a]].min(axis=0)
    return out


def best_phased(
    model: ProcurementModel, fleets: Sequence[tuple[int, ...]]
) -> tuple[tuple[tuple[int, ...], ...], tuple[Levels, ...], float]:
    """The cheapest owned fleet and committed levels of every period when owned nodes may
    be bought in tranches (at each purchase window the fleet may grow, never shrink): the
    fleet per period, the levels per period and the total dollars.

    ``best_schedule``'s programme with one more axis, the fleet held: at a purchase window
    the best next fleet of a fleet is the minimum over the fleets that keep its nodes (a
    suffix minimum for one node type)."""
    parts = model.periods
    reach = _grows_to(fleets)
    level_shape = tuple(u + 1 for u in model.max_units_by_offer)
    after = np.zeros((len(fleets), *(level_shape or (1,))))
    here_by_period: list[np.ndarray] = []
    for period in reversed(parts):
        table = np.stack([model.cost_table(period, f) for f in fleets])
        here = table + after
        here_by_period.append(here)
        if period.index > 0:
            after = here
            for axis in range(len(level_shape)):
                lows, highs = model.level_windows(axis, period)
                after = _range_min(after, lows, highs, axis + 1)
            if model.is_purchase_window(period):
                after = _best_grown(after, reach)
    here_by_period.reverse()
    chosen_fleets: list[tuple[int, ...]] = []
    chosen_levels: list[Levels] = []
    fleet = 0
    before: Levels = (0,) * len(level_shape)
    for period in parts:
        here = here_by_period[period.index]
        if period.index == 0:
            allowed = np.ones(len(fleets), dtype=bool)
        elif not model.is_purchase_window(period):
            allowed = np.arange(len(fleets)) == fleet
        elif reach is None:
            allowed = np.arange(len(fleets)) >= fleet
        else:
            allowed = reach[fleet]
        masked = np.where(allowed.reshape((-1,) + (1,) * (here.ndim - 1)), here, np.inf)
        box = [(0, len(fleets) - 1)]
        box += [model.level_window(i, period, u) for i, u in enumerate(before)] or [(0, 0)]
        best = _cheapest_in(masked, box)
        fleet, before = best[0], best[1:] if level_shape else ()
        chosen_fleets.append(fleets[fleet])
        chosen_levels.append(before)
    total = sum(
        model.period_dollars(p, f, u)
        for p, f, u in zip(parts, chosen_fleets, chosen_levels, strict=True)
    )
    return tuple(chosen_fleets), tuple(chosen_levels), total


_MAX_LEVEL_COMBINATIONS = 4_000_000
"""Committed level combinations of the offers signed together in one table (per fleet)."""


def offer_choices(offers: Sequence[CommittedOffer]) -> list[tuple[CommittedOffer, ...]]:
    """What a plan may sign: nothing, any one offer, or any number together (each choice
    with the longer terms first); offers held today (``current_units``) must be in it."""
    held = [o for o in offers if o.current_units > 0]
    ordered = sorted(offers, key=lambda o: -o.term_years)  # stable: input order within a term
    choices = [
        c
        for k in range(len(ordered) + 1)
        for c in itertools.combinations(ordered, k)
        if all(h in c for h in held)
    ]
    return choices


def choice_name(choice: Sequence[CommittedOffer]) -> str:
    """The offers of a choice, for progress lines: ``a+b``, or ``none``."""
    return "+".join(o.name for o in choice) or "none"


def check_search_size(model: ProcurementModel, fleets: int = 1) -> None:
    """A ValueError naming the offers when their level combinations (times the owned fleets
    searched together, with tranches) are too many to search."""
    combinations = math.prod(u + 1 for u in model.max_units_by_offer) * fleets
    if combinations > _MAX_LEVEL_COMBINATIONS:
        names = ", ".join(o.name for o in model.offers)
        owned = f" x {fleets:,} owned fleets" if fleets > 1 else ""
        raise ValueError(
            f"committed offers {names} signed together: {combinations:,} combinations of their "
            f"levels{owned} to search (at most {_MAX_LEVEL_COMBINATIONS:,}; firm demand peaks "
            f"at {model.firm_peak_gpus:,} GPUs over {model.inputs.horizon_months} months): set "
            "committed[].maxNodes"
        )


_MAX_OWNED_GPUS = 2_000_000
"""Owned GPU counts the owned-fleet search spans (``optimize.cheapest_mixes``: an array entry
and a node mix each): beyond it, set candidates[].maxNodes. Two candidate types without
maxNodes can own 1,200,000 8- and 4-GPU nodes' GPUs (``CostModel.max_ownable_gpus``)."""


def check_plan_size(
    inputs: PlanInputs,
    offers: Sequence[CommittedOffer],
    owned_tranche_months: int | None = None,
) -> None:
    """A ValueError, before any search, when the plan is too large to search in bounded
    memory: more owned GPU counts than ``_MAX_OWNED_GPUS`` (the demand's grown peak and the
    candidates' maxNodes decide), or for any choice of ``offers`` too many committed level
    combinations (``check_search_size``; with tranches, times the owned fleets). The same
    limits the search would meet later, after minutes of work or a MemoryError."""
    shared = SharedWork(fast=True)  # the same peaks, without building the horizon's curves
    owned = CostModel(inputs, shared)
    counts = owned.max_useful_gpus
    if counts > _MAX_OWNED_GPUS:
        names = ", ".join(t.name for t in inputs.node_types)
        raise ValueError(
            f"owned fleet search: {counts:,} owned GPU counts of candidates {names} to search "
            f"(at most {_MAX_OWNED_GPUS:,}; demand peaks at {owned.total.peak:,.0f} GPUs over "
            f"{inputs.horizon_months} months at "
            f"{inputs.demand_growth_per_year * 100:g}% growth a year): set candidates[].maxNodes"
        )
    for choice in offer_choices(offers):
        model = ProcurementModel(inputs, choice, shared, owned_tranche_months)
        fleets = len(fleet_grid(model)) if owned_tranche_months is not None else 1
        check_search_size(model, fleets)


_LIMIT_MARGIN = 1e-6
"""``best_schedule``'s limit lies this far (relative, and dollars) above the best plan found:
far more than the ties' 1e-9, so an entry a better plan could choose is never left out."""


def optimal_procurement(
    inputs: PlanInputs,
    offers: Sequence[CommittedOffer],
    shared: SharedWork | None = None,
    owned_tranche_months: int | None = None,
    *,
    prune: bool = True,
    max_fleets: int | None = None,
) -> Procurement:
    """The cheapest owned fleet, committed offers and committed levels per period: every
    owned size (its cheapest node mix), nothing, every offer and every set of offers signed
    together, the best schedule of each. Offers held today (``current_units``) are paid
    until their terms end, so every choice includes them. With ``owned_tranche_months`` owned
    nodes may also be bought at the start of every that many months (tranches: the fleet of
    every period is searched, never smaller than the one before).

    With ``prune`` a fleet whose ``ProcurementModel.lower_bound`` already costs at least what
    would let it replace the best found so far is not scheduled (nor replayed): it could not
    have replaced it; and a fleet that is scheduled leaves out the committed levels no
    schedule under the best found so far can take (``best_schedule``'s limit, a trace
    only). The answer is the same as without pruning. With ``max_fleets`` (the fast
    search's) only that many owned sizes, evenly spread, are searched (not with tranches)."""
    shared = SharedWork() if shared is None else shared
    best: Procurement | None = None
    best_dollars = math.inf
    for choice in offer_choices(offers):
        model = ProcurementModel(inputs, choice, shared, owned_tranche_months)
        if owned_tranche_months is not None:
            grid = fleet_grid(model)
            check_search_size(model, len(grid))
            fleets, levels, dollars = best_phased(model, grid)
            if dollars < best_dollars * (1.0 - _COST_EPS) - 1e-9:
                best_dollars = dollars
                best = Procurement(
                    choice,
                    fleets[0],
                    levels,
                    fleets=fleets,
                    owned_tranche_months=owned_tranche_months,
                )
            continue
        check_search_size(model)
        mixes = cheapest_mixes(model.owned_model)
        if max_fleets is not None and len(mixes) > max_fleets:
            stride = math.ceil(len(mixes) / max_fleets)
            mixes = [*mixes[::stride], *([mixes[-1]] if (len(mixes) - 1) % stride else [])]
        for done, (_, nodes) in enumerate(mixes):
            progress.step(f"procurement, offers {choice_name(choice)}: fleets", done, len(mixes))
            threshold = best_dollars * (1.0 - _COST_EPS) - 1e-9
            if prune and model.lower_bound(nodes) >= threshold:
                continue
            limit = best_dollars * (1.0 + _LIMIT_MARGIN) + _LIMIT_MARGIN if prune else math.inf
            schedule, dollars = best_schedule(model, nodes, limit)
            if dollars < best_dollars * (1.0 - _COST_EPS) - 1e-9:
                best_dollars = dollars
                best = Procurement(choice, tuple(nodes), schedule)
    assert best is not None
    return costed(inputs, best, shared)


def replay_ahead(inputs: PlanInputs, plans: Sequence[Procurement], shared: SharedWork) -> None:
    """Make at once (``SharedWork.side_by_side``) the replays that ``costed`` makes for
    ``plans`` one after the other, and record them as it does, in its order: a replay that
    one made before it makes unnecessary (committed nodes found enough) is left out there
    too. Nothing without workers or for one replay (made when asked)."""
    side = shared.side_by_side
    if side is None or side.workers < 2 or not inputs.jobs:
        return
    wanted: dict[tuple[tuple[int, ...], ReplayKey], tuple[ProcurementModel, list[int]]] = {}
    for plan in plans:
        model = ProcurementModel(inputs, plan.offers, shared, plan.owned_tranche_months)
        for sizes, committed, owned_key in model.replays_wanted(plan):
            wanted.setdefault((committed, owned_key), (model, sizes))
    if len(wanted) < 2:
        return
    made = side.run(
        {
            str(i): partial(_replay_task, inputs, sizes, committed)
            for i, ((committed, _), (_, sizes)) in enumerate(wanted.items())
        }
    )
    for i, ((committed, owned_key), (model, _)) in enumerate(wanted.items()):
        if shared.committed_usage(committed, owned_key) is None:
            model._keep_replay(committed, owned_key, made[str(i)])


def _replay_task(
    inputs: PlanInputs, sizes: list[int], committed: tuple[int, ...], _: object
) -> tuple[Usage, bool]:
    return replay_committed(
        inputs.jobs, sizes, inputs.cloud, committed, share_replicas=inputs.share_replicas
    )


def costed(inputs: PlanInputs, plan: Procurement, shared: SharedWork | None = None) -> Procurement:
    """``plan`` with the cost of each of its periods."""
    model = ProcurementModel(inputs, plan.offers, shared, plan.owned_tranche_months)
    return replace(
        plan,
        periods=tuple(
            model.period_cost(p, plan.fleet_at(k), u)
            for k, (p, u) in enumerate(zip(model.periods, plan.levels, strict=True))
        ),
    )
