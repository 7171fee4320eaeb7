"""hybridgpu against its baselines on one trace.

- ``on_demand``: cloud only; the elastic pools take everything, reactively.
- ``owned_only``: the core pools only; jobs queue.
- ``reactive``: core + elastic, requests-based, no spot, no preemption (Cluster Autoscaler).
- ``lower_bound``: the core fleet's fixed cost plus every GPU-hour of demand above it at its
  cheapest eligible price, with zero delay and perfect packing.

Owned nodes are billed over the same window for every policy (from 0 to the latest end of
any run): their cost is sunk, so a policy that finishes early does not get them for less.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hybridgpu.core.cost import gpu_hour_dollars, node_hour_dollars
from hybridgpu.errors import UserError
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

POLICIES = ("hybridgpu", "on_demand", "reactive", "owned_only", "lower_bound")


def _without_moves(policy: ScalingPolicySpec) -> ScalingPolicySpec:
    return policy.model_copy(
        update={
            "preemption": policy.preemption.model_copy(update={"enabled": False}),
            "consolidation": policy.consolidation.model_copy(update={"enabled": False}),
        }
    )


def _tier(pools: Sequence[PoolState], *tiers: Tier) -> list[PoolState]:
    return [p for p in pools if p.spec.tier in tiers]


def core_cost_per_hour(pools: Sequence[PoolState]) -> float:
    """Hourly cost of the whole owned fleet (every core pool at maxNodes), dollars."""
    return sum(node_hour_dollars(p.spec) * p.spec.max_nodes for p in _tier(pools, Tier.CORE))


def lower_bound(
    pools: Sequence[PoolState], jobs: Sequence[TraceJob], window_seconds: float
) -> PolicyResult:
    """Fixed core cost plus demand above the core fleet at its cheapest eligible price."""
    core_gpus = sum(p.spec.gpu.per_node * p.spec.max_nodes for p in _tier(pools, Tier.CORE))
    elastic = [
        gpu_hour_dollars(p.spec, p.spot_price_per_node_hour) for p in _tier(pools, Tier.ELASTIC)
    ]
    spot = [gpu_hour_dollars(p.spec, p.spot_price_per_node_hour) for p in _tier(pools, Tier.SPOT)]
    on_demand_price = min(elastic) if elastic else None
    spot_price = min(spot) if spot else on_demand_price
    changes: list[tuple[float, int, bool]] = []
    for job in jobs:
        preemptible = job.criticality == Criticality.PREEMPTIBLE
        changes.append((job.arrival_seconds, job.gpus, preemptible))
        changes.append((job.arrival_seconds + job.duration_seconds, -job.gpus, preemptible))
    changes.sort(key=lambda c: c[0])
    firm = flexible = 0
    last = 0.0
    cost = {t.value: 0.0 for t in Tier}
    hours = {t.value: 0.0 for t in Tier}
    for at, delta, preemptible in changes:
        dt = (at - last) / 3600
        if dt > 0:
            firm_over = max(0, firm - core_gpus)
            flex_over = max(0, flexible - max(0, core_gpus - firm))
            hours[Tier.CORE.value] += (firm + flexible - firm_over - flex_over) * dt
            if firm_over and on_demand_price is None:
                raise UserError(
                    "lower bound: demand exceeds the core fleet and there is no elastic pool"
                )
            cost[Tier.ELASTIC.value] += firm_over * dt * (on_demand_price or 0.0)
            hours[Tier.ELASTIC.value] += firm_over * dt
            spot_tier = Tier.SPOT.value if spot else Tier.ELASTIC.value
            cost[spot_tier] += flex_over * dt * (spot_price or 0.0)
            hours[spot_tier] += flex_over * dt
        last = at
        if preemptible:
            flexible += delta
        else:
            firm += delta
    cost[Tier.CORE.value] = core_cost_per_hour(pools) * window_seconds / 3600
    zero = {c.value: {"p50": 0.0, "p95": 0.0} for c in Criticality}
    return PolicyResult(
        name="lower_bound",
        total_cost_dollars=sum(cost.values()),
        cost_by_tier_dollars=cost,
        gpu_hours=hours,
        wait_seconds=zero,
        preemptions=0,
        spot_interruptions=0,
        unfinished_jobs=0,
        jobs=len(jobs),
    )


def compare(
    pools: Sequence[PoolState],
    policy: ScalingPolicySpec,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    *,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, PolicyResult]:
    """Every policy of POLICIES on the same trace and settings."""
    if not _tier(pools, Tier.ELASTIC):
        raise UserError("the cluster needs an elastic pool: the on_demand baseline runs on it")
    runs: dict[str, tuple[list[PoolState], ScalingPolicySpec]] = {
        "hybridgpu": (list(pools), policy),
        "on_demand": (_tier(pools, Tier.ELASTIC), _without_moves(policy)),
        "reactive": (_tier(pools, Tier.CORE, Tier.ELASTIC), _without_moves(policy)),
    }
    if _tier(pools, Tier.CORE):
        runs["owned_only"] = (_tier(pools, Tier.CORE), _without_moves(policy))
    results: dict[str, PolicyResult] = {}
    for name, (run_pools, run_policy) in runs.items():
        step = (lambda f, n=name: progress(n, f)) if progress else None
        results[name] = Simulation(name, run_pools, run_policy, jobs, settings, progress=step).run()
    window = max(r.end_seconds for r in results.values())
    window = max(window, max((j.arrival_seconds + j.duration_seconds for j in jobs), default=0.0))
    hourly_core = core_cost_per_hour(pools)
    for name, result in results.items():
        if name == "on_demand":
            continue
        result.cost_by_tier_dollars[Tier.CORE.value] = hourly_core * window / 3600
        result.total_cost_dollars = sum(result.cost_by_tier_dollars.values())
    results["lower_bound"] = lower_bound(pools, jobs, window)
    return {k: results[k] for k in POLICIES if k in results}
