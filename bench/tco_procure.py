"""Procurement plan (owned + committed + on-demand + spot) on a real trace: is the plan's mix
the optimum over the candidate grid, and how far is its projection from simulating the
recommended fleet?

Plans on the trace with the prices of a cluster file (its core pool is the owned candidate,
capped at ``--owned-max-nodes`` as a data-centre space limit; its cheapest elastic pool the
on-demand price; its cheapest spot pool the spot price) and committed offers at the 1- and
3-year discounts of public price lists (37% and 55%: Google Compute Engine resource-based
committed use discounts; docs/tco.md). Then:

- **optimum**: every owned node count and every committed level, each costed by the same
  model (job replays, or the fluid model with ``--fluid``), against the plan's mix (demand
  growth 0: every window is alike, so a constant level is optimal);
- **simulation**: the recommended fleet run by the simulator (the real ``core.decide``): the
  owned nodes as a core pool, the commitment as a committed pool of the cheapest elastic
  pool's shape, the cluster's elastic and spot pools for the rest, ``--seeds`` seeds; the
  plan's projection for the trace window against their mean.

    .venv/bin/python bench/tco_procure.py                                   # openb
    .venv/bin/python bench/tco_procure.py --format alibaba-dlrm \\
        --trace ../shared/traces/alibaba-dlrm/disaggregated_DLRM_trace.csv \\
        --cluster examples/cluster-dlrm.yaml --days 2 --fluid --owned-max-nodes 100

Prints one JSON object. When the trace is absent the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from hybridgpu.core.cost import gpu_hour_dollars
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.pool import GPUPoolSpec, Tier
from hybridgpu.models.snapshot import PoolState
from hybridgpu.planner.finance import mix
from hybridgpu.planner.io import history_from_jobs, jobs_of_trace
from hybridgpu.planner.model import CloudRates, PlanInputs
from hybridgpu.planner.procure import CommittedOffer, ProcurementModel, optimal_procurement
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import load_trace
from tco_openb import owned_node_type

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "alibaba-openb" / "openb_pod_list_default.csv"
CLUSTER = REPO / "examples" / "cluster.yaml"
# Google Compute Engine resource-based committed use discounts (GPUs included): 1 year 37%,
# 3 years 55% (docs/tco.md, "Committed capacity").
DISCOUNTS = {"1y": (1, 0.37), "3y": (3, 0.55)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--format", default="openb")
    parser.add_argument("--cluster", default=str(CLUSTER))
    parser.add_argument("--days", type=float, default=None, help="first N days of the trace")
    parser.add_argument("--owned-max-nodes", type=int, default=3)
    parser.add_argument("--horizon-months", type=int, default=36)
    parser.add_argument("--fluid", action="store_true", help="plan on the demand curve only")
    parser.add_argument("--spot-hazard", type=float, default=0.05, help="per node-hour")
    parser.add_argument("--restart-overhead", type=float, default=300.0, help="seconds")
    parser.add_argument("--checkpoint-interval", type=float, default=1800.0, help="seconds")
    parser.add_argument("--provisioning-delay", type=float, default=120.0, help="seconds")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--growth-percent",
        type=float,
        default=0.0,
        help="demand growth per year; with it, only the plan is compared: owned nodes bought "
        "in tranches every --owned-tranche-months against all at the start (the grid of "
        "constant levels and the simulation of one trace window assume no growth)",
    )
    parser.add_argument("--owned-tranche-months", type=int, default=3)
    parser.add_argument(
        "--committed-gpus-per-node",
        type=int,
        default=None,
        help="commit in nodes of this size (default: the cheapest elastic pool's), priced at "
        "that pool's discounted GPU-hour",
    )
    args = parser.parse_args()
    if not Path(args.trace).exists():
        print(f"skipped: {args.trace} is absent (see /work/shared/traces/README.md)")
        return 0

    config = load_cluster(args.cluster)
    trace = load_trace(args.trace, args.format).jobs
    if args.days is not None:
        start = min(j.arrival_seconds for j in trace)
        trace = [j for j in trace if j.arrival_seconds < start + args.days * 86400]
    jobs = jobs_of_trace(trace)
    (core_pool,) = [p for p in config.pools if p.spec.tier == Tier.CORE]
    elastic = [p for p in config.pools if p.spec.tier == Tier.ELASTIC]
    spot = [p for p in config.pools if p.spec.tier == Tier.SPOT]
    policy = config.policy.spec
    cloud_pools = elastic + spot
    idle_for = max(parse_duration_seconds(p.spec.scale_down.idle_for) for p in cloud_pools)
    interval = parse_duration_seconds(policy.interval)
    node = owned_node_type(core_pool, max_nodes=args.owned_max_nodes)
    cheapest = min(elastic, key=lambda p: (gpu_hour_dollars(p.spec), -p.spec.gpu.per_node))
    on_demand = gpu_hour_dollars(cheapest.spec)
    rates = CloudRates(
        on_demand_per_gpu_hour=on_demand,
        spot_per_gpu_hour=min(gpu_hour_dollars(p.spec) for p in spot),
        spot_interruptions_per_hour=args.spot_hazard,
        spot_restart_overhead_hours=(args.restart_overhead + args.checkpoint_interval / 2) / 3600,
        node_startup_hours=args.provisioning_delay / 3600,
        idle_release_hours=(idle_for + interval / 2) / 3600,
    )
    unit_gpus = args.committed_gpus_per_node or cheapest.spec.gpu.per_node
    offers = [
        CommittedOffer(
            name=name,
            term_years=term,
            per_gpu_hour=on_demand * (1 - discount),
            gpus_per_unit=unit_gpus,
        )
        for name, (term, discount) in DISCOUNTS.items()
    ]
    inputs = PlanInputs(
        history=tuple(history_from_jobs(jobs)),
        node_types=(node,),
        cloud=rates,
        horizon_months=args.horizon_months,
        demand_growth_per_year=args.growth_percent / 100.0,
        jobs=() if args.fluid else tuple(jobs),
    )
    if args.growth_percent:
        return compare_tranches(inputs, offers, args)
    started = time.perf_counter()
    plan = optimal_procurement(inputs, offers)
    plan_seconds = time.perf_counter() - started

    # The grid: every owned count up to the cap and every constant committed level of
    # nothing, every offer and both offers together (growth 0: every window is alike).
    started = time.perf_counter()
    grid_best = math.inf
    grid_at: tuple[str, int, tuple[int, ...]] = ("none", 0, ())
    evaluated = 0
    for choice in ((), *((o,) for o in offers), tuple(offers)):
        model = ProcurementModel(inputs, choice)
        for owned in range(args.owned_max_nodes + 1):
            if len(choice) < 2:
                for units in range(model.max_units + 1):
                    levels = (units,) if choice else ()
                    cost = sum(model.period_dollars(p, (owned,), levels) for p in model.periods)
                    evaluated += 1
                    if cost < grid_best:
                        grid_best, grid_at = cost, ("none", owned, ())
                        if choice:
                            grid_at = (choice[0].name, owned, levels)
                continue
            # Both together: every pair of levels at once, from the model's cost tables.
            table = sum(model.cost_table(p, (owned,)) for p in model.periods)
            evaluated += table.size
            at = np.unravel_index(int(np.argmin(table)), table.shape)
            if float(table[at]) < grid_best:
                grid_best = float(table[at])
                grid_at = ("+".join(o.name for o in choice), owned, tuple(int(i) for i in at))
    grid_seconds = time.perf_counter() - started

    (owned_nodes,) = plan.nodes
    first_levels = plan.levels[0]
    window_hours = (
        max(j.arrival_seconds + j.duration_seconds for j in jobs)
        - min(j.arrival_seconds for j in jobs)
    ) / 3600
    horizon_hours = sum(p.period.hours for p in plan.periods)
    projected = plan.total_dollars * window_hours / horizon_hours

    pools: list[PoolState] = []
    if owned_nodes:
        sized = core_pool.spec.model_copy(update={"max_nodes": owned_nodes, "min_nodes": 0})
        pools.append(PoolState(name=core_pool.name, spec=sized))
    for signed, units in zip(plan.offers, first_levels, strict=True):
        if not units:
            continue
        body = cheapest.spec.model_dump(by_alias=True, exclude_none=True)
        body["maxNodes"] = units
        body["gpu"] = {**body["gpu"], "perNode": unit_gpus}
        body["committed"] = {
            "nodes": units,
            "termYears": signed.term_years,
            "perNodeHour": signed.per_gpu_hour * unit_gpus,
        }
        committed = GPUPoolSpec.model_validate(body)
        pools.append(PoolState(name=f"committed-{signed.name}", spec=committed))
    pools += cloud_pools
    costs = []
    started = time.perf_counter()
    for seed in range(1, args.seeds + 1):
        settings = SimSettings(
            provisioning_delay_seconds=args.provisioning_delay,
            restart_overhead_seconds=args.restart_overhead,
            checkpoint_interval_seconds=args.checkpoint_interval,
            spot_hazard_per_hour=args.spot_hazard,
            seed=seed,
        )
        result = Simulation("hybridgpu", pools, policy, trace, settings).run()
        if result.unfinished_jobs:
            raise SystemExit(f"{result.unfinished_jobs} job(s) never finished")
        costs.append(result.total_cost_dollars)
        print(f"  seed {seed}: ${result.total_cost_dollars:,.0f}", file=sys.stderr)
    sim_seconds = time.perf_counter() - started
    simulated = sum(costs) / len(costs)
    shares = mix(inputs, plan)
    print(
        json.dumps(
            {
                "trace": str(args.trace),
                "jobs": len(jobs),
                "window_hours": round(window_hours, 1),
                "model": "fluid" if args.fluid else "job replay",
                "owned_max_nodes": args.owned_max_nodes,
                "on_demand_per_gpu_hour": round(on_demand, 4),
                "offers": {o.name: round(o.per_gpu_hour, 4) for o in offers},
                "plan": {
                    "offers": [o.name for o in plan.offers],
                    "owned_nodes": owned_nodes,
                    "committed_nodes": list(first_levels),
                    "mix_gpu_hours_percent": {
                        k: round(100 * v, 1) for k, v in shares.gpu_hours.items()
                    },
                    "mix_dollars_percent": {
                        k: round(100 * v, 1) for k, v in shares.dollars.items()
                    },
                    "base_owned_percent": round(100 * shares.base_owned_share, 1),
                    "seconds": round(plan_seconds, 1),
                },
                "grid": {
                    "fleets_evaluated": evaluated,
                    "best": {
                        "offer": grid_at[0],
                        "owned_nodes": grid_at[1],
                        "committed_nodes": list(grid_at[2]),
                    },
                    "plan_over_grid_best_percent": round(
                        100 * (plan.total_dollars / grid_best - 1), 6
                    ),
                    "seconds": round(grid_seconds, 1),
                },
                "projected_dollars": round(projected, 0),
                "simulated_dollars": [round(c, 0) for c in costs],
                "simulated_mean_dollars": round(simulated, 0),
                "plan_vs_simulation_percent": round(100 * (projected / simulated - 1), 2),
                "simulation_seconds": round(sim_seconds, 0),
            },
            indent=2,
        )
    )
    return 0


def compare_tranches(
    inputs: PlanInputs, offers: list[CommittedOffer], args: argparse.Namespace
) -> int:
    """The plan with owned nodes bought all at the start against the plan that may buy them in
    tranches: what each buys when, its total and its NPV at 8% (model figures only)."""
    from hybridgpu.planner.finance import cash_flow, npv

    out = {}
    for label, tranche in (("at_start", None), ("tranches", args.owned_tranche_months)):
        started = time.perf_counter()
        plan = optimal_procurement(inputs, offers, owned_tranche_months=tranche)
        seconds = time.perf_counter() - started
        flows = cash_flow(inputs, plan)
        out[label] = {
            "owned_bought": [{"month": m, "nodes": n[0]} for m, n in plan.tranches()],
            "offers": [o.name for o in plan.offers],
            "committed_nodes_first_window": list(plan.levels[0]),
            "total_dollars": round(plan.total_dollars, 0),
            "capex_by_quarter": [round(q.capex, 0) for q in flows],
            "npv_at_8_percent": round(npv(flows, 0.08, inputs.horizon_months), 0),
            "seconds": round(seconds, 1),
        }
    saved = 1 - out["tranches"]["total_dollars"] / out["at_start"]["total_dollars"]
    print(
        json.dumps(
            {
                "trace": str(args.trace),
                "model": "fluid" if args.fluid else "job replay",
                "growth_percent_per_year": args.growth_percent,
                "horizon_months": inputs.horizon_months,
                "owned_max_nodes": args.owned_max_nodes,
                **out,
                "tranches_save_percent": round(100 * saved, 2),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
