"""Idle reclaim and the under-used-node drain, in dollars, on the bundled scenario.

    .venv/bin/python bench/idle_reclaim.py [--seeds 8]

The bundled scenario (``hybridgpu simulate`` without arguments) has notebooks left open over
night at 2% GPU utilization, opted in to idle reclaim after 1 h (``sim.traces.idle_notebooks``).
hybridgpu runs it four ways: with and without idle reclaim (the notebooks' annotations read
or ignored), and with and without the drain of under-used cloud nodes (``_drainable`` in
core/decide.py; off: every cloud pool's ``scaleDown.idleUtilizationPercent`` at 0, so only
nodes without GPU pods count as idle). One run's decisions ripple through the rest of a
three-day trace, so the scenario is replayed for ``--seeds`` seeds (the scenario's own and the
simulator's), and each variant is compared with "neither" seed by seed.

Prints one JSON object: per variant the mean cloud spend, its difference to "neither" with
the standard error of that mean, unfinished jobs, and what idle reclaim took back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.models.pool import Tier  # noqa: E402
from hybridgpu.models.snapshot import PoolState  # noqa: E402
from hybridgpu.sim.config import ClusterConfig, load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings, Simulation  # noqa: E402
from hybridgpu.sim.traces import synthetic  # noqa: E402

VARIANTS = {
    "reclaim_and_drain": (True, True),
    "reclaim_only": (True, False),
    "drain_only": (False, True),
    "neither": (False, False),
}


def bundled_cluster() -> ClusterConfig:
    path = resources.files("hybridgpu.sim").joinpath("scenarios/default-cluster.yaml")
    with resources.as_file(path) as file:
        return load_cluster(file)


def without_drain(pools: tuple[PoolState, ...]) -> list[PoolState]:
    """The pools with no utilization-based idleness on cloud pools (empty nodes still go)."""
    out = []
    for pool in pools:
        if pool.spec.tier != Tier.CORE:
            scale_down = pool.spec.scale_down.model_copy(update={"idle_utilization_percent": 0.0})
            pool = PoolState(pool.name, pool.spec.model_copy(update={"scale_down": scale_down}))
        out.append(pool)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="seeds 1..N (8)")
    args = parser.parse_args()
    config = bundled_cluster()
    start = time.perf_counter()
    cloud: dict[str, list[float]] = {name: [] for name in VARIANTS}
    rows: dict[str, dict[str, float]] = {}
    for seed in range(1, args.seeds + 1):
        jobs = synthetic(seed=seed)
        settings = SimSettings(spot_hazard_per_hour=0.05, seed=seed)
        for name, (reclaim, drain) in VARIANTS.items():
            pools = list(config.pools) if drain else without_drain(config.pools)
            result = Simulation(
                name, pools, config.policy.spec, jobs, settings, reads_annotations=reclaim
            ).run()
            cloud[name].append(result.cloud_cost_dollars)
            row = rows.setdefault(
                name,
                {"unfinished_jobs": 0, "reclaimed_workloads": 0, "freed_gpu_hours": 0.0},
            )
            row["unfinished_jobs"] += result.unfinished_jobs
            row["reclaimed_workloads"] += result.idle_reclaim.workloads
            row["freed_gpu_hours"] += result.idle_reclaim.freed_gpu_hours
    base = cloud["neither"]
    out: dict[str, object] = {"seeds": args.seeds}
    for name, costs in cloud.items():
        diffs = [a - b for a, b in zip(costs, base, strict=True)]
        error = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
        out[name] = {
            "mean_cloud_dollars": round(statistics.mean(costs), 1),
            "vs_neither_dollars": round(statistics.mean(diffs), 1),
            "standard_error_dollars": round(error, 1),
            **{k: round(v, 1) for k, v in rows[name].items()},
        }
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
