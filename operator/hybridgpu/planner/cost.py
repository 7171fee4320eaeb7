"""What any owned fleet costs over the horizon.

Fluid (a demand history): demand above the owned GPUs moves to the cloud and back at no cost,
read off duration curves. With G owned GPUs the cloud bill falls with slope ``-on_demand``
while G is below firm demand, ``-spot`` (with reruns) between firm and total demand, and 0
above; ``on_demand >= spot`` in the model, so the bill is convex in G.

Jobs (a trace): ``replay.replay_jobs`` places every job once, as the operator does, on the
fleet's nodes; with demand growth the replay's extra cloud hours over the fluid model at
today's demand are added to the fluid model of the grown demand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeAlias

import numpy as np

from hybridgpu.models.limits import MAX_NODES
from hybridgpu.planner.model import (
    HOURS_PER_MONTH,
    CloudRates,
    DemandSample,
    DurationCurve,
    FleetCost,
    JobDemand,
    PlanInputs,
    Usage,
    growth_factors,
    history_from_intervals,
)
from hybridgpu.planner.replay import replay_jobs

ReplayKey = tuple[tuple[int, ...], tuple[bool, float, float, float, float], int]
CurvesKey = tuple[float, int, float | None]
Curve: TypeAlias = "DurationCurve | ScaledCurve"
"""What ``CostModel`` reads demand off (``ScaledCurve``: the fast search's)."""
Task = Callable[[Any], Any]
"""Independent work (a replay, a flip-point search): called with a progress callback or
None (``sim.parallel.Task``), returns its picklable result."""


@dataclass(frozen=True, slots=True)
class SideBySide:
    """How to do independent work at once: ``run`` does every task of a mapping and returns
    their results by name, up to ``workers`` at a time (the CLI's: worker processes,
    ``sim.parallel.run_all``; the planner's maths starts none itself)."""

    run: Callable[[Mapping[str, Task]], dict[str, Any]]
    workers: int


class SharedWork:
    """Work the cost models of one plan's variants (the sensitivity table and its flip
    points) share: job replays depend on the jobs, the fleet and the cloud's timing, demand
    curves on the growth, the horizon and the preemptible share; neither on prices. Only for
    variants of one history and one set of jobs."""

    def __init__(self, *, fast: bool = False, side_by_side: SideBySide | None = None) -> None:
        self.fast = fast
        """The fast search's (planner/fast.py): demand curves over the horizon are read off
        the history's own curve (``ScaledCurve``) and procurement's fluid figures computed per
        query (``procure.ProcurementModel``), so nothing the size of the history times the
        horizon's months is built: the same sums in another order."""
        self.cloud_scale: tuple[float, float] = (1.0, 1.0)
        """The fast search's: procurement's fluid on-demand and spot GPU-hours times these
        (the replay's over the fluid model's at the replayed fleet: the start-up, idle and
        packing hours the fluid model leaves out)."""
        self.replays: dict[ReplayKey, Usage] = {}
        self.side_by_side = side_by_side
        """Where ``CostModel.replay_ahead`` makes replays at once (None: one at a time)."""
        self.made_ahead: dict[ReplayKey, Usage] = {}
        """Replays ``CostModel.replay_ahead`` made before they were asked for, by a
        ``ReplayKey`` whose owned node sizes are in the order replayed, not sorted (the same
        order and so the same replay as ``CostModel._replay`` would make):
        ``_made_ahead_key``."""
        self.committed_replays: dict[tuple[tuple[int, ...], ReplayKey], Usage] = {}
        """Replays with committed nodes (their sizes first): one plan's offers and pairs of
        offers commit the same node counts."""
        self.enough_committed: dict[ReplayKey, list[tuple[tuple[int, ...], Usage]]] = {}
        """Per owned fleet, committed node sizes (sorted) that every job committed capacity
        may serve found room on, and their usage: the usage of any longer list that starts
        with them (``replay.replay_committed``)."""
        self.curves: dict[CurvesKey, tuple[Curve, Curve]] = {}
        self.mixes: dict[
            tuple[int, tuple[tuple[int, int | None, float], ...]], list[tuple[int, tuple[int, ...]]]
        ] = {}
        """``optimize.cheapest_mixes`` by the most useful GPUs and the node types' sizes,
        bounds and prices: prices of the cloud change no mix."""
        self.period_curves: dict[
            tuple[tuple[float, ...], int, float | None], tuple[DurationCurve, DurationCurve, float]
        ] = {}
        """Procurement's demand curves of a period's monthly factors with some GPUs committed
        (firm, total, committed GPU-hours used): the same for every offer signed."""
        self.history_levels: dict[
            float | None, tuple[list[tuple[float, float, float]], np.ndarray | None]
        ] = {}
        """``procure.ProcurementModel``'s levels of the history, by preemptible share."""
        self.trace_firm: DurationCurve | None = None
        """The trace's firm demand curve in its own hours (``CostModel.lower_bound``)."""

    def committed_usage(self, committed: tuple[int, ...], owned: ReplayKey) -> Usage | None:
        """A known replay of ``committed`` nodes beside ``owned``: made, or the same as one
        whose committed nodes (a prefix of these) were enough."""
        usage = self.committed_replays.get((committed, owned))
        if usage is not None:
            return usage
        if not committed and owned in self.replays:
            # The same replay as the owned-only one of the fleet search (no committed node).
            return self.replays[owned]
        for enough, usage in self.enough_committed.get(owned, ()):
            if committed[: len(enough)] == enough:
                return usage
        return None

    def horizon_curves(self, inputs: PlanInputs) -> tuple[Curve, Curve]:
        key = (inputs.demand_growth_per_year, inputs.horizon_months, inputs.preemptible_share)
        curves = self.curves.get(key)
        if curves is None:
            build = _scaled_horizon_curves if self.fast else _horizon_curves
            curves = self.curves[key] = build(inputs)
        return curves


class CostModel:
    """The cost of any owned fleet for one set of inputs.

    Fluid (a demand history): demand above the owned GPUs moves to the cloud and back at no
    cost, read off duration curves; only the number of owned GPUs matters. Jobs (a trace):
    ``replay_jobs`` places every job once, as the operator does, on the fleet's nodes; with
    demand growth the replay's extra cloud hours over the fluid model at today's demand are
    added to the fluid model of the grown demand.
    """

    def __init__(self, inputs: PlanInputs, shared: SharedWork | None = None) -> None:
        self.inputs = inputs
        self._shared = SharedWork() if shared is None else shared
        firm, total = self._shared.horizon_curves(inputs)
        self.firm = firm
        self.total = total
        self.horizon_hours = inputs.horizon_hours
        self.node_hour_dollars = tuple(t.node_hour_dollars for t in inputs.node_types)
        self.gpus_per_node = tuple(t.work_gpus_per_node for t in inputs.node_types)
        self._usage: dict[tuple[int, ...], Usage] = {}
        self._flat: tuple[Curve, Curve] | None = None
        self._replay_weight = 0.0
        if inputs.jobs:
            window = _jobs_window_hours(inputs.jobs)
            self._replay_weight = inputs.horizon_months * HOURS_PER_MONTH / window
            if inputs.demand_growth_per_year != 0:
                flat = replace(inputs, demand_growth_per_year=0.0)
                self._flat = self._shared.horizon_curves(flat)

    @property
    def shared(self) -> SharedWork:
        """The work this model shares with the plan's other variants."""
        return self._shared

    @property
    def max_useful_gpus(self) -> int:
        """Owning more GPUs than this never pays: every extra node could go (see module doc);
        nor can more be owned than the candidates allow (``max_ownable_gpus``: the rest of
        the demand is rented, as the cloud bill of any fleet prices it)."""
        useful = math.ceil(self.total.peak - 1e-9) + max(self.gpus_per_node) - 1
        return min(useful, self.max_ownable_gpus)

    @property
    def max_ownable_gpus(self) -> int:
        """The most GPUs the candidates can own: each type's ``maxNodes`` (at most
        ``MAX_NODES``, a node count's limit) times its GPUs. The owned-fleet search
        (``optimize.cheapest_mixes``) never spans more: without it, a demand grown 1000 % a
        year for 10 years asked for an array of 10^12 owned GPU counts."""
        return sum(
            min(MAX_NODES if t.max_nodes is None else t.max_nodes, MAX_NODES) * k
            for t, k in zip(self.inputs.node_types, self.gpus_per_node, strict=True)
        )

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
            replay = self._replay(self._sizes(key), None)
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

    def _sizes(self, nodes: tuple[int, ...]) -> tuple[int, ...]:
        """The owned nodes' GPUs, node by node, in the order the replay numbers them."""
        return tuple(k for n, k in zip(nodes, self.gpus_per_node, strict=True) for _ in range(n))

    def _replay_key(self, sizes: tuple[int, ...], spot_allowed: bool | None) -> ReplayKey:
        cloud = self.inputs.cloud
        timing = (
            cloud.spot_is_used and spot_allowed is not False,
            cloud.spot_rerun_factor,
            cloud.spot_restart_overhead_hours,
            cloud.node_startup_hours,
            cloud.idle_release_hours,
        )
        return (tuple(sorted(sizes)), timing, self.inputs.share_replicas)

    def _replay(self, sizes: tuple[int, ...], spot_allowed: bool | None) -> Usage:
        key = self._replay_key(sizes, spot_allowed)
        usage = self._shared.replays.get(key)
        if usage is None:
            usage = self._shared.made_ahead.pop(_made_ahead_key(sizes, key), None)
        if usage is None:
            usage = self._replay_now(sizes, spot_allowed)
        self._shared.replays[key] = usage
        return usage

    def _replay_now(
        self, sizes: tuple[int, ...], spot_allowed: bool | None, _: Any = None
    ) -> Usage:
        return replay_jobs(
            self.inputs.jobs,
            sizes,
            self.inputs.cloud,
            spot_allowed=spot_allowed,
            share_replicas=self.inputs.share_replicas,
        )

    def replay_ahead(
        self,
        fleets: Sequence[Sequence[int] | None],
        spare: Sequence[Sequence[int] | None] = (),
    ) -> None:
        """Make now, at once (``SharedWork.side_by_side``), the replays ``usage`` will ask
        for with ``fleets`` (owned nodes per type; None: ``all_on_demand_dollars``'s), and
        while that leaves a worker idle those of ``spare`` (asked for later). Nothing
        without workers or a trace, or for one replay (made when asked). The usages are the
        ones made when asked: a replay depends on its fleet and the inputs only."""
        side = self._shared.side_by_side
        if side is None or side.workers < 2 or not self.inputs.jobs:
            return
        wanted: dict[tuple[tuple[int, ...], bool | None], ReplayKey] = {}

        def want(nodes: Sequence[int] | None) -> None:
            sizes, allowed = ((), False) if nodes is None else (self._sizes(tuple(nodes)), None)
            key = self._replay_key(sizes, allowed)
            made = _made_ahead_key(sizes, key) in self._shared.made_ahead
            if key not in self._shared.replays and not made and key not in wanted.values():
                wanted[(sizes, allowed)] = key

        for nodes in fleets:
            want(nodes)
        for nodes in spare:
            if len(wanted) % side.workers == 0:
                break
            want(nodes)
        if len(wanted) < 2:
            return
        made = side.run(
            {
                str(i): partial(self._replay_now, sizes, allowed)
                for i, (sizes, allowed) in enumerate(wanted)
            }
        )
        for i, ((sizes, _), key) in enumerate(wanted.items()):
            self._shared.made_ahead[_made_ahead_key(sizes, key)] = made[str(i)]

    def lower_bound(self, nodes: Sequence[int]) -> float:
        """Dollars ``total_dollars(nodes)`` cannot go below, without a replay (the fluid
        model: the total itself, which costs nothing to compute).

        With a trace: the owned nodes plus, on demand, the trace's firm demand above the
        owned GPUs. A critical or standard job runs from its arrival for its duration on an
        owned or an on-demand GPU (the replay never delays, evicts or moves one, and bills
        cloud GPUs from their launch), so with G owned GPUs the replay's on-demand GPU-hours
        are at least the firm demand above G. The growth correction (the grown fluid model
        less the flat one, added to the replay) grows with the replay's hours, so the bound
        goes through it; spot hours are at least 0. A relative margin of 1e-9 covers float
        rounding."""
        if not self.inputs.jobs:
            return self.total_dollars(nodes)
        owned = self.owned_gpus(nodes)
        curve = self._trace_firm_curve()
        above = curve.total_gpu_hours - curve.gpu_hours_below(owned)
        above = max(above - 1e-9 * curve.total_gpu_hours, 0.0) * self._replay_weight
        if self._flat is not None:
            flat = _fluid_usage(*self._flat, owned, self.inputs.cloud)
            grown = _fluid_usage(self.firm, self.total, owned, self.inputs.cloud)
            above = max(grown.elastic + above - flat.elastic, 0.0)
        od = self.inputs.cloud.on_demand_per_gpu_hour
        return (self.core_dollars(nodes) + above * od) * (1.0 - 1e-9)

    def _trace_firm_curve(self) -> DurationCurve:
        """The trace's firm demand, in the trace's own hours (shared by the plan's variants:
        it depends on the jobs only)."""
        if self._shared.trace_firm is None:
            samples = history_from_intervals(
                (j.arrival_seconds, j.arrival_seconds + j.duration_seconds, j.demand_gpus, False)
                for j in self.inputs.jobs
                if not j.preemptible
            )
            self._shared.trace_firm = DurationCurve((s.firm_gpus, s.hours) for s in samples)
        return self._shared.trace_firm

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


def _made_ahead_key(sizes: tuple[int, ...], key: ReplayKey) -> ReplayKey:
    """``key`` (its owned node sizes sorted) with ``sizes``, the owned nodes' GPUs in the
    order replayed, in their place: ``SharedWork.made_ahead``'s key. A replay depends on that
    order (best fit takes the first of equally full nodes), and ``SharedWork.replays`` keeps
    the order asked first; unsorted, a replay made ahead serves only the fleet whose nodes
    come in its order, so every fleet gets the replay it would get asked in turn."""
    return (sizes, *key[1:])


def _fluid_usage(firm: Curve, total: Curve, owned_gpus: float, cloud: CloudRates) -> Usage:
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


def _split(sample: DemandSample, preemptible_share: float | None) -> tuple[float, float]:
    if preemptible_share is None:
        return sample.firm_gpus, sample.total_gpus
    return sample.total_gpus * (1.0 - preemptible_share), sample.total_gpus


class ScaledCurve:
    """A duration curve of a base curve's levels times factors, each factor's hours times a
    weight: ``gpu_hours_below(g)`` = sum over factors of weight x factor x
    base.gpu_hours_below(g / factor) (min(f x level, g) = f x min(level, g / f)), without
    building the scaled curve (``DurationCurve``'s queries that ``CostModel`` reads)."""

    __slots__ = ("_base", "_parts", "hours", "peak", "total_gpu_hours")

    def __init__(self, base: DurationCurve, parts: Sequence[tuple[float, float]]) -> None:
        if any(f <= 0 for f, _ in parts):
            raise ValueError("demand factors must be positive")
        self._base = base
        self._parts = tuple(parts)
        self.total_gpu_hours = sum(w * f for f, w in parts) * base.total_gpu_hours
        self.hours = sum(w for _, w in parts) * base.hours
        self.peak = max((f for f, _ in parts), default=0.0) * base.peak

    def gpu_hours_below(self, gpus: float) -> float:
        base = self._base
        return sum(w * f * base.gpu_hours_below(gpus / f) for f, w in self._parts)


def _scaled_horizon_curves(inputs: PlanInputs) -> tuple[ScaledCurve, ScaledCurve]:
    """``_horizon_curves`` as ``ScaledCurve``s of the history's own curves."""
    history_hours = sum(s.hours for s in inputs.history)
    per_history_hour = HOURS_PER_MONTH / history_hours
    share = None if inputs.jobs else inputs.preemptible_share
    split = [(_split(s, share), s.hours) for s in inputs.history]
    firm = DurationCurve((f, h) for (f, _), h in split)
    total = DurationCurve((t, h) for (_, t), h in split)
    parts = [
        (factor, per_history_hour * months)
        for factor, months in growth_factors(inputs.horizon_months, inputs.demand_growth_per_year)
    ]
    return ScaledCurve(firm, parts), ScaledCurve(total, parts)


def _horizon_curves(inputs: PlanInputs) -> tuple[DurationCurve, DurationCurve]:
    """Firm and total demand duration curves over the whole horizon, in horizon hours."""
    history_hours = sum(s.hours for s in inputs.history)
    per_history_hour = HOURS_PER_MONTH / history_hours
    # A job trace carries each job's criticality: the share is for histories without one.
    share = None if inputs.jobs else inputs.preemptible_share
    levels: dict[tuple[float, float], float] = {}
    for sample in inputs.history:
        key = _split(sample, share)
        levels[key] = levels.get(key, 0.0) + sample.hours
    firm_points: list[tuple[float, float]] = []
    total_points: list[tuple[float, float]] = []
    for factor, months in growth_factors(inputs.horizon_months, inputs.demand_growth_per_year):
        weight = per_history_hour * months
        for (firm, total), hours in levels.items():
            firm_points.append((firm * factor, hours * weight))
            total_points.append((total * factor, hours * weight))
    return DurationCurve(firm_points), DurationCurve(total_points)
