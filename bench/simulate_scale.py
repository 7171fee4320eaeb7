"""The simulator and the planner at production scale (issue 14): wall time and peak memory.

    .venv/bin/python bench/simulate_scale.py dlrm                  # the full DLRM trace
    .venv/bin/python bench/simulate_scale.py dlrm --days 3         # its first 3 days
    .venv/bin/python bench/simulate_scale.py synthetic --jobs 20000
    .venv/bin/python bench/simulate_scale.py synthetic --jobs 200000 --policy owned_only
    .venv/bin/python bench/simulate_scale.py plan --jobs 200000
    .venv/bin/python bench/simulate_scale.py plan --jobs 8000 --search fast

``dlrm``: the Alibaba 2025 DLRM serving trace (../shared/traces/alibaba-dlrm, 7,386 GPU
instances over 31 days) on examples/cluster-dlrm.yaml (250 owned 8-GPU nodes, thousands of
cloud nodes allowed), every policy and the bound, as `hybridgpu simulate` runs them.
``synthetic``: ``--jobs`` jobs of the bundled scenario's kind over 30 days: that many
independent copies of the built-in synthetic process (each about 3,550 jobs in 30 days),
on the bundled cluster with every pool's maxNodes times the copies. ``plan``: `hybridgpu
plan --config examples/plan.yaml` on the same synthetic jobs written as a CSV trace.

Prints one JSON object: wall and CPU seconds (the simulation or plan, not the loading; on a
shared machine the CPU seconds are what an idle one would take), per policy the same, its
ticks and the ticks that ran decide(), and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import math
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.sim.compare import (  # noqa: E402
    BOUND,
    POLICIES,
    WaitSLO,
    fluid_bound,
    policy_runs,
    simulation,
)
from hybridgpu.sim.compare import trace_window_seconds as window_seconds  # noqa: E402
from hybridgpu.sim.config import load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings  # noqa: E402
from hybridgpu.sim.traces import TraceJob, load_trace, synthetic  # noqa: E402

DLRM = ROOT.parent / "shared" / "traces" / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv"
BUNDLED = ROOT / "operator" / "hybridgpu" / "sim" / "scenarios" / "default-cluster.yaml"
SYNTHETIC_DAYS = 30.0
# The synthetic process yields about 3,550 jobs in 30 days (seeds 1-52: 184,846); copies are
# added past this first guess until there are ``--jobs``.
JOBS_PER_COPY = 3900


def _peak_rss_mib() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _synthetic_jobs(jobs: int) -> tuple[list[TraceJob], int]:
    """The first ``jobs`` jobs (by arrival) of as many copies as it takes to have them."""
    copies = max(1, math.ceil(jobs / JOBS_PER_COPY))
    out: list[TraceJob] = []
    for copy in itertools.count():
        if copy >= copies and len(out) >= jobs:
            break
        for job in synthetic(seed=copy + 1, hours=SYNTHETIC_DAYS * 24):
            out.append(replace(job, name=f"c{copy}-{job.name}"))
    copies = copy
    out.sort(key=lambda j: (j.arrival_seconds, j.name))
    return out[:jobs], copies


def _simulate(
    pools: Any, policy: Any, jobs: list[TraceJob], only: list[str] | None = None
) -> dict[str, Any]:
    """Every policy of `hybridgpu simulate` (its default physics: hazard 0.05, seed 7), or
    those of ``only`` (``fluid_bound`` among them for the bound)."""
    settings = SimSettings(spot_hazard_per_hour=0.05, seed=7)
    out: dict[str, Any] = {"jobs": len(jobs), "policies": {}}
    start = time.perf_counter()
    cpu = time.process_time()
    for name, (run_pools, run_policy) in policy_runs(pools, policy).items():
        if only is not None and name not in only:
            continue
        began = time.perf_counter()
        began_cpu = time.process_time()
        sim = simulation(name, run_pools, run_policy, jobs, settings)
        result = sim.run()
        out["policies"][name] = {
            "wall_seconds": round(time.perf_counter() - began, 1),
            "cpu_seconds": round(time.process_time() - began_cpu, 1),
            "ticks": result.ticks,
            "decide_calls": sim.decisions,
            "cloud_cost_dollars": round(result.cloud_cost_dollars, 2),
            "unfinished_jobs": result.unfinished_jobs,
        }
    if only is None or BOUND in only:
        fluid_bound(pools, jobs, window_seconds(jobs), WaitSLO())
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    out["cpu_seconds"] = round(time.process_time() - cpu, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("dlrm", "synthetic", "plan"))
    parser.add_argument("--jobs", type=int, default=20_000, help="synthetic and plan")
    parser.add_argument(
        "--search",
        choices=("auto", "exact", "fast"),
        default="auto",
        help="plan: `hybridgpu plan --search` (auto: fast above 10,000 jobs)",
    )
    parser.add_argument("--days", type=float, default=None, help="dlrm: only its first days")
    parser.add_argument(
        "--policy",
        action="append",
        choices=POLICIES,
        help="dlrm and synthetic: run only this policy (repeatable; default: all of them)",
    )
    args = parser.parse_args()
    if args.what == "dlrm":
        if not DLRM.exists():
            print(json.dumps({"skipped": f"{DLRM} not found"}))
            return 0
        config = load_cluster(ROOT / "examples" / "cluster-dlrm.yaml")
        jobs = load_trace(DLRM, "alibaba-dlrm").jobs
        if args.days is not None:
            end = args.days * 86400
            jobs = [
                replace(j, duration_seconds=min(j.duration_seconds, end - j.arrival_seconds))
                for j in jobs
                if j.arrival_seconds < end
            ]
        out = _simulate(config.pools, config.policy.spec, jobs, args.policy)
    elif args.what == "synthetic":
        jobs, copies = _synthetic_jobs(args.jobs)
        config = load_cluster(BUNDLED)
        pools = [
            replace(
                p,
                spec=p.spec.model_copy(
                    update={
                        "max_nodes": p.spec.max_nodes * copies,
                        "min_nodes": p.spec.min_nodes * copies,
                    }
                ),
            )
            for p in config.pools
        ]
        out = {"copies": copies, **_simulate(pools, config.policy.spec, jobs, args.policy)}
    else:
        out = _plan(args.jobs, args.search)
    out["peak_rss_mib"] = _peak_rss_mib()
    print(json.dumps(out, indent=2))
    return 0


def _plan(count: int, search: str = "auto") -> dict[str, Any]:
    import hybridgpu.planner.cost as cost_module
    import hybridgpu.planner.procure as procure_module
    from hybridgpu.cli import main as cli

    # Count the trace replays the plan makes (one per owned fleet and committed level it
    # prices): the planner's cost grows with their number times the trace's length.
    replays = {"count": 0, "cpu_seconds": 0.0}

    def counted(replay: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return replay(*args, **kwargs)
            finally:
                replays["count"] += 1
                replays["cpu_seconds"] += time.process_time() - began

        return run

    cost_module.replay_jobs = counted(cost_module.replay_jobs)  # type: ignore[assignment]
    procure_module.replay_committed = counted(procure_module.replay_committed)  # type: ignore[assignment]

    jobs, copies = _synthetic_jobs(count)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        with trace.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(("name", "arrival_seconds", "duration_seconds", "gpus", "criticality"))
            for j in jobs:
                row = (j.name, j.arrival_seconds, j.duration_seconds, j.gpus, j.criticality.value)
                writer.writerow(row)
        argv = ["plan", "--config", str(ROOT / "examples" / "plan.yaml"), "--trace", str(trace)]
        start = time.perf_counter()
        cpu = time.process_time()
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = cli([*argv, "--json", "--search", search])
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    status = json.loads(stdout.getvalue())["status"] if code == 0 else None
    return {
        "jobs": len(jobs),
        "copies": copies,
        "exit_code": code,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "search": None if code != 0 else json.loads(stdout.getvalue())["search"]["method"],
        "recommended_nodes": None if status is None else status.get("recommendedNodes"),
        "monthly_total": None if status is None else status["monthlyCost"]["total"],
        "replays": replays["count"],
        "replay_cpu_seconds": round(replays["cpu_seconds"], 1),
    }


if __name__ == "__main__":
    sys.exit(main())
