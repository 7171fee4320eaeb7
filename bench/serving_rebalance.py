"""Serving rebalance on the Alibaba 2025 DLRM serving trace: how much cloud spend does the
surge rebalance save against today's behaviour (rebalance off), with how many disruptions?

Runs hybridgpu (the real ``core.decide``) over the same slice of the trace with the fleet of
examples/cluster-dlrm.yaml: once with ``rebalance.enabled: false``, then rebalancing with
each ``rebalance.headroomPercent`` of ``--headroom`` (0 is the rule before the headroom: every
free owned GPU may be taken). The slice keeps the instances that exist in its first
``--days`` days, each cut at the slice's end (so both runs bill the same window). Prints one
JSON object.

    .venv/bin/python bench/serving_rebalance.py --days 3 --headroom 0,1

``--core-nodes N`` sizes the owned pool differently (the shipped fleet has 250 nodes, 2,000
GPUs, against 3,100-3,300 GPUs of demand: its owned GPUs are never free for long).

The trace is read from ../shared/traces/alibaba-dlrm/ (relative to the repository); when it
is absent the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation, percentile
from hybridgpu.sim.traces import TraceJob, load_dlrm

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv"
CLUSTER = REPO / "examples" / "cluster-dlrm.yaml"
DAY = 86400.0


def sliced(jobs: list[TraceJob], days: float) -> list[TraceJob]:
    end = days * DAY
    return [
        replace(j, duration_seconds=min(j.duration_seconds, end - j.arrival_seconds))
        for j in jobs
        if j.arrival_seconds < end
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--cluster", default=str(CLUSTER))
    parser.add_argument("--days", type=float, default=3.0, help="slice length (3)")
    parser.add_argument("--max-per-tick", type=int, default=None, help="rebalance.maxPerTick")
    parser.add_argument("--no-off", action="store_true", help="skip the run with rebalance off")
    parser.add_argument(
        "--headroom",
        default=None,
        help="comma-separated rebalance.headroomPercent values, one rebalance run each "
        "(default: 0, today's rule before the headroom, and the policy's value)",
    )
    parser.add_argument(
        "--core-nodes",
        type=int,
        default=None,
        help="owned nodes in the core pool (default: the cluster file's maxNodes)",
    )
    args = parser.parse_args()
    if not Path(args.trace).exists():
        print(f"skipped: {args.trace} is absent (see /work/shared/traces/README.md)")
        return 0
    if args.days <= 0:
        print("error: --days must be > 0", file=sys.stderr)
        return 2
    config = load_cluster(args.cluster)
    pools = list(config.pools)
    if args.core_nodes is not None:
        if args.core_nodes < 0:
            print("error: --core-nodes must be >= 0", file=sys.stderr)
            return 2
        pools = [
            replace(
                p,
                spec=p.spec.model_copy(
                    update={"min_nodes": args.core_nodes, "max_nodes": args.core_nodes}
                ),
            )
            if p.spec.tier == "core"
            else p
            for p in pools
        ]
    jobs = sliced(load_dlrm(args.trace).jobs, args.days)
    policy = config.policy.spec
    if args.max_per_tick is not None:
        policy = policy.model_copy(
            update={
                "rebalance": policy.rebalance.model_copy(update={"max_per_tick": args.max_per_tick})
            }
        )
    out: dict[str, object] = {
        "days": args.days,
        "instances": len(jobs),
        "core_nodes": sum(p.spec.max_nodes for p in pools if p.spec.tier == "core"),
        "rebalance": policy.rebalance.model_dump(by_alias=True),
    }
    try:
        headrooms = (
            [float(h) for h in args.headroom.split(",")]
            if args.headroom is not None
            else sorted({0, policy.rebalance.headroom_percent})
        )
    except ValueError:
        print(f"error: --headroom {args.headroom!r}: numbers, comma-separated", file=sys.stderr)
        return 2
    if any(h < 0 for h in headrooms):
        print("error: --headroom values must be >= 0", file=sys.stderr)
        return 2
    runs = [("rebalance_off", False, 0.0)] * (not args.no_off) + [
        (f"rebalance_headroom_{h:g}%", True, h) for h in headrooms
    ]
    for name, enabled, headroom in runs:
        run_policy = policy.model_copy(
            update={
                "rebalance": policy.rebalance.model_copy(
                    update={"enabled": enabled, "headroom_percent": headroom}
                )
            }
        )
        started = time.perf_counter()
        sim = Simulation(name, pools, run_policy, jobs, SimSettings())
        result = sim.run()
        # Critical instances created after the slice's start (those there at its start all
        # arrive at once, and the cloud nodes the owned ones cannot hold boot for all of them).
        waits = [
            j.wait_seconds
            for j in sim.jobs
            if j.trace.criticality == "critical"
            and j.trace.arrival_seconds > 0
            and j.first_started is not None
        ]
        out[name] = {
            "cloud_cost_dollars": round(result.cloud_cost_dollars, 2),
            "total_cost_dollars": round(result.total_cost_dollars, 2),
            "cost_by_tier_dollars": {
                k: round(v, 2) for k, v in result.cost_by_tier_dollars.items()
            },
            "rebalances": result.rebalances,
            "serving_disruptions": result.serving_disruptions,
            "preemptions": result.preemptions,
            "unfinished": result.unfinished_jobs,
            "wait_seconds_critical": result.wait_seconds.get("critical"),
            "critical_arrivals": {
                "count": len(waits),
                "waited": sum(1 for w in waits if w > 0),
                "mean_wait_seconds": round(sum(waits) / len(waits), 1) if waits else 0.0,
                **{f"p{q}": round(percentile(waits, q), 1) for q in (50, 90, 95, 99)},
            },
            "gpu_hours": {k: round(v, 1) for k, v in result.gpu_hours.items()},
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
    if not args.no_off:
        off = out["rebalance_off"]["cloud_cost_dollars"]  # type: ignore[index]
        out["cloud_savings_percent"] = {
            name: round(100 * (off - out[name]["cloud_cost_dollars"]) / off, 1) if off else 0.0  # type: ignore[index]
            for name, enabled, _ in runs
            if enabled
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
