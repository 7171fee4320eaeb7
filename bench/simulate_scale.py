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
ticks and the ticks that ran decide(), and the process's peak RSS. With ``--workers N`` the
policies run N at once in worker processes, as `hybridgpu simulate --workers N` runs them:
``cpu_seconds`` is then this process's, ``workers_cpu_seconds`` the workers' (ended child
processes, ``RUSAGE_CHILDREN``), ``total_cpu_seconds`` both; each policy's figures are
measured in the worker that ran it; ``peak_rss_largest_worker_mib`` is the largest worker's
peak RSS (which counts again the pages it shares with this process).

    .venv/bin/python bench/simulate_scale.py dlrm --workers 2

``plan`` runs `hybridgpu plan` as it is run (its fast search replays several fleets at once
in worker processes, one per CPU this process may use; ``--workers N`` passes `--workers N`
to it): ``cpu_seconds`` is this process's, ``workers_cpu_seconds`` the workers',
``total_cpu_seconds`` both; ``replays`` counts those made here and in the workers,
``replay_cpu_seconds`` only those made here.
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
from collections.abc import Callable
from dataclasses import replace
from functools import partial
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
from hybridgpu.sim.parallel import run_all  # noqa: E402
from hybridgpu.sim.traces import TraceJob, load_trace, synthetic  # noqa: E402

DLRM = ROOT.parent / "shared" / "traces" / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv"
BUNDLED = ROOT / "operator" / "hybridgpu" / "sim" / "scenarios" / "default-cluster.yaml"
SYNTHETIC_DAYS = 30.0
# The synthetic process yields about 3,550 jobs in 30 days (seeds 1-52: 184,846); copies are
# added past this first guess until there are ``--jobs``.
JOBS_PER_COPY = 3900


def _peak_rss_mib(who: int = resource.RUSAGE_SELF) -> int:
    return round(resource.getrusage(who).ru_maxrss / 1024)


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


def synthetic_cluster(jobs: int) -> tuple[list[TraceJob], int, list[Any], Any]:
    """The synthetic run's jobs, copies of the bundled scenario, and its cluster: the bundled
    pools with ``maxNodes`` and ``minNodes`` multiplied by the copies, and its policy."""
    trace, copies = _synthetic_jobs(jobs)
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
    return trace, copies, pools, config.policy.spec


def _children_cpu_seconds() -> float:
    """User + sys CPU seconds of this process's ended (and waited-for) child processes."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def _measured_run(
    name: str,
    pools: Any,
    policy: Any,
    jobs: list[TraceJob],
    settings: SimSettings,
    progress: Callable[[float], None] | None,
) -> dict[str, Any]:
    """One policy's run and its figures, measured in the process that runs it."""
    began = time.perf_counter()
    began_cpu = time.process_time()
    sim = simulation(name, pools, policy, jobs, settings, progress)
    result = sim.run()
    return {
        "wall_seconds": round(time.perf_counter() - began, 1),
        "cpu_seconds": round(time.process_time() - began_cpu, 1),
        "ticks": result.ticks,
        "decide_calls": sim.decisions,
        "cloud_cost_dollars": round(result.cloud_cost_dollars, 2),
        "unfinished_jobs": result.unfinished_jobs,
    }


def _simulate(
    pools: Any,
    policy: Any,
    jobs: list[TraceJob],
    only: list[str] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Every policy of `hybridgpu simulate` (its default physics: hazard 0.05, seed 7), or
    those of ``only`` (``fluid_bound`` among them for the bound), ``workers`` at once as
    `hybridgpu simulate --workers` runs them (the bound in this process)."""
    settings = SimSettings(spot_hazard_per_hour=0.05, seed=7)
    tasks = {
        name: partial(_measured_run, name, run_pools, run_policy, jobs, settings)
        for name, (run_pools, run_policy) in policy_runs(pools, policy).items()
        if only is None or name in only
    }
    start = time.perf_counter()
    cpu = time.process_time()
    children_cpu = _children_cpu_seconds()
    policies = run_all(tasks, workers=workers)
    if only is None or BOUND in only:
        fluid_bound(pools, jobs, window_seconds(jobs), WaitSLO())
    cpu = time.process_time() - cpu
    children_cpu = _children_cpu_seconds() - children_cpu
    return {
        "jobs": len(jobs),
        "policies": policies,
        "workers": workers,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(cpu, 1),
        "workers_cpu_seconds": round(children_cpu, 1),
        "total_cpu_seconds": round(cpu + children_cpu, 1),
    }


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
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="dlrm and synthetic: policies simulated at once in worker processes, as "
        "`hybridgpu simulate --workers` (default 1: one after the other, in this process); "
        "plan: `hybridgpu plan --workers` (default: its own, the CPUs this process may use)",
    )
    args = parser.parse_args()
    if args.workers is not None and args.workers < 1:
        parser.error("--workers: a whole number >= 1")
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
        out = _simulate(config.pools, config.policy.spec, jobs, args.policy, args.workers or 1)
    elif args.what == "synthetic":
        jobs, copies, pools, policy = synthetic_cluster(args.jobs)
        simulated = _simulate(pools, policy, jobs, args.policy, args.workers or 1)
        out = {"copies": copies, **simulated}
    else:
        out = _plan(args.jobs, args.search, args.workers)
    out["peak_rss_mib"] = _peak_rss_mib()
    if args.what != "plan":
        # The largest worker's peak, the pages it shares with this process (the trace, forked
        # copy-on-write) counted again: the two peaks overstate the memory used together.
        out["peak_rss_largest_worker_mib"] = _peak_rss_mib(resource.RUSAGE_CHILDREN)
    print(json.dumps(out, indent=2))
    return 0


def _is_replay(result: Any) -> bool:
    """A replay's result: Usage (an owned fleet) or (Usage, enough) (with committed nodes)."""
    from hybridgpu.planner.model import Usage

    if isinstance(result, tuple):
        return len(result) == 2 and isinstance(result[0], Usage)
    return isinstance(result, Usage)


def _plan(count: int, search: str = "auto", workers: int | None = None) -> dict[str, Any]:
    import hybridgpu.planner.cost as cost_module
    import hybridgpu.planner.procure as procure_module
    import hybridgpu.sim.parallel as parallel_module
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
    run_all = parallel_module.run_all

    def counted_run_all(tasks: Any, **kwargs: Any) -> Any:
        done = run_all(tasks, **kwargs)
        in_workers = min(kwargs.get("workers", 1), len(tasks)) > 1 and parallel_module.can_fork()
        if in_workers:  # else the replays were made (and counted) here
            # Usage (an owned fleet's) or (Usage, enough) (with committed nodes), not the
            # aggregate model's flip points, sensitivity table or procurement.
            replays["count"] += sum(_is_replay(d) for d in done.values())
        return done

    parallel_module.run_all = counted_run_all  # type: ignore[assignment]

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
        if workers is not None:
            argv += ["--workers", str(workers)]
        start = time.perf_counter()
        cpu = time.process_time()
        children_cpu = _children_cpu_seconds()
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = cli([*argv, "--json", "--search", search])
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        children_cpu = _children_cpu_seconds() - children_cpu
    status = json.loads(stdout.getvalue())["status"] if code == 0 else None
    return {
        "jobs": len(jobs),
        "copies": copies,
        "exit_code": code,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "workers_cpu_seconds": round(children_cpu, 1),
        "total_cpu_seconds": round(cpu + children_cpu, 1),
        "search": None if code != 0 else json.loads(stdout.getvalue())["search"]["method"],
        "recommended_nodes": None if status is None else status.get("recommendedNodes"),
        "monthly_total": None if status is None else status["monthlyCost"]["total"],
        "replays": replays["count"],
        "replay_cpu_seconds": round(replays["cpu_seconds"], 1),
    }


if __name__ == "__main__":
    sys.exit(main())
