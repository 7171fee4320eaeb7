"""The TCO planner: how many GPU nodes to own, and how much to rent on demand and on spot.

The model, per hour of the horizon:

- demand is GPUs in use, split into firm (critical + standard) and preemptible;
- owned GPUs serve firm demand first (the operator preempts preemptible work off core), then
  preemptible demand;
- firm demand above the owned GPUs runs on demand; preemptible demand above what is left runs
  on spot at ``spot / (1 - interruptions_per_hour x restart_overhead_hours)`` per useful
  GPU-hour (lost work is paid again), or on demand when that is cheaper;
- an owned node costs amortized capex + power x PUE x $/kWh + ops every hour, used or not
  (``core.cost``);
- demand grows by a yearly rate, compounded month by month over the horizon; the fleet is
  bought once, at the start.

With G owned GPUs the cloud bill falls with slope ``-on_demand`` while G is below firm demand,
``-spot`` between firm and total demand, and 0 above, and ``on_demand >= spot``: it is convex
in G, and so is the total cost of one node type in its node count. ``optimal_single_type`` buys
nodes while the next node saves more than it costs (exact by convexity); ``optimal_fleet``
handles several node types exactly with a knapsack over the total owned GPUs (the cheapest way
to own exactly g GPUs, then the best g). Both read the cloud bill off duration curves in
O(log n) per size.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from hybridgpu.core.cost import HOURS_PER_YEAR, CoreNodeCost
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import (
    CapacityPlanSpec,
    CapacityPlanStatus,
    MonthlyCost,
    Recommendation,
    SensitivityRow,
)

HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0
# Relative slack when comparing dollar totals, so float noise does not flip a choice.
_COST_EPS = 1e-9


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
    """A node type that can be owned, with what one node costs."""

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

    @property
    def cost(self) -> CoreNodeCost:
        """One node-hour: amortized capex, power with PUE, ops; dollars."""
        return CoreNodeCost(
            capex_per_hour=self.capex_dollars / (self.amortization_years * HOURS_PER_YEAR),
            power_per_hour=self.power_watts * self.pue * self.electricity_per_kwh / 1000.0,
            ops_per_hour=self.ops_per_node_hour,
        )

    @property
    def node_hour_dollars(self) -> float:
        return self.cost.total_per_hour

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
    ``duration_seconds``."""

    arrival_seconds: float
    duration_seconds: float
    gpus: int
    preemptible: bool


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """Everything the plan depends on. ``demand_growth_per_year`` is a fraction (0.2 = +20 %)."""

    history: tuple[DemandSample, ...]
    node_types: tuple[OwnedNodeType, ...]
    cloud: CloudRates
    horizon_months: int = 36
    demand_growth_per_year: float = 0.0
    preemptible_share: float | None = None
    jobs: tuple[JobDemand, ...] = ()
    """When set, cloud usage comes from replaying the jobs (``replay_jobs``), not the fluid
    model; ``history`` is then their demand (for the duration curve)."""

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


class DurationCurve:
    """A weighted distribution of GPU levels: hours spent at each level.

    ``gpu_hours_below(g)`` = sum of hours x min(level, g): the GPU-hours that g GPUs can serve.
    """

    __slots__ = ("_levels", "_prefix_gpu_hours", "_suffix_hours", "hours", "total_gpu_hours")

    def __init__(self, points: Iterable[tuple[float, float]]) -> None:
        merged: dict[float, float] = {}
        for level, hours in points:
            if hours > 0:
                merged[level] = merged.get(level, 0.0) + hours
        self._levels = sorted(merged)
        weights = [merged[v] for v in self._levels]
        self._prefix_gpu_hours = [0.0]
        for level, hours in zip(self._levels, weights, strict=True):
            self._prefix_gpu_hours.append(self._prefix_gpu_hours[-1] + level * hours)
        self._suffix_hours = [0.0] * (len(weights) + 1)
        for i in range(len(weights) - 1, -1, -1):
            self._suffix_hours[i] = self._suffix_hours[i + 1] + weights[i]
        self.total_gpu_hours = self._prefix_gpu_hours[-1]
        self.hours = self._suffix_hours[0]

    @property
    def peak(self) -> float:
        return self._levels[-1] if self._levels else 0.0

    def gpu_hours_below(self, gpus: float) -> float:
        """GPU-hours of the demand that ``gpus`` GPUs serve: sum of hours x min(level, gpus)."""
        i = bisect.bisect_left(self._levels, gpus)
        return self._prefix_gpu_hours[i] + gpus * self._suffix_hours[i]

    def hours_above(self, gpus: float) -> float:
        """Hours during which demand exceeds ``gpus``."""
        return self._suffix_hours[bisect.bisect_right(self._levels, gpus)]


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


ReplayKey = tuple[tuple[int, ...], tuple[bool, float, float, float, float]]


@dataclass(frozen=True, slots=True)
class Usage:
    """Where demand runs with a given owned capacity: GPU-hours over some window."""

    owned: float
    elastic: float  # billed on-demand GPU-hours
    spot: float  # billed spot GPU-hours, reruns included

    def scaled(self, factor: float) -> Usage:
        return Usage(self.owned * factor, self.elastic * factor, self.spot * factor)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.owned + other.owned, self.elastic + other.elastic, self.spot + other.spot)


ReplayCache = dict[ReplayKey, "Usage"]


class CostModel:
    """The cost of any owned fleet for one set of inputs.

    Fluid (a demand history): demand above the owned GPUs moves to the cloud and back at no
    cost, read off duration curves; only the number of owned GPUs matters. Jobs (a trace):
    ``replay_jobs`` places every job once, as the operator does, on the fleet's nodes; with
    demand growth the replay's extra cloud hours over the fluid model at today's demand are
    added to the fluid model of the grown demand.
    """

    def __init__(self, inputs: PlanInputs, replays: ReplayCache | None = None) -> None:
        self.inputs = inputs
        # Replays depend on the jobs, the fleet and the cloud's timing, not on prices: plans
        # that differ only in prices or growth (the sensitivity table) share them.
        self._replays: ReplayCache = {} if replays is None else replays
        firm, total = _horizon_curves(inputs)
        self.firm = firm
        self.total = total
        self.horizon_hours = inputs.horizon_hours
        self.node_hour_dollars = tuple(t.node_hour_dollars for t in inputs.node_types)
        self.gpus_per_node = tuple(t.gpus_per_node for t in inputs.node_types)
        self._usage: dict[tuple[int, ...], Usage] = {}
        self._flat: tuple[DurationCurve, DurationCurve] | None = None
        self._replay_weight = 0.0
        if inputs.jobs:
            window = _jobs_window_hours(inputs.jobs)
            self._replay_weight = inputs.horizon_months * HOURS_PER_MONTH / window
            if inputs.demand_growth_per_year != 0:
                self._flat = _horizon_curves(replace(inputs, demand_growth_per_year=0.0))

    @property
    def max_useful_gpus(self) -> int:
        """Owning more GPUs than this never pays: every extra node could go (see module doc)."""
        return math.ceil(self.total.peak - 1e-9) + max(self.gpus_per_node) - 1

    def owned_gpus(self, nodes: Sequence[int]) -> int:
        return sum(n * k for n, k in zip(nodes, self.gpus_per_node, strict=True))

    def usage(self, nodes: Sequence[int]) -> Usage:
        """Owned, on-demand and spot GPU-hours over the horizon with ``nodes`` owned."""
        key = tuple(nodes)
        cached = self._usage.get(key)
        if cached is not None:
            return cached
        owned = self.owned_gpus(key)
        if not self.inputs.jobs:
            usage = _fluid_usage(self.firm, self.total, owned, self.inputs.cloud)
        else:
            sizes = tuple(k for n, k in zip(key, self.gpus_per_node, strict=True) for _ in range(n))
            replay = self._replay(sizes, None)
            usage = replay.scaled(self._replay_weight)
            if self._flat is not None:
                flat = _fluid_usage(*self._flat, owned, self.inputs.cloud)
                grown = _fluid_usage(self.firm, self.total, owned, self.inputs.cloud)
                usage = Usage(
                    owned=max(grown.owned + usage.owned - flat.owned, 0.0),
                    elastic=max(grown.elastic + usage.elastic - flat.elastic, 0.0),
                    spot=max(grown.spot + usage.spot - flat.spot, 0.0),
                )
        self._usage[key] = usage
        return usage

    def _replay(self, sizes: tuple[int, ...], spot_allowed: bool | None) -> Usage:
        cloud = self.inputs.cloud
        timing = (
            cloud.spot_is_used and spot_allowed is not False,
            cloud.spot_rerun_factor,
            cloud.spot_restart_overhead_hours,
            cloud.node_startup_hours,
            cloud.idle_release_hours,
        )
        key = (tuple(sorted(sizes)), timing)
        usage = self._replays.get(key)
        if usage is None:
            usage = replay_jobs(self.inputs.jobs, sizes, cloud, spot_allowed=spot_allowed)
            self._replays[key] = usage
        return usage

    def cloud_dollars(self, nodes: Sequence[int]) -> float:
        """Cloud bill over the horizon with ``nodes`` owned, dollars."""
        cloud = self.inputs.cloud
        usage = self.usage(nodes)
        return usage.elastic * cloud.on_demand_per_gpu_hour + usage.spot * cloud.spot_per_gpu_hour

    def core_dollars(self, nodes: Sequence[int]) -> float:
        """Owned nodes over the horizon, dollars."""
        hourly = sum(n * c for n, c in zip(nodes, self.node_hour_dollars, strict=True))
        return hourly * self.horizon_hours

    def total_dollars(self, nodes: Sequence[int]) -> float:
        """Owned plus cloud cost of ``nodes`` (per node type) over the horizon, dollars."""
        return self.core_dollars(nodes) + self.cloud_dollars(nodes)

    def fleet_cost(self, nodes: Sequence[int]) -> FleetCost:
        """The full breakdown of ``nodes`` (per node type) over the horizon."""
        cloud = self.inputs.cloud
        usage = self.usage(nodes)
        return FleetCost(
            nodes=tuple(nodes),
            owned_gpus=self.owned_gpus(nodes),
            horizon_hours=self.horizon_hours,
            core_dollars=self.core_dollars(nodes),
            elastic_dollars=usage.elastic * cloud.on_demand_per_gpu_hour,
            spot_dollars=usage.spot * cloud.spot_per_gpu_hour,
            demand_gpu_hours=self.total.total_gpu_hours,
            owned_used_gpu_hours=usage.owned,
            elastic_gpu_hours=usage.elastic,
            spot_gpu_hours=usage.spot,
        )

    def all_on_demand_dollars(self) -> float:
        """Every GPU-hour of demand rented on demand, dollars over the horizon (jobs: with
        the same start-up and idle billing as the plan)."""
        od = self.inputs.cloud.on_demand_per_gpu_hour
        if not self.inputs.jobs:
            return self.total.total_gpu_hours * od
        replay = self._replay((), False)
        # Growth scales every GPU-hour of demand alike when nothing is owned.
        grown = self.total.total_gpu_hours
        flat = self._flat[1].total_gpu_hours if self._flat is not None else grown
        return replay.elastic * self._replay_weight * od * grown / flat


def _fluid_usage(
    firm: DurationCurve, total: DurationCurve, owned_gpus: float, cloud: CloudRates
) -> Usage:
    elastic = firm.total_gpu_hours - firm.gpu_hours_below(owned_gpus)
    served = total.gpu_hours_below(owned_gpus)
    preemptible_out = max(total.total_gpu_hours - served - elastic, 0.0)
    if cloud.spot_is_used:
        return Usage(served, elastic, preemptible_out * cloud.spot_rerun_factor)
    return Usage(served, elastic + preemptible_out, 0.0)


def _jobs_window_hours(jobs: Sequence[JobDemand]) -> float:
    start = min(j.arrival_seconds for j in jobs)
    end = max(j.arrival_seconds + j.duration_seconds for j in jobs)
    return max(end - start, 1.0) / 3600.0


@dataclass(slots=True)
class _Running:
    job: JobDemand
    tier: str  # core, elastic or spot
    started: float
    ends: float
    node: int = -1  # owned node index (core)


class _CloudTier:
    """Cloud GPUs of one tier at GPU granularity: launched on demand, reused while idle,
    released ``idle_release`` seconds after their last work; billed launch to release."""

    def __init__(self, startup: float, idle_release: float) -> None:
        self.startup = startup
        self.idle_release = idle_release
        self.idle: list[tuple[float, float]] = []  # (idle since, launched at), oldest first
        self.billed_seconds = 0.0

    def _expire(self, now: float) -> None:
        keep = 0
        for since, launched in self.idle:
            if since + self.idle_release < now:
                self.billed_seconds += since + self.idle_release - launched
            else:
                self.idle[keep] = (since, launched)
                keep += 1
        del self.idle[keep:]

    def take(self, gpus: int, now: float) -> tuple[float, list[float]]:
        """GPUs for a job arriving at ``now``: (when it can start, launch times of its GPUs)."""
        self._expire(now)
        launched: list[float] = []
        while self.idle and len(launched) < gpus:
            launched.append(self.idle.pop()[1])  # the most recently idle first
        fresh = gpus - len(launched)
        launched.extend([now] * fresh)
        return (now + self.startup if fresh else now), launched

    def give_back(self, launched: list[float], now: float) -> None:
        self.idle.extend((now, at) for at in launched)

    def close(self) -> float:
        """Billed GPU-seconds once every idle GPU is released."""
        for since, launched in self.idle:
            self.billed_seconds += since + self.idle_release - launched
        self.idle.clear()
        return self.billed_seconds


class _OwnedNodes:
    """Free GPUs of the owned nodes, bucketed by free count for best-fit placement."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.free = list(sizes)
        self.top = max(sizes, default=0)
        self.buckets: list[dict[int, None]] = [{} for _ in range(self.top + 1)]
        for i, size in enumerate(sizes):
            self.buckets[size][i] = None
        self.preemptible: list[dict[int, None]] = [{} for _ in sizes]  # by start order

    def best_fit(self, gpus: int) -> int | None:
        """The fullest node with ``gpus`` free (lowest index among equals), or None."""
        for free in range(gpus, self.top + 1):
            if self.buckets[free]:
                return min(self.buckets[free])
        return None

    def add(self, node: int, delta: int) -> None:
        del self.buckets[self.free[node]][node]
        self.free[node] += delta
        self.buckets[self.free[node]][node] = None


def replay_jobs(
    jobs: Sequence[JobDemand],
    owned_node_gpus: Sequence[int],
    cloud: CloudRates,
    *,
    spot_allowed: bool | None = None,
) -> Usage:
    """GPU-hours per tier over the trace's window when ``jobs`` meet owned nodes of
    ``owned_node_gpus`` GPUs each, placed as the operator places them, each job once:

    - a job that fits on an owned node runs there (the fullest node that fits);
    - a critical/standard job that does not fit evicts preemptible jobs from the owned node
      where that frees enough with the fewest GPUs (the most recently started first); they
      finish on spot after the restart overhead;
    - otherwise it runs in the cloud: preemptible on spot (reruns after interruptions), the
      rest on demand; a preemptible job comes back (after the restart overhead) once an
      owned node has sat idle for ``idle_release_hours``, as the operator's consolidation
      does, checked whenever a job arrives.

    Cloud GPUs are billed from launch (``node_startup_hours`` before the job can start) to
    ``idle_release_hours`` after their last job, and reused by jobs arriving meanwhile.
    """
    use_spot = cloud.spot_is_used and spot_allowed is not False
    restart = cloud.spot_restart_overhead_hours * 3600.0
    rerun = cloud.spot_rerun_factor if use_spot else 1.0
    tiers = {
        name: _CloudTier(cloud.node_startup_hours * 3600.0, cloud.idle_release_hours * 3600.0)
        for name in ("elastic", "spot")
    }
    owned = _OwnedNodes(owned_node_gpus)
    sizes = list(owned_node_gpus)
    idle_since: list[float | None] = [float("-inf")] * len(sizes)
    settle_after = cloud.idle_release_hours * 3600.0
    owned_seconds = 0.0
    running: dict[int, _Running] = {}
    launches: dict[int, list[float]] = {}
    finishes: list[tuple[float, int]] = []
    seq = itertools.count()

    def to_cloud(job: JobDemand, now: float, remaining: float) -> None:
        tier = "spot" if job.preemptible and use_spot else "elastic"
        start, launched = tiers[tier].take(job.gpus, now)
        ends = start + remaining * (rerun if tier == "spot" else 1.0)
        key = next(seq)
        running[key] = _Running(job, tier, start, ends)
        launches[key] = launched
        heapq.heappush(finishes, (ends, key))

    def to_core(job: JobDemand, node: int, now: float, seconds: float | None = None) -> None:
        key = next(seq)
        owned.add(node, -job.gpus)
        idle_since[node] = None
        ends = now + (job.duration_seconds if seconds is None else seconds)
        running[key] = _Running(job, "core", now, ends, node)
        if job.preemptible:
            owned.preemptible[node][key] = None
        heapq.heappush(finishes, (ends, key))

    def leave_core(key: int, run: _Running, now: float) -> None:
        nonlocal owned_seconds
        owned.add(run.node, run.job.gpus)
        if owned.free[run.node] == sizes[run.node]:
            idle_since[run.node] = now
        owned.preemptible[run.node].pop(key, None)
        owned_seconds += (now - run.started) * run.job.gpus

    def return_to_core(now: float) -> None:
        """Preemptible cloud jobs move to owned nodes idle for ``idle_release_hours``."""
        settled = [
            n
            for n, since in enumerate(idle_since)
            if since is not None and since + settle_after <= now
        ]
        if not settled:
            return
        movers = sorted(
            (
                k
                for k, r in running.items()
                if r.tier != "core" and r.job.preemptible and r.started <= now
            ),
            key=lambda k: (-running[k].job.gpus, k),
        )
        for key in movers:
            run = running[key]
            node = next((n for n in settled if owned.free[n] >= run.job.gpus), None)
            if node is None:
                continue
            del running[key]
            tiers[run.tier].give_back(launches.pop(key), now)
            left = (run.ends - now) / (rerun if run.tier == "spot" else 1.0)
            to_core(run.job, node, now, left + restart)

    def make_room(job: JobDemand) -> tuple[int, list[int]] | None:
        best: tuple[int, int, list[int]] | None = None
        for node, free in enumerate(owned.free):
            victims: list[int] = []
            room = free
            for key in reversed(owned.preemptible[node]):
                if room >= job.gpus:
                    break
                victims.append(key)
                room += running[key].job.gpus
            if room >= job.gpus:
                evicted = room - free
                if best is None or evicted < best[0]:
                    best = (evicted, node, victims)
        return None if best is None else (best[1], best[2])

    for job in sorted(jobs, key=lambda j: (j.arrival_seconds, j.duration_seconds)):
        now = job.arrival_seconds
        while finishes and finishes[0][0] <= now:
            at, key = heapq.heappop(finishes)
            run = running.pop(key, None)
            if run is None:
                continue  # evicted earlier
            if run.tier == "core":
                leave_core(key, run, at)
            else:
                tiers[run.tier].give_back(launches.pop(key), at)
        return_to_core(now)
        node = owned.best_fit(job.gpus)
        if node is not None:
            to_core(job, node, now)
            continue
        room = None if job.preemptible else make_room(job)
        if room is None:
            to_cloud(job, now, job.duration_seconds)
            continue
        node, victims = room
        for key in victims:
            run = running.pop(key)
            leave_core(key, run, now)
            to_cloud(run.job, now, run.ends - now + restart)
        to_core(job, node, now)
    while finishes:
        at, key = heapq.heappop(finishes)
        run = running.pop(key, None)
        if run is None:
            continue
        if run.tier == "core":
            leave_core(key, run, at)
        else:
            tiers[run.tier].give_back(launches.pop(key), at)
    return Usage(
        owned=owned_seconds / 3600.0,
        elastic=tiers["elastic"].close() / 3600.0,
        spot=tiers["spot"].close() / 3600.0,
    )


def growth_factors(horizon_months: int, growth_per_year: float) -> list[tuple[float, int]]:
    """(demand multiplier, months) over the horizon, compounded monthly, mid-month."""
    counts: dict[float, int] = {}
    for month in range(horizon_months):
        factor = 1.0 if growth_per_year == 0 else (1.0 + growth_per_year) ** ((month + 0.5) / 12)
        counts[factor] = counts.get(factor, 0) + 1
    return sorted(counts.items())


def _split(sample: DemandSample, preemptible_share: float | None) -> tuple[float, float]:
    if preemptible_share is None:
        return sample.firm_gpus, sample.total_gpus
    return sample.total_gpus * (1.0 - preemptible_share), sample.total_gpus


def _horizon_curves(inputs: PlanInputs) -> tuple[DurationCurve, DurationCurve]:
    """Firm and total demand duration curves over the whole horizon, in horizon hours."""
    history_hours = sum(s.hours for s in inputs.history)
    per_history_hour = HOURS_PER_MONTH / history_hours
    levels: dict[tuple[float, float], float] = {}
    for sample in inputs.history:
        key = _split(sample, inputs.preemptible_share)
        levels[key] = levels.get(key, 0.0) + sample.hours
    firm_points: list[tuple[float, float]] = []
    total_points: list[tuple[float, float]] = []
    for factor, months in growth_factors(inputs.horizon_months, inputs.demand_growth_per_year):
        weight = per_history_hour * months
        for (firm, total), hours in levels.items():
            firm_points.append((firm * factor, hours * weight))
            total_points.append((total * factor, hours * weight))
    return DurationCurve(firm_points), DurationCurve(total_points)


def optimal_single_type(model: CostModel, type_index: int = 0) -> int:
    """Fewest nodes of one type minimizing the total cost (others owned: none).

    Buys the next node while the cloud dollars it saves exceed what it costs; the saving of
    successive nodes never grows (convexity), so the first node that does not pay ends it.
    """
    node = model.inputs.node_types[type_index]
    k = node.gpus_per_node
    node_dollars = node.node_hour_dollars * model.horizon_hours
    limit = model.max_useful_gpus // k
    if node.max_nodes is not None:
        limit = min(limit, node.max_nodes)
    nodes = 0
    while nodes < limit:
        saving = model.cloud_dollars(_only(model, type_index, nodes)) - model.cloud_dollars(
            _only(model, type_index, nodes + 1)
        )
        if saving <= node_dollars * (1.0 + _COST_EPS):
            break
        nodes += 1
    return nodes


def _only(model: CostModel, type_index: int, nodes: int) -> tuple[int, ...]:
    counts = [0] * len(model.gpus_per_node)
    counts[type_index] = nodes
    return tuple(counts)


@dataclass(frozen=True, slots=True)
class OwnedSizeCost:
    """The cheapest way to own exactly ``owned_gpus`` GPUs and what it costs in total."""

    owned_gpus: int
    nodes: tuple[int, ...]
    total_dollars: float


def cost_by_owned_gpus(model: CostModel) -> list[OwnedSizeCost]:
    """For every owned GPU count that node types can make up, its cheapest fleet and total cost.

    A bounded knapsack over the node types (binary splitting of each type's node bound) gives
    the cheapest node mix owning exactly g GPUs, for g up to ``max_useful_gpus``.
    """
    g_max = model.max_useful_gpus
    types = model.inputs.node_types
    best: list[float] = [math.inf] * (g_max + 1)
    mix: list[tuple[int, ...]] = [()] * (g_max + 1)
    best[0], mix[0] = 0.0, (0,) * len(types)
    for j, node in enumerate(types):
        k = node.gpus_per_node
        bound = g_max // k
        if node.max_nodes is not None:
            bound = min(bound, node.max_nodes)
        chunk = 1
        while bound > 0:
            take = min(chunk, bound)
            bound -= take
            chunk *= 2
            size, dollars = take * k, take * node.node_hour_dollars
            for g in range(g_max, size - 1, -1):
                before = best[g - size]
                if before + dollars < best[g]:
                    best[g] = before + dollars
                    counts = list(mix[g - size])
                    counts[j] += take
                    mix[g] = tuple(counts)
    return [
        OwnedSizeCost(g, mix[g], best[g] * model.horizon_hours + model.cloud_dollars(mix[g]))
        for g in range(g_max + 1)
        if best[g] < math.inf
    ]


def optimal_fleet(model: CostModel) -> tuple[int, ...]:
    """Nodes per type minimizing the total cost over the horizon; ties: fewest owned GPUs."""
    sizes = cost_by_owned_gpus(model)
    choice = sizes[0]
    for size in sizes[1:]:
        if size.total_dollars < choice.total_dollars * (1.0 - _COST_EPS):
            choice = size
    return choice.nodes


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
    for at, after in itertools.pairwise(times):
        firm += changes[at][0]
        preemptible_gpus += changes[at][1]
        samples.append(
            DemandSample((after - at) / 3600.0, max(firm, 0.0), max(preemptible_gpus, 0.0))
        )
    return samples


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
