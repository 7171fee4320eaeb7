"""`hybridgpu simulate`: argument parsing and output; the work is in ``sim.compare``."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from typing import Any

from hybridgpu.errors import UserError

DEFAULT_PNG = "out/simulation.png"


def add_parsers(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="compare hybridgpu against baselines on a job trace",
        description="Run the operator's decide() over a job trace in a discrete-event "
        "simulation and compare its cost and job waits with baselines (on_demand, reactive, "
        "owned_only, lower_bound). Without arguments: the bundled synthetic scenario.",
    )
    parser.add_argument("--cluster", help="GPUPool/ScalingPolicy manifests (default: bundled)")
    parser.add_argument("--trace", help="job trace file (default: the synthetic scenario)")
    parser.add_argument("--trace-format", choices=("openb", "csv"), default="openb")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="divide the trace's times and durations by this factor (default 1)",
    )
    parser.add_argument("--qos-map", help="openb qos mapping, e.g. LS=standard,BE=preemptible")
    parser.add_argument("--spot-trace", help="measured spot preemption trace (spot-traces JSON)")
    parser.add_argument(
        "--spot-hazard",
        type=float,
        default=None,
        help="spot interruptions per node-hour when no --spot-trace (default 0.05)",
    )
    parser.add_argument("--provisioning-delay", type=float, default=120.0, help="seconds (120)")
    parser.add_argument("--restart-overhead", type=float, default=300.0, help="seconds (300)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (7)")
    parser.add_argument("--hours", type=float, default=72.0, help="synthetic scenario length")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--png", default=DEFAULT_PNG, help=f"chart path (default {DEFAULT_PNG})")
    parser.add_argument("--no-png", action="store_true", help="do not write the chart")
    parser.set_defaults(func=run)


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise UserError(f"{name} must be > 0, got {value}")


def run(args: argparse.Namespace) -> int:
    from hybridgpu.sim.compare import compare
    from hybridgpu.sim.config import load_cluster
    from hybridgpu.sim.engine import SimSettings
    from hybridgpu.sim.report import table, write_png
    from hybridgpu.sim.traces import load_csv, load_openb, load_spot_trace, parse_qos_map, synthetic

    _positive("--time-scale", args.time_scale)
    if args.provisioning_delay < 0 or args.restart_overhead < 0:
        raise UserError("--provisioning-delay and --restart-overhead must be >= 0")
    if args.spot_hazard is not None and args.spot_hazard < 0:
        raise UserError("--spot-hazard must be >= 0")
    if args.cluster:
        config = load_cluster(args.cluster)
    else:
        bundled = resources.files("hybridgpu.sim").joinpath("scenarios/default-cluster.yaml")
        with resources.as_file(bundled) as path:
            config = load_cluster(path)
    notes: list[str] = []
    if args.trace:
        if args.trace_format == "openb":
            load = load_openb(
                args.trace, time_scale=args.time_scale, qos_map=parse_qos_map(args.qos_map)
            )
        else:
            load = load_csv(args.trace, time_scale=args.time_scale)
        jobs = load.jobs
        if load.skipped:
            notes.append(
                "skipped: "
                + ", ".join(
                    f"{n} {why.replace('_', ' ')}" for why, n in sorted(load.skipped.items())
                )
            )
        source = f"{args.trace} ({args.trace_format}, time scale {args.time_scale:g})"
    else:
        jobs = synthetic(seed=args.seed, hours=args.hours)
        source = f"synthetic scenario ({args.hours:g} h, seed {args.seed})"
    if not jobs:
        raise UserError(f"{args.trace or 'trace'}: no GPU jobs to simulate")
    spot_trace = load_spot_trace(args.spot_trace) if args.spot_trace else None
    settings = SimSettings(
        provisioning_delay_seconds=args.provisioning_delay,
        restart_overhead_seconds=args.restart_overhead,
        spot_hazard_per_hour=0.05 if args.spot_hazard is None else args.spot_hazard,
        spot_trace=spot_trace,
        seed=args.seed,
    )
    show_progress = not args.json and sys.stderr.isatty()
    progress = _ProgressBar() if show_progress else None
    try:
        results = compare(config.pools, config.policy.spec, jobs, settings, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    png = None if args.no_png else write_png(results, args.png)
    if args.json:
        out = {
            "source": source,
            "jobs": len(jobs),
            "policies": {name: r.to_json() for name, r in results.items()},
        }
        if png is not None:
            out["png"] = str(png)
        print(json.dumps(out, indent=2))
        return 0
    print(f"hybridgpu simulate: {len(jobs)} jobs from {source}")
    for note in notes:
        print(f"  {note}")
    print(table(results))
    h, od = results["hybridgpu"], results["on_demand"]
    saving = 1 - h.total_cost_dollars / od.total_cost_dollars if od.total_cost_dollars else 0.0
    print(f"\nhybridgpu costs {saving:.0%} less than all on-demand", end="")
    if "reactive" in results and results["reactive"].total_cost_dollars:
        vs = 1 - h.total_cost_dollars / results["reactive"].total_cost_dollars
        print(f" and {vs:.0%} less than core + reactive elastic", end="")
    print(".")
    if png is not None:
        print(f"chart: {png}")
    return 0


class _ProgressBar:
    """One tqdm bar on stderr, reset for each simulated policy."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=1000,
            file=sys.stderr,
            leave=False,
            bar_format="{desc} {bar} {percentage:3.0f}%",
        )
        self.name = ""

    def __call__(self, name: str, fraction: float) -> None:
        if name != self.name:
            self.name = name
            self.bar.set_description(f"simulating {name:<10}")
            self.bar.reset(total=1000)
        self.bar.n = int(fraction * 1000)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
