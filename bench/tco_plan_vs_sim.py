"""Does `hybridgpu plan` pick the owned size the simulator finds cheapest? Over several
synthetic traces (72 h each, different seeds), plan on the trace, then simulate it with every
owned size from none to past the peak (the real ``core.decide``, mean over seeds) and
compare. Prints one JSON object: per trace the plan's size, the simulator's cheapest size,
and when they differ how much dearer the plan's size simulates (the regret).

    .venv/bin/python bench/tco_plan_vs_sim.py          # about 5 minutes on one core

The cluster and physics are those of tests/unit/test_tco_sim.py: owned 8x V100 nodes, cloud
nodes of 1, 2, 4 and 8 GPUs, spot hazard 0.05/node-hour, 5 min restart, 30 min checkpoints,
2 min provisioning; the plan is given the same physics.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import PoolState
from hybridgpu.planner.io import history_from_jobs, jobs_of_trace
from hybridgpu.planner.model import CloudRates, OwnedNodeType, PlanInputs
from hybridgpu.planner.plan import plan_capacity
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob, synthetic

ON_DEMAND, SPOT = 3.06, 0.92  # $/GPU-hour
CORE_PRICING = {
    "capexPerNode": 70000,
    "amortizationYears": 4,
    "powerWattsPerNode": 3000,
    "pue": 1.4,
    "electricityPerKWh": 0.12,
    "opsPerNodeHour": 0.6,
}
HAZARD, RESTART, CHECKPOINT, PROVISIONING = 0.05, 300.0, 1800.0, 120.0
IDLE_FOR, INTERVAL = 300.0, 30.0


def _pool(name: str, tier: str, gpus: int, max_nodes: int) -> PoolState:
    spec: dict[str, Any] = {
        "tier": tier,
        "gpu": {"model": "V100-16GB", "perNode": gpus},
        "maxNodes": max_nodes,
        "scaleDown": {"idleFor": f"{IDLE_FOR:g}s"},
    }
    if tier == "core":
        spec |= {"minNodes": max_nodes, "provider": {"type": "static"}, "pricing": CORE_PRICING}
    else:
        price = ON_DEMAND if tier == "elastic" else SPOT
        spec |= {"provider": {"type": "fake"}, "pricing": {"perNodeHour": price * gpus}}
    manifest = {"apiVersion": "hybridgpu.io/v1alpha1", "kind": "GPUPool"}
    manifest |= {"metadata": {"name": name}, "spec": spec}
    return PoolState(name=name, spec=GPUPool.model_validate(manifest).spec)


def _cluster(owned_nodes: int) -> list[PoolState]:
    pools = [_pool("core", "core", 8, owned_nodes)] if owned_nodes else []
    for gpus in (1, 2, 4, 8):
        pools += [_pool(f"elastic-{gpus}g", "elastic", gpus, 64)]
        pools += [_pool(f"spot-{gpus}g", "spot", gpus, 64)]
    return pools


POLICY = ScalingPolicy.model_validate(
    {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "default"},
        "spec": {"interval": f"{INTERVAL:g}s", "pendingGracePeriod": "5s"},
    }
).spec


def _simulate(trace: list[TraceJob], owned_nodes: int, seeds: int) -> float:
    costs = []
    for seed in range(1, seeds + 1):
        settings = SimSettings(
            provisioning_delay_seconds=PROVISIONING,
            restart_overhead_seconds=RESTART,
            checkpoint_interval_seconds=CHECKPOINT,
            spot_hazard_per_hour=HAZARD,
            seed=seed,
        )
        result = Simulation("hybridgpu", _cluster(owned_nodes), POLICY, trace, settings).run()
        costs.append(result.total_cost_dollars)
    return sum(costs) / len(costs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="1,2,3,4,5,6,7,8,9", help="synthetic trace seeds")
    parser.add_argument("--seeds", type=int, default=3, help="simulations per owned size")
    args = parser.parse_args()
    node = OwnedNodeType(
        "8xV100", 8, 70000, 4, 3000, 1.4, 0.12, 0.6, cost_of_capital_per_year=0.0
    )  # straight line, as the simulator bills owned nodes
    rates = CloudRates(
        ON_DEMAND,
        SPOT,
        spot_interruptions_per_hour=HAZARD,
        spot_restart_overhead_hours=(RESTART + CHECKPOINT / 2) / 3600,
        node_startup_hours=PROVISIONING / 3600,
        idle_release_hours=(IDLE_FOR + INTERVAL / 2) / 3600,
    )
    started = time.perf_counter()
    rows = []
    for trace_seed in (int(s) for s in args.traces.split(",")):
        trace = synthetic(seed=trace_seed, hours=72.0)
        jobs = jobs_of_trace(trace)
        history = tuple(history_from_jobs(jobs))
        inputs = PlanInputs(history, (node,), rates, horizon_months=1, jobs=tuple(jobs))
        plan = plan_capacity(inputs, with_sensitivity=False)
        (owned,) = plan.recommended.nodes
        peak = math.ceil(max(s.total_gpus for s in history) / node.gpus_per_node)
        simulated = {n: _simulate(trace, n, args.seeds) for n in range(peak + 2)}
        best = min(simulated, key=lambda n: simulated[n])
        rows.append(
            {
                "trace_seed": trace_seed,
                "plan_nodes": owned,
                "simulated_cheapest_nodes": best,
                "regret_percent": round(100 * (simulated[owned] / simulated[best] - 1), 2),
                "simulated_dollars": {n: round(c, 0) for n, c in simulated.items()},
            }
        )
        print(f"  trace {trace_seed}: plan {owned}, simulator {best}", file=sys.stderr)
    agree = sum(1 for r in rows if r["plan_nodes"] == r["simulated_cheapest_nodes"])
    summary = {
        "traces": len(rows),
        "plan_picks_the_simulated_cheapest": agree,
        "worst_regret_percent": max(r["regret_percent"] for r in rows),
        "seconds": round(time.perf_counter() - started, 0),
        "by_trace": rows,
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
