"""A sha256 of every policy's results and every job's outcome, to show a speed-up changed none.

    .venv/bin/python bench/sim_digest.py bundled                 # `hybridgpu simulate`'s scenario
    .venv/bin/python bench/sim_digest.py synthetic --jobs 20000  # as bench/simulate_scale.py
    .venv/bin/python bench/sim_digest.py dlrm                    # the DLRM trace, as the same

Run it on the code before and after a change (``PYTHONPATH=<tree>/operator``, from that tree)
and compare the lines. Per policy it hashes every field of its ``PolicyResult`` (dollars, cost
terms, GPU-hours, waits, the cost and capacity series) and, per job, when it first started,
when it finished, how long it waited, what it lost, when it was reclaimed, its restarts and
runs; floats as ``repr``, so bit for bit. ``ticks`` is left out (ticks skipped as quiet may
change without changing anything else); the ticks and ``decide()`` calls are printed apart,
with the CPU seconds of each run. The fluid bound is hashed too. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import fields, is_dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "bench"))

import simulate_scale  # noqa: E402
from hybridgpu.sim.compare import (  # noqa: E402
    WaitSLO,
    fluid_bound,
    policy_runs,
    simulation,
    trace_window_seconds,
)
from hybridgpu.sim.config import load_cluster, share_fractional  # noqa: E402
from hybridgpu.sim.engine import SimSettings  # noqa: E402
from hybridgpu.sim.parallel import run_all  # noqa: E402
from hybridgpu.sim.traces import TraceJob, load_trace, synthetic  # noqa: E402


def exact(value: Any) -> Any:
    """``value`` as JSON with every float as its repr (dataclasses as their fields)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: exact(getattr(value, f.name)) for f in fields(value)}
    return value


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _run(
    name: str,
    pools: Any,
    policy: Any,
    jobs: list[TraceJob],
    settings: SimSettings,
    progress: Any,
) -> dict[str, Any]:
    began = time.process_time()
    sim = simulation(name, pools, policy, jobs, settings)
    result = exact(sim.run())
    del result["ticks"]
    outcomes = [
        (
            j.trace.name,
            j.first_started,
            j.finished_at,
            j.wait_seconds,
            j.lost_seconds,
            j.reclaimed_at,
            j.restarts,
            j.run_id,
            j.done,
        )
        for j in sim.jobs
    ]
    return {
        "sha256": _digest({"result": result, "jobs": exact(outcomes)}),
        "cost_by_tier_dollars": result["cost_by_tier_dollars"],
        "ticks": sim.ticks,
        "decide_calls": sim.decisions,
        "cpu_seconds": round(time.process_time() - began, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("bundled", "synthetic", "dlrm"))
    parser.add_argument("--jobs", type=int, default=20_000, help="synthetic")
    parser.add_argument("--workers", type=int, default=2, help="policies run at once")
    args = parser.parse_args()
    settings = SimSettings(spot_hazard_per_hour=0.05, seed=7)
    if args.what == "bundled":
        config = load_cluster(simulate_scale.BUNDLED)
        pools, policy = config.pools, config.policy.spec
        jobs = share_fractional(synthetic(seed=7, hours=72), pools)
    elif args.what == "synthetic":
        jobs, _, pools, policy = simulate_scale.synthetic_cluster(args.jobs)
    else:
        config = load_cluster(ROOT / "examples" / "cluster-dlrm.yaml")
        pools, policy = config.pools, config.policy.spec
        jobs = load_trace(simulate_scale.DLRM, "alibaba-dlrm").jobs
    tasks = {
        name: partial(_run, name, run_pools, run_policy, jobs, settings)
        for name, (run_pools, run_policy) in policy_runs(pools, policy).items()
    }
    out: dict[str, Any] = dict(run_all(tasks, workers=args.workers))
    bound = fluid_bound(pools, jobs, trace_window_seconds(jobs), WaitSLO())
    out["fluid_bound"] = {"sha256": _digest(exact(bound))}
    out["all_sha256"] = _digest({name: run["sha256"] for name, run in out.items()})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
