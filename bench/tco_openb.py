"""TCO planner on the Alibaba openb trace: is the recommended fleet the best one the
simulator finds, and what does it save against renting everything on demand?

Plans on the trace with the prices of examples/cluster.yaml (its core pool is the candidate
node type, its cheapest elastic and spot pools the cloud prices), then runs the simulator
(the real ``core.decide``) on the same trace for every owned size from 0 to past the peak,
and once with on-demand pools only. Prints one JSON object.

    .venv/bin/python bench/tco_openb.py    # about 15 minutes on one core (3 seeds per size)

The trace is read from ../shared/traces/alibaba-openb/ (relative to the repository); when it
is absent the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from hybridgpu.core.cost import gpu_hour_dollars
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import PoolState
from hybridgpu.planner.cost import CostModel
from hybridgpu.planner.io import history_from_jobs, jobs_of_trace
from hybridgpu.planner.model import CloudRates, OwnedNodeType, PlanInputs
from hybridgpu.planner.plan import plan_capacity
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import load_openb

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "alibaba-openb" / "openb_pod_list_default.csv"
CLUSTER = REPO / "examples" / "cluster.yaml"


def owned_node_type(core_pool: PoolState, max_nodes: int | None = None) -> OwnedNodeType:
    """The planner's owned node priced as the core GPUPool is. The simulator bills owned
    nodes as GPUPool pricing does: straight line, no cost of capital. The plan is given the
    same, so that both price the same fleet alike (bench/tco_procure.py uses it too)."""
    pricing = core_pool.spec.pricing
    return OwnedNodeType(
        name=core_pool.name,
        gpus_per_node=core_pool.spec.gpu.per_node,
        capex_dollars=pricing.capex_per_node or 0.0,
        amortization_years=pricing.amortization_years or 4.0,
        power_watts=pricing.power_watts_per_node or 0.0,
        pue=pricing.pue or 1.4,
        electricity_per_kwh=pricing.electricity_per_kwh or 0.12,
        ops_per_node_hour=pricing.ops_per_node_hour or 0.0,
        max_nodes=max_nodes,
        cost_of_capital_per_year=0.0,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--cluster", default=str(CLUSTER))
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--spot-hazard", type=float, default=0.05, help="per node-hour")
    parser.add_argument("--restart-overhead", type=float, default=300.0, help="seconds")
    parser.add_argument("--checkpoint-interval", type=float, default=1800.0, help="seconds")
    parser.add_argument("--seeds", type=int, default=3, help="simulations per owned size")
    parser.add_argument("--provisioning-delay", type=float, default=120.0, help="seconds")
    args = parser.parse_args()
    if not Path(args.trace).exists():
        print(f"skipped: {args.trace} is absent (see /work/shared/traces/README.md)")
        return 0

    config = load_cluster(args.cluster)
    trace = load_openb(args.trace, time_scale=args.time_scale).jobs
    jobs = jobs_of_trace(trace)
    core = [p for p in config.pools if p.spec.tier == Tier.CORE]
    if len(core) != 1:
        raise SystemExit(f"{args.cluster}: expected exactly one core pool")
    core_pool = core[0]
    cloud_pools = [p for p in config.pools if p.spec.tier != Tier.CORE]
    elastic = [p for p in cloud_pools if p.spec.tier == Tier.ELASTIC]
    spot = [p for p in cloud_pools if p.spec.tier == Tier.SPOT]
    policy = config.policy.spec
    idle_for = max(parse_duration_seconds(p.spec.scale_down.idle_for) for p in cloud_pools)
    interval = parse_duration_seconds(policy.interval)

    node = owned_node_type(core_pool)
    rates = CloudRates(
        on_demand_per_gpu_hour=min(gpu_hour_dollars(p.spec) for p in elastic),
        spot_per_gpu_hour=min(gpu_hour_dollars(p.spec) for p in spot),
        spot_interruptions_per_hour=args.spot_hazard,
        # Work lost per interruption or move: the restart plus half a checkpoint interval on
        # average, as the simulator loses it.
        spot_restart_overhead_hours=(args.restart_overhead + args.checkpoint_interval / 2) / 3600,
        node_startup_hours=args.provisioning_delay / 3600,
        idle_release_hours=(idle_for + interval / 2) / 3600,
    )
    inputs = PlanInputs(
        history=tuple(history_from_jobs(jobs)),
        node_types=(node,),
        cloud=rates,
        horizon_months=1,
        jobs=tuple(jobs),
    )
    started = time.perf_counter()
    plan = plan_capacity(inputs, with_sensitivity=False)
    plan_seconds = time.perf_counter() - started
    (recommended,) = plan.recommended.nodes
    # The same demand as a duration curve (no job replay): what --history or Prometheus give.
    fluid = plan_capacity(replace(inputs, jobs=()), with_sensitivity=False)
    (fluid_nodes,) = fluid.recommended.nodes
    window_hours = (
        max(j.arrival_seconds + j.duration_seconds for j in jobs)
        - min(j.arrival_seconds for j in jobs)
    ) / 3600
    per_window = window_hours / plan.recommended.horizon_hours

    def simulate(pools: list[PoolState], policy: ScalingPolicySpec = policy) -> float:
        """The mean total cost over ``--seeds`` seeds: spot interruptions are random, the
        plan is an expectation."""
        costs = []
        for seed in range(1, args.seeds + 1):
            settings = SimSettings(
                provisioning_delay_seconds=args.provisioning_delay,
                restart_overhead_seconds=args.restart_overhead,
                checkpoint_interval_seconds=args.checkpoint_interval,
                spot_hazard_per_hour=args.spot_hazard,
                seed=seed,
            )
            costs.append(Simulation("hybridgpu", pools, policy, trace, settings).run())
        unfinished = max(c.unfinished_jobs for c in costs)
        if unfinished:
            raise SystemExit(f"{unfinished} job(s) never finished: the figure would be wrong")
        return sum(c.total_cost_dollars for c in costs) / len(costs)

    peak_nodes = math.ceil(max(s.total_gpus for s in inputs.history) / node.gpus_per_node)
    simulated: dict[int, float] = {}
    started = time.perf_counter()
    # Everything on demand: preemptible work too (admission would otherwise keep it off
    # elastic nodes, and with no spot pool it would never run).
    everything_on_demand = policy.model_copy(
        update={
            "preemption": policy.preemption.model_copy(
                update={"allow_on_demand_for_preemptible": True}
            )
        }
    )
    on_demand = simulate(elastic, everything_on_demand)
    for owned in range(0, peak_nodes + 2):
        sized = core_pool.spec.model_copy(update={"max_nodes": owned, "min_nodes": owned})
        pools = ([PoolState(name=core_pool.name, spec=sized)] if owned else []) + cloud_pools
        simulated[owned] = simulate(pools)
        print(f"  simulated {owned} owned node(s): ${simulated[owned]:,.0f}", file=sys.stderr)
    sim_seconds = time.perf_counter() - started
    best = min(simulated, key=lambda n: simulated[n])
    projected = plan.recommended.total_dollars * per_window
    fluid_model = CostModel(replace(inputs, jobs=()))
    print(
        json.dumps(
            {
                "trace": str(args.trace),
                "jobs": len(jobs),
                "window_hours": round(window_hours, 1),
                "recommended_nodes": recommended,
                "plan_seconds": round(plan_seconds, 2),
                "projected_dollars": round(projected, 0),
                "simulated_dollars_by_owned_nodes": {k: round(v, 0) for k, v in simulated.items()},
                "simulated_best_nodes": best,
                "recommended_over_best_percent": round(
                    100 * (simulated[recommended] / simulated[best] - 1), 2
                ),
                "plan_vs_simulation_percent": round(
                    100 * (projected / simulated[recommended] - 1), 2
                ),
                "fluid_recommended_nodes": fluid_nodes,
                "fluid_projected_dollars_by_owned_nodes": {
                    k: round(fluid_model.total_dollars((k,)) * per_window, 0) for k in simulated
                },
                "simulated_all_on_demand_dollars": round(on_demand, 0),
                "saving_vs_all_on_demand_percent": round(
                    100 * (1 - simulated[recommended] / on_demand), 1
                ),
                "simulation_seconds": round(sim_seconds, 0),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
