"""The planner's inputs and results: demand, the node types that can be owned, cloud prices,
and what a fleet costs; duration curves of demand.

Units are in the names: ``_hours``, ``_seconds``, ``_dollars``, ``_gpus``; rates are fractions
(0.2 = 20 %).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass

from hybridgpu.core.cost import HOURS_PER_YEAR, CoreNodeCost
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import DEFAULT_COST_OF_CAPITAL_PERCENT_PER_YEAR
from hybridgpu.models.policy import WaitBudgetSpec

HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0
DEFAULT_PREEMPTIBLE_WAIT_HOURS = parse_duration_seconds(WaitBudgetSpec().preemptible) / 3600.0


def capital_recovery_factor(rate_per_year: float, years: float) -> float:
    """The share of a purchase price to pay each year, for ``years`` years, to repay it with
    interest at ``rate_per_year`` (an annuity): r / (1 - (1 + r)^-n); 1 / n at r = 0."""
    if rate_per_year == 0:
        return 1.0 / years
    return rate_per_year / (1.0 - math.pow(1.0 + rate_per_year, -years))


def book_value_share(rate_per_year: float, years: float, age_years: float) -> float:
    """The share of the purchase price not yet recovered at ``age_years`` when it is recovered
    as an annuity over ``years`` (1 new, 0 at the end of its life); straight line at r = 0."""
    age = min(max(age_years, 0.0), years)
    if rate_per_year == 0:
        return 1.0 - age / years
    life = math.pow(1.0 + rate_per_year, years)
    return (life - math.pow(1.0 + rate_per_year, age)) / (life - 1.0)


@dataclass(frozen=True, slots=True)
class DemandSample:
    """GPUs in use during ``hours`` hours: firm (critical + standard) and preemptible."""

    hours: float
    firm_gpus: float
    preemptible_gpus: float

    @property
    def total_gpus(self) -> float:
        return self.firm_gpus + self.preemptible_gpus


@dataclass(frozen=True, slots=True)
class OwnedNodeType:
    """A node type that can be owned, with what one node costs.

    Its capex is recovered as an annuity over ``amortization_years`` at
    ``cost_of_capital_per_year`` (0.08 = 8 %), every hour of the horizon: a node is bought
    again at the end of its life, and what it is still worth when the horizon ends is its
    residual value (``residual_value_dollars``), not charged to the plan.
    """

    name: str
    gpus_per_node: int
    capex_dollars: float
    amortization_years: float
    power_watts: float
    pue: float
    electricity_per_kwh: float
    ops_per_node_hour: float = 0.0
    max_nodes: int | None = None
    current_nodes: int = 0
    cost_of_capital_per_year: float = DEFAULT_COST_OF_CAPITAL_PERCENT_PER_YEAR / 100.0
    throughput: float = 1.0
    """Work one of its GPUs does relative to a GPU of the demand's class (the trace's, the
    cloud's): 2.0 serves as much demand as two of them."""

    @property
    def work_gpus_per_node(self) -> int:
        """The node's capacity in GPUs of the demand's class (its GPUs x throughput, rounded
        to whole GPUs: the planner's capacity grid)."""
        return max(1, round(self.gpus_per_node * self.throughput))

    @property
    def work_hour_dollars(self) -> float:
        """One node-hour per unit of work (a demand-class GPU-hour) at full use, dollars."""
        return self.node_hour_dollars / (self.gpus_per_node * self.throughput)

    @property
    def watts_per_work_unit(self) -> float:
        """Wall power per demand-class GPU of work, watts (PUE not included)."""
        return self.power_watts / (self.gpus_per_node * self.throughput)

    @property
    def capital_per_year_dollars(self) -> float:
        """The annuity that repays one node's capex with interest over its amortization."""
        factor = capital_recovery_factor(self.cost_of_capital_per_year, self.amortization_years)
        return self.capex_dollars * factor

    @property
    def cost(self) -> CoreNodeCost:
        """One node-hour: capital recovery, power with PUE, ops; dollars."""
        return CoreNodeCost(
            capex_per_hour=self.capital_per_year_dollars / HOURS_PER_YEAR,
            power_per_hour=self.power_watts * self.pue * self.electricity_per_kwh / 1000.0,
            ops_per_hour=self.ops_per_node_hour,
        )

    @property
    def node_hour_dollars(self) -> float:
        return self.cost.total_per_hour

    def residual_value_dollars(self, horizon_years: float) -> float:
        """What one node bought at the start (and again at the end of each life) is still
        worth when the horizon ends: the capex its annuity has not yet recovered."""
        age = math.fmod(horizon_years, self.amortization_years)
        if age == 0:
            return 0.0  # the horizon ends with a life: nothing left
        rate = self.cost_of_capital_per_year
        return self.capex_dollars * book_value_share(rate, self.amortization_years, age)

    def purchases(self, horizon_years: float) -> int:
        """How many times one node is bought over the horizon (again at each life's end)."""
        return max(math.ceil(horizon_years / self.amortization_years - 1e-9), 1)

    @property
    def gpu_hour_dollars(self) -> float:
        return self.node_hour_dollars / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class CloudRates:
    """Rented capacity: dollars per GPU-hour and the spot interruption model."""

    on_demand_per_gpu_hour: float
    spot_per_gpu_hour: float
    spot_interruptions_per_hour: float = 0.0
    spot_restart_overhead_hours: float = 0.0
    node_startup_hours: float = 0.0
    """Jobs only: billed time from launching a cloud node to running work on it."""
    idle_release_hours: float = 0.0
    """Jobs only: billed time an idle cloud node waits for work before it is released."""
    preemptible_wait_hours: float = DEFAULT_PREEMPTIBLE_WAIT_HOURS
    """Jobs only: how long a preemptible job that fits on no owned node waits for owned GPUs
    while the free ones add up to what it needs, before it goes to spot (the operator's
    ScalingPolicy waitBudget.preemptible, default 2 h; 0: never waits)."""

    @property
    def spot_rerun_factor(self) -> float:
        """Spot GPU-hours billed per useful GPU-hour (work lost to interruptions runs again)."""
        lost = self.spot_interruptions_per_hour * self.spot_restart_overhead_hours
        return math.inf if lost >= 1.0 else 1.0 / (1.0 - lost)

    @property
    def spot_effective_per_gpu_hour(self) -> float:
        """Dollars per useful preemptible GPU-hour: spot with reruns, or on demand if cheaper."""
        return min(self.spot_per_gpu_hour * self.spot_rerun_factor, self.on_demand_per_gpu_hour)

    @property
    def spot_is_used(self) -> bool:
        """False when reruns make spot dearer than on demand (preemptible work goes there)."""
        return self.spot_per_gpu_hour * self.spot_rerun_factor < self.on_demand_per_gpu_hour


@dataclass(frozen=True, slots=True)
class JobDemand:
    """One job of a trace: it asks for ``gpus`` at ``arrival_seconds`` and runs for
    ``duration_seconds``; or, with ``shares``, for that many 1/``share_replicas`` shares of
    one GPU (a fractional job on shared GPUs, as the simulator's ``share_fractional``)."""

    arrival_seconds: float
    duration_seconds: float
    gpus: int
    preemptible: bool
    shares: int = 0
    share_replicas: int = 1

    @property
    def demand_gpus(self) -> float:
        """The GPUs it holds: whole ones, or its shares' part of one."""
        return self.shares / self.share_replicas if self.shares else float(self.gpus)

    def units(self, replicas: int) -> int:
        """What it takes of GPUs advertised as ``replicas`` units each."""
        if self.shares:
            if self.share_replicas != replicas:
                raise ValueError("a job's shares are of GPUs shared another number of ways")
            return self.shares
        return self.gpus * replicas


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """Everything the plan depends on. ``demand_growth_per_year`` is a fraction (0.2 = +20 %)."""

    history: tuple[DemandSample, ...]
    node_types: tuple[OwnedNodeType, ...]
    cloud: CloudRates
    horizon_months: int = 36
    demand_growth_per_year: float = 0.0
    preemptible_share: float | None = None
    """Overrides the measured preemptible share of every sample; ignored with ``jobs``."""
    jobs: tuple[JobDemand, ...] = ()
    """When set, cloud usage comes from replaying the jobs (``replay_jobs``), not the fluid
    model; ``history`` is then their demand (for the duration curve)."""
    share_replicas: int = 1
    """GPUs are shared this many ways (the plan's gpuSharing.replicas) for jobs that need a
    fraction of one; 1: no sharing, every job takes whole GPUs."""

    def __post_init__(self) -> None:
        if not self.node_types:
            raise ValueError("at least one owned node type is needed")
        if self.horizon_months < 1:
            raise ValueError("horizon_months must be >= 1")
        if self.demand_growth_per_year <= -1.0:
            raise ValueError("demand_growth_per_year must be > -1 (demand cannot vanish)")
        if sum(s.hours for s in self.history) <= 0:
            raise ValueError("the demand history covers no time")
        for t in self.node_types:
            if t.node_hour_dollars <= 0:
                raise ValueError(f"node type {t.name}: an owned node must cost something")

    @property
    def horizon_hours(self) -> float:
        return self.horizon_months * HOURS_PER_MONTH


@dataclass(frozen=True, slots=True)
class Usage:
    """Where demand runs with a given owned capacity: GPU-hours over some window."""

    owned: float
    elastic: float  # billed on-demand GPU-hours
    spot: float  # billed spot GPU-hours, reruns included
    committed: float = 0.0  # committed GPU-hours used (the commitment is paid in full anyway)

    def scaled(self, factor: float) -> Usage:
        return Usage(
            self.owned * factor, self.elastic * factor, self.spot * factor, self.committed * factor
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.owned + other.owned,
            self.elastic + other.elastic,
            self.spot + other.spot,
            self.committed + other.committed,
        )


@dataclass(frozen=True, slots=True)
class FleetCost:
    """What owning ``nodes`` (per node type) costs over the horizon, and where demand runs."""

    nodes: tuple[int, ...]
    owned_gpus: int
    horizon_hours: float
    core_dollars: float
    elastic_dollars: float
    spot_dollars: float
    demand_gpu_hours: float
    owned_used_gpu_hours: float
    elastic_gpu_hours: float
    spot_gpu_hours: float  # billed, reruns included

    @property
    def total_dollars(self) -> float:
        return self.core_dollars + self.elastic_dollars + self.spot_dollars

    @property
    def months(self) -> float:
        return self.horizon_hours / HOURS_PER_MONTH

    @property
    def owned_utilization(self) -> float:
        """Share of owned GPU-hours that serve demand, 0..1 (0 when nothing is owned)."""
        if self.owned_gpus == 0:
            return 0.0
        return self.owned_used_gpu_hours / (self.owned_gpus * self.horizon_hours)


class DurationCurve:
    """A weighted distribution of GPU levels: hours spent at each level.

    ``gpu_hours_below(g)`` = sum of hours x min(level, g): the GPU-hours that g GPUs can serve.
    """

    __slots__ = ("_levels", "_prefix_gpu_hours", "_suffix_hours", "hours", "total_gpu_hours")

    def __init__(self, points: Iterable[tuple[float, float]]) -> None:
        merged: dict[float, float] = {}
        get = merged.get
        for level, hours in points:
            if hours > 0:
                merged[level] = get(level, 0.0) + hours
        self._levels = sorted(merged)
        weights = [merged[v] for v in self._levels]
        # Running sums added in the same order as a loop would (0.0 + x is x exactly).
        products: map[float] = map(operator.mul, self._levels, weights)
        self._prefix_gpu_hours: list[float] = [0.0, *itertools.accumulate(products)]
        self._suffix_hours: list[float] = [*itertools.accumulate(reversed(weights))][::-1]
        self._suffix_hours.append(0.0)
        self.total_gpu_hours = self._prefix_gpu_hours[-1]
        self.hours = self._suffix_hours[0]

    @property
    def peak(self) -> float:
        return self._levels[-1] if self._levels else 0.0

    @property
    def levels(self) -> list[float]:
        """The distinct levels, lowest first (where ``gpu_hours_below`` bends)."""
        return self._levels

    def gpu_hours_below(self, gpus: float) -> float:
        """GPU-hours of the demand that ``gpus`` GPUs serve: sum of hours x min(level, gpus)."""
        i = bisect.bisect_left(self._levels, gpus)
        return self._prefix_gpu_hours[i] + gpus * self._suffix_hours[i]

    def hours_above(self, gpus: float) -> float:
        """Hours during which demand exceeds ``gpus``."""
        return self._suffix_hours[bisect.bisect_right(self._levels, gpus)]


def growth_factors(horizon_months: int, growth_per_year: float) -> list[tuple[float, int]]:
    """(demand multiplier, months) over the horizon, compounded monthly, mid-month."""
    counts: dict[float, int] = {}
    for month in range(horizon_months):
        factor = 1.0 if growth_per_year == 0 else (1.0 + growth_per_year) ** ((month + 0.5) / 12)
        counts[factor] = counts.get(factor, 0) + 1
    return sorted(counts.items())


def duration_curve(history: Iterable[DemandSample]) -> list[tuple[float, float]]:
    """(hours demand is at or above, GPUs) points of the total demand, highest first."""
    by_level: dict[float, float] = {}
    for s in history:
        by_level[s.total_gpus] = by_level.get(s.total_gpus, 0.0) + s.hours
    points: list[tuple[float, float]] = []
    hours = 0.0
    for level in sorted(by_level, reverse=True):
        hours += by_level[level]
        points.append((hours, level))
    return points


def history_from_intervals(
    intervals: Iterable[tuple[float, float, float, bool]],
) -> list[DemandSample]:
    """Demand samples of jobs given as (start_seconds, end_seconds, gpus, preemptible).

    The history runs from the first start to the last end; each sample holds while no job
    starts or ends.
    """
    changes: dict[float, list[float]] = {}
    for start, end, gpus, preemptible in intervals:
        if end <= start or gpus <= 0:
            continue
        slot = 1 if preemptible else 0
        changes.setdefault(start, [0.0, 0.0])[slot] += gpus
        changes.setdefault(end, [0.0, 0.0])[slot] -= gpus
    samples: list[DemandSample] = []
    firm = preemptible_gpus = 0.0
    times = sorted(changes)
    append = samples.append
    for at, after in itertools.pairwise(times):
        change = changes[at]
        firm += change[0]
        preemptible_gpus += change[1]
        # max(x, 0.0) without a call per sample (a 200,000-job trace has 400,000 samples)
        append(
            DemandSample(
                (after - at) / 3600.0,
                0.0 if firm < 0.0 else firm,
                0.0 if preemptible_gpus < 0.0 else preemptible_gpus,
            )
        )
    return samples
