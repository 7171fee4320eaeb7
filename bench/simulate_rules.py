"""The placement rules of issue 10 on the bundled scenario, as it is and when its jobs state
what the rules read.

    .venv/bin/python bench/simulate_rules.py [--seeds 7,1,2,3,4,5]

Waiting for owned GPUs (ScalingPolicy waitBudget) needs Jobs that state their expected
duration, and returning standard work to core needs Jobs that opt in; the bundled scenario
does neither, so these variants say what the rules are worth when workloads do:

- ``as-is``: the bundled scenario (``hybridgpu simulate``);
- ``expected``: every job states its exact duration (``hybridgpu.io/expected-duration``);
- ``noisy``: every job states its duration off by a factor drawn from [0.5, 2];
- ``return``: every standard job opts in to ``hybridgpu.io/return-to-core``;
- ``expected+return``: both.

The baselines read no annotation, so only hybridgpu changes. Prints one JSON object: per
variant and seed, hybridgpu's total and cloud spend, autoscaler_spot's and the fluid bound's,
the ``--explain`` terms, the critical p95 wait, unfinished jobs and whether every wait SLO
was met; and per variant the sums over the seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.models.snapshot import Criticality  # noqa: E402
from hybridgpu.sim.compare import BOUND, HEADLINE_PEER, WaitSLO, compare  # noqa: E402
from hybridgpu.sim.config import load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings  # noqa: E402
from hybridgpu.sim.report import explain_gap  # noqa: E402
from hybridgpu.sim.traces import TraceJob, synthetic  # noqa: E402

CLUSTER = ROOT / "operator" / "hybridgpu" / "sim" / "scenarios" / "default-cluster.yaml"
VARIANTS = ("as-is", "expected", "noisy", "return", "expected+return")


def annotate(jobs: list[TraceJob], variant: str) -> list[TraceJob]:
    """The jobs as the variant has them state their durations and opt in."""
    rng = random.Random(1)
    out = []
    for job in jobs:
        factor = rng.uniform(0.5, 2.0)
        if "expected" in variant:
            job = dataclasses.replace(job, expected_duration_seconds=job.duration_seconds)
        elif variant == "noisy":
            job = dataclasses.replace(job, expected_duration_seconds=job.duration_seconds * factor)
        if "return" in variant and job.criticality == Criticality.STANDARD:
            job = dataclasses.replace(job, return_to_core=True)
        out.append(job)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="7", help="scenario seeds, comma separated")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    config = load_cluster(CLUSTER)
    slo = WaitSLO()
    out: dict[str, object] = {}
    start = time.perf_counter()
    for variant in VARIANTS:
        rows = {}
        sums: dict[str, float] = {}
        for seed in seeds:
            jobs = annotate(synthetic(seed=seed), variant)
            results = compare(
                config.pools,
                config.policy.spec,
                jobs,
                SimSettings(spot_hazard_per_hour=0.05, seed=7),
            )
            hybrid, peer, bound = results["hybridgpu"], results[HEADLINE_PEER], results[BOUND]
            row = {
                "total_dollars": round(hybrid.total_cost_dollars, 2),
                "cloud_dollars": round(hybrid.cloud_cost_dollars, 2),
                "peer_total_dollars": round(peer.total_cost_dollars, 2),
                "peer_cloud_dollars": round(peer.cloud_cost_dollars, 2),
                "bound_cloud_dollars": round(bound.cloud_cost_dollars, 2),
                "explain": {k: round(v, 2) for k, v in explain_gap(hybrid, bound).items()},
                "critical_p95_wait_seconds": round(hybrid.wait_seconds["critical"]["p95"], 1),
                "peer_critical_p95_wait_seconds": round(peer.wait_seconds["critical"]["p95"], 1),
                "unfinished_jobs": hybrid.unfinished_jobs,
                "meets_slo": slo.met_by(hybrid),
            }
            rows[str(seed)] = row
            for key in ("total_dollars", "cloud_dollars", "peer_cloud_dollars"):
                sums[key] = round(sums.get(key, 0.0) + float(row[key]), 2)  # type: ignore[arg-type]
            sums["bound_cloud_dollars"] = round(
                sums.get("bound_cloud_dollars", 0.0) + bound.cloud_cost_dollars, 2
            )
        out[variant] = {"seeds": rows, "sum": sums}
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
