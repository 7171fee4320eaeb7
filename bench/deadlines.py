"""Deadline-aware spot: preemptible jobs with deadlines replayed against the measured spot
traces, hybridgpu against running them on-demand and against spot that ignores deadlines.

    .venv/bin/python bench/deadlines.py [--seeds 5] [--jobs 40] [--deadline-factor 1.3,3]
                                        [--owned-nodes 0]

Every job is a 1-GPU preemptible Job (p3.2xlarge-sized, the traces' instance type) with a
``hybridgpu.io/deadline`` between 1.3x and 3x (``--deadline-factor``) its duration after
arrival and an exact ``hybridgpu.io/expected-duration``; it checkpoints every 30 min. The
cluster has no owned GPUs: an on-demand pool ($3.06/GPU-h) and a spot pool ($0.92/GPU-h).
Each trace (../shared/traces/spot-preemptions, relative to the repo root) is replayed two
ways:

- ``measured``: the spot pool can launch only while the trace had an instance, and a node is
  taken at the trace's next preemption after its launch (one instance's measured life,
  as in Can't Be Late);
- ``spot-trace``: ``simulate --spot-trace`` physics: spot can always launch, each node is
  interrupted at the next preemption from a random point of the trace.

With ``--owned-nodes N`` the cluster also owns N 8-GPU nodes (the bundled scenario's core
nodes and prices) kept busy by a stream of 1-GPU preemptible Jobs without deadlines (2-16 h,
arriving over the same four days, about 1.5x what the owned GPUs can run, the rest on spot):
the deadline Jobs compete with deadline-free batch work for owned GPUs. The cost is then the
cloud spend (the owned fleet costs the same for every policy), and the background Jobs'
worst lateness is reported beside the misses.

With measured physics (and no owned nodes) the ``oracle`` row is the offline oracle
(``hybridgpu.sim.oracle``): each deadline Job's cheapest schedule that meets its deadline
knowing the trace (when spot can launch, when each node would be preempted), summed: a lower
bound on what any online policy pays under these physics. ``hybridgpu_over_oracle`` is
hybridgpu's cost over it; ``every_job_on_demand_dollars`` the oracle's physics with every
Job on one on-demand node from its arrival (boot and work only, no idle tail). The oracle
with less foresight, to see what each part is worth: ``on_demand_to_the_end_dollars`` (a Job
once on on-demand stays there, as hybridgpu's rule does), ``spot_until_reclaimed_dollars``
(a spot run lasts until it finishes or its node is reclaimed: no knowing when the
interruption comes), ``both_dollars``.

Prints one JSON object: per trace and physics, each policy's cost, deadline misses and the
saving against on-demand, summed over the seeds (``by_seed_dollars``: per seed); skips
cleanly when the traces are absent.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.models.base import parse_duration_seconds  # noqa: E402
from hybridgpu.models.snapshot import Criticality, PoolState  # noqa: E402
from hybridgpu.sim.config import parse_manifest  # noqa: E402
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation  # noqa: E402
from hybridgpu.sim.oracle import ON_DEMAND, SPOT, OraclePhysics, job_schedule  # noqa: E402
from hybridgpu.sim.spot import load_availability_trace  # noqa: E402
from hybridgpu.sim.traces import TraceJob, load_spot_trace  # noqa: E402

SPOT_TRACES = ROOT.parent / "shared" / "traces" / "spot-preemptions"
TRACES = (
    "aws-us-east-1c_p3.2xlarge_2023-04-22.json",
    "aws-us-west-2b_p3.2xlarge_2023-04-22.json",
)
POOLS = (
    {"name": "on-demand", "tier": "elastic", "price": 3.06},
    {"name": "spot", "tier": "spot", "price": 0.92},
)
CORE = {
    "name": "core",
    "tier": "core",
    "gpu": {"model": "V100-16GB", "perNode": 8},
    "provider": {"type": "static"},
    "pricing": {
        "capexPerNode": 70000,
        "amortizationYears": 4,
        "powerWattsPerNode": 3000,
        "pue": 1.4,
        "electricityPerKWh": 0.12,
        "opsPerNodeHour": 0.6,
    },
}
POLICY = {
    "interval": "30s",
    "pendingGracePeriod": "5s",
    "preemption": {"enabled": True, "moveToSpot": True, "minRuntime": "1m"},
    "consolidation": {"enabled": True},
}


def pools(*tiers: str, owned_nodes: int = 0) -> list[PoolState]:
    out = []
    if owned_nodes:
        spec = {
            **{k: v for k, v in CORE.items() if k != "name"},
            "minNodes": owned_nodes,
            "maxNodes": owned_nodes,
        }
        manifest = {
            "apiVersion": "hybridgpu.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": CORE["name"]},
            "spec": spec,
        }
        obj = parse_manifest(manifest, "bench/deadlines.py")
        out.append(PoolState(name=obj.metadata.name, spec=obj.spec))  # type: ignore[arg-type]
    for pool in POOLS:
        if pool["tier"] not in tiers:
            continue
        manifest = {
            "apiVersion": "hybridgpu.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": pool["name"]},
            "spec": {
                "tier": pool["tier"],
                "gpu": {"model": "V100-16GB", "perNode": 1},
                "maxNodes": 200,
                "provider": {"type": "fake"},
                "pricing": {"perNodeHour": pool["price"]},
                "scaleDown": {"idleFor": "5m"},
            },
        }
        obj = parse_manifest(manifest, "bench/deadlines.py")
        out.append(PoolState(name=obj.metadata.name, spec=obj.spec))  # type: ignore[arg-type]
    return out


def policy(*, on_demand_for_all: bool = False):  # type: ignore[no-untyped-def]
    spec = dict(POLICY)
    spec["preemption"] = {
        **POLICY["preemption"],  # type: ignore[dict-item]
        "allowOnDemandForPreemptible": on_demand_for_all,
    }
    manifest = {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    return parse_manifest(manifest, "bench/deadlines.py").spec


def deadline_jobs(
    seed: int, count: int, factor: tuple[float, float] = (1.3, 3.0)
) -> list[TraceJob]:
    """``count`` 1-GPU preemptible jobs arriving over four days, 2-16 h long, each with a
    deadline ``factor`` (low, high) times its duration after arrival (the expected duration
    is exact)."""
    rng = random.Random(f"deadlines:{seed}")
    jobs = []
    for i in range(count):
        duration = rng.uniform(2, 16) * 3600
        jobs.append(
            TraceJob(
                f"train-{i:03d}",
                rng.uniform(0, 4 * 86400),
                duration,
                1,
                Criticality.PREEMPTIBLE,
                deadline_seconds=duration * rng.uniform(*factor),
                expected_duration_seconds=duration,
            )
        )
    return sorted(jobs, key=lambda j: (j.arrival_seconds, j.name))


def background_jobs(seed: int, owned_nodes: int) -> list[TraceJob]:
    """1-GPU preemptible Jobs without deadlines, 2-16 h long, over four days: about 1.5x the
    GPU-hours ``owned_nodes`` 8-GPU nodes can run (none for 0)."""
    rng = random.Random(f"background:{seed}")
    rate = 1.5 * 8 * owned_nodes / 9.0  # per hour: GPUs / mean duration (9 h)
    jobs: list[TraceJob] = []
    t = 0.0
    while rate > 0:
        t += rng.expovariate(rate / 3600)
        if t >= 4 * 86400:
            break
        jobs.append(
            TraceJob(
                f"batch-{len(jobs):04d}",
                t,
                rng.uniform(2, 16) * 3600,
                1,
                Criticality.PREEMPTIBLE,
            )
        )
    return jobs


def settings_for(trace: str, physics: str, seed: int) -> SimSettings:
    path = SPOT_TRACES / trace
    return SimSettings(
        spot_trace=load_spot_trace(path),
        spot_availability=load_availability_trace(path) if physics == "measured" else None,
        spot_trace_aligned=physics == "measured",
        seed=seed,
    )


# The oracle with less foresight (sim/oracle.py): what each part of it is worth.
RESTRICTED = {
    "on_demand_to_the_end_dollars": (True, False),
    "spot_until_reclaimed_dollars": (False, True),
    "both_dollars": (True, True),
}


def oracle(trace: str, seed: int, jobs: list[TraceJob]) -> dict[str, float]:
    """The offline oracle of the deadline Jobs on the measured ``trace``, summed."""
    prices = {p["tier"]: float(p["price"]) for p in POOLS}  # type: ignore[arg-type]
    world = OraclePhysics.measured(
        settings_for(trace, "measured", seed),
        spot_pool="spot",
        spot_price=prices["spot"],
        on_demand_price=prices["elastic"],
        interval=parse_duration_seconds(str(POLICY["interval"])),
    )
    out = dict.fromkeys(
        (
            "cost_dollars",
            "deadline_jobs",
            "missed",
            "spot_hours",
            "on_demand_hours",
            "jobs_using_on_demand",
            "runs",
            "every_job_on_demand_dollars",
            *RESTRICTED,
        ),
        0.0,
    )
    for job in jobs:
        if job.deadline_at is None:
            continue
        plan = job_schedule(job, world)
        out["deadline_jobs"] += 1
        if plan is None or plan.finished_at > job.deadline_at + 1e-6:
            out["missed"] += 1
            continue
        out["cost_dollars"] += plan.dollars
        out["spot_hours"] += plan.hours(SPOT)
        out["on_demand_hours"] += plan.hours(ON_DEMAND)
        out["jobs_using_on_demand"] += any(r.tier == ON_DEMAND for r in plan.runs)
        out["runs"] += len(plan.runs)
        out["every_job_on_demand_dollars"] += world.dollars(
            ON_DEMAND, world.boot + job.duration_seconds
        )
        for key, (to_the_end, until_reclaimed) in RESTRICTED.items():
            restricted = job_schedule(
                job,
                world,
                on_demand_to_the_end=to_the_end,
                spot_until_reclaimed=until_reclaimed,
            )
            assert restricted is not None  # all on-demand from arrival is one of them
            out[key] += restricted.dollars
    return out


def run(
    trace: str, physics: str, seed: int, jobs: list[TraceJob], owned_nodes: int = 0
) -> dict[str, PolicyResult]:
    settings = settings_for(trace, physics, seed)
    owned = owned_nodes
    runs = {
        "hybridgpu": (pools("elastic", "spot", owned_nodes=owned), policy(), True),
        "spot_ignoring_deadlines": (
            pools("elastic", "spot", owned_nodes=owned),
            policy(),
            False,
        ),
        "on_demand": (
            pools("elastic", owned_nodes=owned),
            policy(on_demand_for_all=True),
            False,
        ),
    }
    return {
        name: Simulation(name, p, spec, jobs, settings, reads_annotations=reads).run()
        for name, (p, spec, reads) in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="job sets and trace offsets (5)")
    parser.add_argument("--jobs", type=int, default=40, help="jobs per seed (40)")
    parser.add_argument(
        "--deadline-factor",
        default="1.3,3",
        help="deadlines between LOW and HIGH times the duration after arrival (1.3,3)",
    )
    parser.add_argument(
        "--owned-nodes",
        type=int,
        default=0,
        help="owned 8-GPU nodes busy with deadline-free batch work (0)",
    )
    args = parser.parse_args()
    if args.owned_nodes < 0:
        print("deadlines: --owned-nodes must be 0 or more", file=sys.stderr)
        return 2
    low, high = (float(x) for x in args.deadline_factor.split(","))
    missing = [t for t in TRACES if not (SPOT_TRACES / t).exists()]
    if missing:
        print(json.dumps({"skipped": f"{SPOT_TRACES / missing[0]} not found"}))
        return 0
    start = time.perf_counter()
    out: dict[str, object] = {
        "seeds": args.seeds,
        "jobs_per_seed": args.jobs,
        "deadline_factor": [low, high],
        "owned_nodes": args.owned_nodes,
    }
    for trace in TRACES:
        availability = load_availability_trace(SPOT_TRACES / trace)
        per_physics: dict[str, object] = {
            "spot_available_share": round(1 - availability.unavailable_share, 3)
        }
        for physics in ("measured", "spot-trace"):
            totals: dict[str, dict[str, float]] = {}
            for seed in range(1, args.seeds + 1):
                jobs = deadline_jobs(seed, args.jobs, (low, high))
                jobs = sorted(
                    jobs + background_jobs(seed, args.owned_nodes),
                    key=lambda j: (j.arrival_seconds, j.name),
                )
                for name, result in run(trace, physics, seed, jobs, args.owned_nodes).items():
                    row = totals.setdefault(
                        name,
                        {
                            "cost_dollars": 0.0,
                            "deadline_jobs": 0,
                            "missed": 0,
                            "unfinished": 0,
                            "on_demand_moves": 0,
                            "returns_to_spot": 0,
                            "by_seed_dollars": [],
                        },
                    )
                    # With owned nodes, the cloud spend: the fleet costs every policy the same.
                    cost = (
                        result.cloud_cost_dollars if args.owned_nodes else result.total_cost_dollars
                    )
                    row["cost_dollars"] += cost
                    row["by_seed_dollars"].append(round(cost, 2))
                    row["on_demand_moves"] += result.deadlines.on_demand_moves
                    row["returns_to_spot"] += result.deadlines.returns_to_spot
                    if args.owned_nodes:
                        late = result.max_lateness_seconds.get("preemptible", 0.0) / 3600
                        row["preemptible_max_late_hours"] = round(
                            max(float(row.get("preemptible_max_late_hours", 0.0)), late), 2
                        )
                    # Misses count against the trace's deadlines, read by the policy or not.
                    row["deadline_jobs"] += result.deadlines.jobs
                    row["missed"] += result.deadlines.missed
                    row["unfinished"] += result.unfinished_jobs
                if physics == "measured" and not args.owned_nodes:
                    bound = oracle(trace, seed, jobs)
                    row = totals.setdefault("oracle", {"by_seed_dollars": []})
                    for key, value in bound.items():
                        row[key] = row.get(key, 0.0) + value
                    row["by_seed_dollars"].append(round(bound["cost_dollars"], 2))
            on_demand = totals["on_demand"]["cost_dollars"]
            for name, row in totals.items():
                row["cost_dollars"] = round(row["cost_dollars"], 2)
                row["saving_vs_on_demand"] = round(1 - row["cost_dollars"] / on_demand, 3)
                if name == "oracle":
                    for key in (
                        "spot_hours",
                        "on_demand_hours",
                        "every_job_on_demand_dollars",
                        *RESTRICTED,
                    ):
                        row[key] = round(row[key], 2)
                    for key in ("deadline_jobs", "missed", "jobs_using_on_demand", "runs"):
                        row[key] = int(row[key])
                    row["hybridgpu_over_oracle"] = round(
                        totals["hybridgpu"]["cost_dollars"] / row["cost_dollars"], 3
                    )
            per_physics[physics] = totals
        out[trace] = per_physics
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
