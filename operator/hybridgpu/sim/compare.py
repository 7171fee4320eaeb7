"""hybridgpu against the alternatives a user would really choose, and against a bound.

- ``autoscaler_spot``: core + on-demand + spot pools, critical/standard work scaled onto
  on-demand, preemptible work onto spot, idle nodes released; no preemption, no
  consolidation. What a Karpenter (or Cluster Autoscaler) user with a spot NodePool gets:
  the headline comparison.
- ``reactive``: core + on-demand, no spot (Cluster Autoscaler with one on-demand group).
- ``on_demand``: cloud only; the on-demand pools take everything.
- ``owned_only``: the core pools only; jobs queue.
- ``fluid_bound``: what no schedule meeting the wait SLO can beat (see ``fluid_bound``).

Owned nodes are billed over the trace window (the first arrival to the end of the last
job's required run), the same for every policy that has them: their cost is sunk, so it sits
on both sides of every comparison. Cloud spend, the part of the bill the operator controls,
is reported apart from the total.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from hybridgpu.core.cost import (
    core_node_cost,
    gpu_hour_dollars,
    node_hour_dollars,
    power_node_hour_dollars,
    powered,
)
from hybridgpu.errors import UserError, require_finite
from hybridgpu.models.policy import ScalingPolicySpec, WaitBudgetSpec
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.sim.config import share_fractional
from hybridgpu.sim.defaults import DEFAULT_FIRM_SLO_SECONDS, DEFAULT_PREEMPTIBLE_SLO_SECONDS
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation
from hybridgpu.sim.parallel import run_all
from hybridgpu.sim.prices import SpotPrices
from hybridgpu.sim.traces import TraceJob

POLICIES = ("hybridgpu", "autoscaler_spot", "reactive", "on_demand", "owned_only", "fluid_bound")
HEADLINE_PEER = "autoscaler_spot"
BOUND = "fluid_bound"


@dataclass(frozen=True)
class WaitSLO:
    """How late a job may finish against arriving and running at once, per class, seconds.

    The fluid bound holds for every schedule that meets it; a policy that does not (owned
    only, with its queue) can cost less than the bound by making work wait.
    """

    firm_seconds: float = DEFAULT_FIRM_SLO_SECONDS
    """Critical and standard jobs."""
    preemptible_seconds: float = DEFAULT_PREEMPTIBLE_SLO_SECONDS

    def late_seconds(self, criticality: str) -> float:
        return (
            self.preemptible_seconds
            if criticality == Criticality.PREEMPTIBLE
            else self.firm_seconds
        )

    def met_by(self, result: PolicyResult) -> bool:
        """Every job of every class finished within its allowance."""
        return all(
            late <= self.late_seconds(crit) + 1e-6
            for crit, late in result.max_lateness_seconds.items()
        )


def _without_moves(policy: ScalingPolicySpec, *, on_demand_for_all: bool) -> ScalingPolicySpec:
    """The policy with no preemption, no consolidation, no serving rebalance and no waiting
    for owned GPUs (an autoscaler buys a node for every pod that fits nowhere);
    ``on_demand_for_all`` lets preemptible work onto on-demand nodes (a cluster without spot
    runs it there)."""
    allow = on_demand_for_all or policy.preemption.allow_on_demand_for_preemptible
    return policy.model_copy(
        update={
            "preemption": policy.preemption.model_copy(
                update={"enabled": False, "allow_on_demand_for_preemptible": allow}
            ),
            "consolidation": policy.consolidation.model_copy(update={"enabled": False}),
            "rebalance": policy.rebalance.model_copy(update={"enabled": False}),
            "wait_budget": WaitBudgetSpec(critical="0s", standard="0s", preemptible="0s"),
        }
    )


def _tier(pools: Sequence[PoolState], *tiers: Tier) -> list[PoolState]:
    return [p for p in pools if p.spec.tier in tiers]


def core_cost_per_hour(pools: Sequence[PoolState]) -> float:
    """Hourly cost of the whole owned fleet (every core pool at maxNodes), dollars."""
    return sum(node_hour_dollars(p.spec) * p.spec.max_nodes for p in _tier(pools, Tier.CORE))


def core_sunk_per_hour(pools: Sequence[PoolState]) -> float:
    """What the owned fleet costs per hour whatever runs, dollars: every machine of a pool
    with spec.power costs its capex and ops (its electricity only while on, billed per run:
    ``PolicyResult.owned_power_dollars``), every other owned node its whole node-hour."""
    total = 0.0
    for p in _tier(pools, Tier.CORE):
        if powered(p.spec):
            parts = core_node_cost(p.spec)
            total += (parts.capex_per_hour + parts.ops_per_hour) * p.spec.max_nodes
        else:
            total += node_hour_dollars(p.spec) * p.spec.max_nodes
    return total


def _least_owned_power(pools: Sequence[PoolState], core_gpu_hours: float) -> float:
    """The least electricity owned machines with spec.power can draw for ``core_gpu_hours``
    of work, dollars: each GPU-hour at the cheapest such pool's power per GPU-hour, when every
    owned pool has spec.power (else the work may all run on always-on nodes: none)."""
    core = _tier(pools, Tier.CORE)
    if not core or not all(powered(p.spec) for p in core):
        return 0.0
    cheapest = min(power_node_hour_dollars(p.spec) / p.spec.gpu.per_node for p in core)
    return core_gpu_hours * cheapest


def trace_window_seconds(jobs: Sequence[TraceJob]) -> float:
    """From the first arrival to the end of the last job's required run, seconds."""
    if not jobs:
        return 0.0
    first = min(j.arrival_seconds for j in jobs)
    return max(j.arrival_seconds + j.duration_seconds for j in jobs) - first


def unserved_gpu_seconds(jobs: Sequence[tuple[float, float, float]], capacity_gpus: float) -> float:
    """GPU-seconds that ``capacity_gpus`` owned GPUs cannot run within the jobs' windows.

    ``jobs`` are (release, deadline, GPU-seconds of work). Work is fluid: any share of any
    job may run on any owned GPU at any time between its release and its deadline, at any
    rate. Earliest deadline first runs the most work in time on one pooled resource (Glover's
    rule for convex windows), so what it leaves over is the least that has to go elsewhere.
    """
    order = sorted(jobs)
    pending: list[list[float]] = []  # [deadline, work left]
    unserved = 0.0
    now = order[0][0] if order else 0.0
    i = 0
    while i < len(order) or pending:
        next_release = order[i][0] if i < len(order) else math.inf
        next_deadline = pending[0][0] if pending else math.inf
        until = min(next_release, next_deadline)
        room = capacity_gpus * max(until - now, 0.0)
        while pending and room > 0:
            head = pending[0]
            used = min(room, head[1])
            head[1] -= used
            room -= used
            if head[1] <= 0:
                heapq.heappop(pending)
        now = until
        while pending and pending[0][0] <= now:
            unserved += heapq.heappop(pending)[1]
        while i < len(order) and order[i][0] <= now:
            _, deadline, work = order[i]
            heapq.heappush(pending, [deadline, work])
            i += 1
    return unserved


def fluid_bound(
    pools: Sequence[PoolState],
    jobs: Sequence[TraceJob],
    window_seconds: float,
    slo: WaitSLO,
    spot_prices: SpotPrices | None = None,
) -> PolicyResult:
    """A lower bound on the cost of any schedule whose jobs all finish within ``slo``.

    Every job may run in any share on any GPU between its arrival and its allowed finish
    (per-GPU packing, no boot time, no billing minimum, no lost work). Owned GPUs cost
    nothing extra (the fleet is billed over the window either way). What they cannot run in
    time goes to the cloud: critical and standard work at the cheapest on-demand GPU-hour,
    preemptible work at the cheapest of spot and on-demand. With F the firm GPU-hours that
    cannot fit on the owned GPUs even alone, and A the GPU-hours of all work that cannot,
    every such schedule pays at least on_demand * F + cheapest * (A - F) in the cloud.
    A spot pool whose price moves (``spot_prices``) counts at the lowest price it has at any
    moment of the jobs' windows: cloud work of such a schedule runs within them, so it pays
    no less (the bound stays a bound, looser by what the price varies).
    """
    core_gpus = sum(p.spec.gpu.per_node * p.spec.max_nodes for p in _tier(pools, Tier.CORE))
    elastic = [
        gpu_hour_dollars(p.spec, p.spot_price_per_node_hour) for p in _tier(pools, Tier.ELASTIC)
    ]
    first = min((j.arrival_seconds for j in jobs), default=0.0)
    last = max(
        (j.arrival_seconds + j.duration_seconds + slo.late_seconds(j.criticality) for j in jobs),
        default=0.0,
    )
    spot = [
        (
            spot_prices.by_pool[p.name].lowest(first, last) / p.spec.gpu.per_node
            if spot_prices is not None and p.name in spot_prices
            else gpu_hour_dollars(p.spec, p.spot_price_per_node_hour)
        )
        for p in _tier(pools, Tier.SPOT)
    ]
    on_demand_price = min(elastic) if elastic else math.inf
    flexible_price = min([on_demand_price, *spot])
    firm: list[tuple[float, float, float]] = []
    everything: list[tuple[float, float, float]] = []
    for job in jobs:
        window = (
            job.arrival_seconds,
            job.arrival_seconds + job.duration_seconds + slo.late_seconds(job.criticality),
            job.gpus * job.duration_seconds,
        )
        everything.append(window)
        if job.criticality != Criticality.PREEMPTIBLE:
            firm.append(window)
    firm_cloud_h = unserved_gpu_seconds(firm, core_gpus) / 3600
    all_cloud_h = max(unserved_gpu_seconds(everything, core_gpus) / 3600, firm_cloud_h)
    flexible_cloud_h = all_cloud_h - firm_cloud_h
    if (firm_cloud_h > 1e-9 and not elastic) or (flexible_cloud_h > 1e-9 and not elastic + spot):
        raise UserError("fluid bound: demand exceeds the core fleet and no cloud pool can take it")
    cost = {t.value: 0.0 for t in Tier}
    hours = {t.value: 0.0 for t in Tier}
    cost[Tier.ELASTIC.value] += firm_cloud_h * on_demand_price if firm_cloud_h else 0.0
    hours[Tier.ELASTIC.value] += firm_cloud_h
    flexible_tier = Tier.SPOT.value if spot and min(spot) <= on_demand_price else "elastic"
    cost[flexible_tier] += flexible_cloud_h * flexible_price if flexible_cloud_h else 0.0
    hours[flexible_tier] += flexible_cloud_h
    total_h = sum(j.gpus * j.duration_seconds for j in jobs) / 3600
    hours[Tier.CORE.value] = max(total_h - all_cloud_h, 0.0)
    cost[Tier.CORE.value] = core_sunk_per_hour(pools) * window_seconds / 3600
    cost[Tier.CORE.value] += _least_owned_power(pools, hours[Tier.CORE.value])
    zero = {c.value: {"p50": 0.0, "p95": 0.0} for c in Criticality}
    return PolicyResult(
        name=BOUND,
        total_cost_dollars=sum(cost.values()),
        cost_by_tier_dollars=cost,
        gpu_hours={**hours, "billed": all_cloud_h, "lost": 0.0},
        wait_seconds=zero,
        preemptions=0,
        spot_interruptions=0,
        unfinished_jobs=0,
        jobs=len(jobs),
        max_lateness_seconds={c.value: 0.0 for c in Criticality},
    )


def policy_runs(
    pools: Sequence[PoolState], policy: ScalingPolicySpec
) -> dict[str, tuple[list[PoolState], ScalingPolicySpec]]:
    """The pools and policy each simulated policy of POLICIES runs with."""
    if not _tier(pools, Tier.ELASTIC):
        raise UserError("the cluster needs an elastic pool: the on_demand baseline runs on it")
    # Without spot pools, preemptible work runs on on-demand nodes like any other.
    no_spot = _without_moves(policy, on_demand_for_all=True)
    runs: dict[str, tuple[list[PoolState], ScalingPolicySpec]] = {
        "hybridgpu": (list(pools), policy)
    }
    if _tier(pools, Tier.SPOT):
        runs[HEADLINE_PEER] = (list(pools), _without_moves(policy, on_demand_for_all=False))
    runs["reactive"] = (_tier(pools, Tier.CORE, Tier.ELASTIC), no_spot)
    runs["on_demand"] = (_tier(pools, Tier.ELASTIC), no_spot)
    if _tier(pools, Tier.CORE):
        runs["owned_only"] = (_tier(pools, Tier.CORE), no_spot)
    return runs


def simulation(
    name: str,
    pools: Sequence[PoolState],
    policy: ScalingPolicySpec,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    progress: Callable[[float], None] | None = None,
    *,
    check_quiet: bool = False,
) -> Simulation:
    """The simulation of one policy of ``policy_runs`` (``check_quiet``: see Simulation)."""
    # Deadlines and idle reclaim are hybridgpu's: the baselines ignore the annotations.
    return Simulation(
        name,
        pools,
        policy,
        jobs,
        settings,
        progress=progress,
        reads_annotations=name == "hybridgpu",
        check_quiet=check_quiet,
    )


def _run(
    name: str,
    pools: Sequence[PoolState],
    policy: ScalingPolicySpec,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    progress: Callable[[float], None] | None,
) -> PolicyResult:
    return simulation(name, pools, policy, jobs, settings, progress).run()


def compare(
    pools: Sequence[PoolState],
    policy: ScalingPolicySpec,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    *,
    slo: WaitSLO | None = None,
    progress: Callable[[str, float], None] | None = None,
    failed: Callable[[str, Exception, int], None] | None = None,
    workers: int = 1,
) -> dict[str, PolicyResult]:
    """Every policy of POLICIES on the same trace and settings; owned nodes billed over the
    trace window for every policy that has them. ``workers`` > 1 simulates that many policies
    at once, in worker processes (``sim.parallel.run_all``, which calls ``progress`` and
    ``failed`` as the runs go), with the same results."""
    slo = slo or WaitSLO()
    jobs = share_fractional(jobs, pools)  # fractional GPUs as shares of shared pools
    # hybridgpu first (policy_runs' order): the longest run, the others fill the other workers.
    # The bound is not worth a process: 0.1 CPU s on the full DLRM trace.
    tasks = {
        name: partial(_run, name, run_pools, run_policy, jobs, settings)
        for name, (run_pools, run_policy) in policy_runs(pools, policy).items()
    }
    results = run_all(tasks, workers=workers, progress=progress, failed=failed)
    window = trace_window_seconds(jobs)
    hourly_core = core_sunk_per_hour(pools)
    for name, result in results.items():
        if name == "on_demand":
            continue
        # Machines powered off and on (spec.power) add the electricity they drew in the
        # window (a backlog run past it is not billed, as no owned node is).
        core = hourly_core * window / 3600 + result.owned_power_window_dollars
        result.cost_by_tier_dollars[Tier.CORE.value] = core
        result.total_cost_dollars = sum(result.cost_by_tier_dollars.values())
    results[BOUND] = fluid_bound(pools, jobs, window, slo, settings.spot_prices)
    ordered = {k: results[k] for k in POLICIES if k in results}
    check_figures(ordered)
    return ordered


def check_figures(results: dict[str, PolicyResult]) -> None:
    """FigureNotFinite naming the first dollar or GPU-hour figure of ``results`` that is inf
    or nan (a wait may be inf: a job that never started), before any is printed."""
    for name, r in results.items():
        figures = {
            "total_cost_dollars": r.total_cost_dollars,
            "cost_by_tier_dollars": r.cost_by_tier_dollars,
            "cost_terms_dollars": r.cost_terms_dollars,
            "gpu_hours": r.gpu_hours,
            "idle_reclaim": r.idle_reclaim.to_json(),
            "wait_seconds": {
                c: {q: v for q, v in qs.items() if not math.isinf(v)}
                for c, qs in r.wait_seconds.items()
            },
        }
        require_finite(figures, f"simulate: {name}")
