"""The openb targets of the simulator: hybridgpu against its baselines on the Alibaba trace.

    .venv/bin/python bench/simulate_openb.py [--spot-trace] [--cluster examples/cluster.yaml]

Reads ../shared/traces/ (relative to the repo root) and skips cleanly when it is absent.
Prints one JSON object: every policy's result, the ratios the targets are stated in, and the
wall time.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.sim.compare import WaitSLO, compare  # noqa: E402
from hybridgpu.sim.config import load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings  # noqa: E402
from hybridgpu.sim.traces import load_openb, load_spot_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
OPENB = TRACES / "alibaba-openb" / "openb_pod_list_default.csv"
SPOT = TRACES / "spot-preemptions" / "aws-us-east-1c_p3.2xlarge_2023-04-22.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default=str(ROOT / "examples" / "cluster.yaml"))
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--spot-trace", action="store_true", help="measured spot preemptions")
    args = parser.parse_args()
    if not OPENB.exists():
        print(json.dumps({"skipped": f"{OPENB} not found"}))
        return 0
    config = load_cluster(args.cluster)
    jobs = load_openb(OPENB, time_scale=args.time_scale).jobs
    settings = SimSettings(
        spot_hazard_per_hour=0.05,
        spot_trace=load_spot_trace(SPOT) if args.spot_trace and SPOT.exists() else None,
        seed=7,
    )
    start = time.perf_counter()
    results = compare(config.pools, config.policy.spec, jobs, settings)
    wall = time.perf_counter() - start
    hybrid = results["hybridgpu"]
    peer = results["autoscaler_spot"]
    bound = results["fluid_bound"]
    slo = WaitSLO()

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    out = {
        "jobs": len(jobs),
        "wall_seconds": round(wall, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "ratios": {
            "total_over_autoscaler_spot": ratio(hybrid.total_cost_dollars, peer.total_cost_dollars),
            "cloud_over_autoscaler_spot": ratio(hybrid.cloud_cost_dollars, peer.cloud_cost_dollars),
            "total_over_fluid_bound": ratio(hybrid.total_cost_dollars, bound.total_cost_dollars),
            "cloud_over_fluid_bound": ratio(hybrid.cloud_cost_dollars, bound.cloud_cost_dollars),
            "total_over_on_demand": ratio(
                hybrid.total_cost_dollars, results["on_demand"].total_cost_dollars
            ),
        },
        "meets_slo": {name: name == "fluid_bound" or slo.met_by(r) for name, r in results.items()},
        "critical_p95_wait_seconds": {
            name: r.wait_seconds["critical"]["p95"] for name, r in results.items()
        },
        "unfinished_jobs": hybrid.unfinished_jobs,
        "policies": {name: r.to_json() for name, r in results.items()},
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
