"""`hybridgpu simulate`: argument parsing and output; the work is in ``sim.compare``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from hybridgpu.errors import UserError, one_line
from hybridgpu.inputs import (
    file_name,
    non_negative_number,
    positive_number,
    seconds_up_to,
    worker_count,
)
from hybridgpu.sim.defaults import (
    DEFAULT_BILLING_MINIMUM_SECONDS,
    DEFAULT_BOOT_SECONDS,
    DEFAULT_CHECKPOINT_SECONDS,
    DEFAULT_FIRM_SLO_SECONDS,
    DEFAULT_PREEMPTIBLE_SLO_SECONDS,
    MAX_SPAN_DAYS,
    MAX_SPAN_SECONDS,
    TRACE_FORMATS,
)

DEFAULT_PNG = "out/simulation.png"
# A time longer than the longest simulation is a slip (1e300 s of billing minimum is a
# 300-digit bill): every seconds flag stops there.
_seconds = seconds_up_to(MAX_SPAN_SECONDS, f"the simulator's {MAX_SPAN_DAYS:g} days")


def add_parsers(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="compare hybridgpu against baselines on a job trace",
        description="Run the operator's decide() over a job trace in a discrete-event "
        "simulation and compare its cost and job waits with baselines (on_demand, reactive, "
        "owned_only, autoscaler_spot) and a fluid bound. Without arguments: the bundled "
        "synthetic scenario.",
    )
    parser.add_argument(
        "--cluster", type=file_name, help="GPUPool/ScalingPolicy manifests (default: bundled)"
    )
    parser.add_argument(
        "--trace", type=file_name, help="job trace file (default: the synthetic scenario)"
    )
    parser.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default=None,
        help="default: detected from the trace's header",
    )
    parser.add_argument(
        "--time-scale",
        type=positive_number,
        default=None,
        help="divide the trace's times and durations by this factor (default 1)",
    )
    parser.add_argument(
        "--epoch",
        action="store_true",
        help="the trace's arrival times are an absolute clock (e.g. Unix epoch seconds): "
        "start the simulation at the first arrival",
    )
    parser.add_argument(
        "--skip-infeasible",
        action="store_true",
        help="leave out (and report) jobs that need more GPUs than any node they may use "
        "(default: such a job is an error)",
    )
    parser.add_argument("--qos-map", help="openb qos mapping, e.g. LS=standard,BE=preemptible")
    parser.add_argument(
        "--spot-trace", type=file_name, help="measured spot preemption trace (spot-traces JSON)"
    )
    parser.add_argument(
        "--spot-availability",
        type=file_name,
        help="measured spot availability (spot-traces JSON of counts): a spot pool cannot "
        "launch while none of the group could be had",
    )
    parser.add_argument(
        "--availability-counts",
        choices=("unavailable", "available"),
        default=None,
        help="what the availability trace's counts count (default unavailable: the 1-node "
        "preemption traces use 1 for no instance)",
    )
    parser.add_argument(
        "--spot-correlated",
        type=file_name,
        help="measured multi-node preemptions (spot-traces JSON of counts): a rise of d in a "
        "group of k preempts d/k of a spot pool's nodes at once, instead of one by one",
    )
    parser.add_argument(
        "--spot-prices",
        type=file_name,
        help="spot price series, CSV seconds,pool,price_per_node_hour (docs/concepts.md): each "
        "listed spot pool is billed per interval at the price in force and the operator sees it "
        "as the provider's price (default: the pools' constant pricing.perNodeHour)",
    )
    parser.add_argument(
        "--spot-hazard",
        type=non_negative_number,
        default=None,
        help="spot interruptions per node-hour when no --spot-trace (default 0.05)",
    )
    parser.add_argument(
        "--provisioning-delay",
        type=_seconds,
        default=DEFAULT_BOOT_SECONDS,
        help="seconds from launching a cloud GPU node to it running work, image pull "
        f"included (default {DEFAULT_BOOT_SECONDS:g}); a GPUPool of the cluster file may say "
        "its own with the annotation sim.hybridgpu.io/boot-time (e.g. 8m)",
    )
    parser.add_argument(
        "--restart-overhead",
        type=_seconds,
        default=300.0,
        help="seconds a job spends starting again after a move or an interruption, before it "
        "makes progress (default 300)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=_seconds,
        default=DEFAULT_CHECKPOINT_SECONDS,
        help="seconds of progress between a job's checkpoints; work since the last one is lost "
        "on a move or an interruption; 0 = never checkpoints "
        f"(default {DEFAULT_CHECKPOINT_SECONDS:g})",
    )
    parser.add_argument(
        "--billing-minimum",
        type=_seconds,
        default=DEFAULT_BILLING_MINIMUM_SECONDS,
        help="seconds a cloud node is billed at least "
        f"(default {DEFAULT_BILLING_MINIMUM_SECONDS:g})",
    )
    parser.add_argument(
        "--firm-slo",
        type=_seconds,
        default=DEFAULT_FIRM_SLO_SECONDS,
        help="seconds a critical or standard job may finish later than arrival + duration; "
        f"the fluid bound holds for schedules that meet it (default {DEFAULT_FIRM_SLO_SECONDS:g})",
    )
    parser.add_argument(
        "--preemptible-slo",
        type=_seconds,
        default=DEFAULT_PREEMPTIBLE_SLO_SECONDS,
        help=f"the same for preemptible jobs (default {DEFAULT_PREEMPTIBLE_SLO_SECONDS:g})",
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed (7)")
    parser.add_argument(
        "--hours",
        type=positive_number,
        default=None,
        help="length of the synthetic scenario in hours (default 72; not with --trace)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="split each policy's cloud spend above the fluid bound into named causes "
        "(booting, idle and half-empty nodes, work in the cloud while owned GPUs were free, "
        "lost work, billing minimum); the terms sum to the gap",
    )
    parser.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="policies simulated at once, each in a process of its own (default: the CPUs "
        "this process may use, at most one per policy; 1: one after the other, in this "
        "process); the results are the same",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--png", type=file_name, default=None, help=f"chart path (default {DEFAULT_PNG})"
    )
    parser.add_argument("--no-png", action="store_true", help="do not write the chart")
    parser.set_defaults(func=run)


def _check_flags(args: argparse.Namespace) -> None:
    """Flags that contradict each other or do nothing in this run are an error, not ignored."""
    unused_without_trace = ("--time-scale", "--trace-format", "--qos-map", "--epoch")
    given = {
        "--time-scale": args.time_scale is not None,
        "--trace-format": args.trace_format is not None,
        "--qos-map": args.qos_map is not None,
        "--epoch": args.epoch,
    }
    if not args.trace:
        for flag in unused_without_trace:
            if given[flag]:
                raise UserError(f"{flag} applies to --trace FILE; without --trace it does nothing")
    elif args.hours is not None:
        raise UserError("--hours sets the synthetic scenario's length; a --trace sets its own")
    if args.qos_map is not None and args.trace_format == "csv":
        raise UserError("--qos-map maps openb qos values; a csv trace names the criticality")
    if args.spot_correlated and (args.spot_trace or args.spot_hazard is not None):
        raise UserError(
            "--spot-correlated replaces --spot-trace and --spot-hazard: pass one of them"
        )
    if args.availability_counts is not None and not args.spot_availability:
        raise UserError("--availability-counts applies to --spot-availability FILE")
    if args.spot_trace and args.spot_hazard is not None:
        raise UserError(
            "--spot-hazard and --spot-trace both set spot interruptions: pass one of them"
        )
    if args.no_png and args.png is not None:
        raise UserError("--png and --no-png contradict each other: pass one of them")
    if args.hours is not None and args.hours > MAX_SPAN_DAYS * 24:
        raise UserError(
            f"--hours {args.hours:g}: the simulator covers at most {MAX_SPAN_DAYS * 24:g} hours"
        )


def _check_png(path: str) -> None:
    """The chart's path is checked before the simulation runs, not after."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise UserError(f"--png {path}: the chart is a PNG; expected a file name ending in .png")
    if out.is_dir():
        raise UserError(f"--png {path}: is a directory; expected a file name ending in .png")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--png {path}: cannot create {out.parent}: {err.strerror}") from None
    existed = out.exists()
    try:
        with out.open("ab"):
            pass
    except OSError as err:
        raise UserError(f"--png {path}: cannot write: {err.strerror} (or pass --no-png)") from None
    if not existed:
        out.unlink()


def _read_trace(args: argparse.Namespace, notes: list[str]) -> tuple[list[Any], str, Any]:
    """The jobs of the trace (or the synthetic scenario), where they came from, and the
    ``TraceLoad`` (None: the synthetic scenario)."""
    from hybridgpu.sim.traces import (
        check_span,
        detect_trace_format,
        load_trace,
        parse_qos_map,
        starting_at_first_arrival,
        synthetic,
    )

    if not args.trace:
        hours = 72.0 if args.hours is None else args.hours
        jobs = synthetic(seed=args.seed, hours=hours)
        return jobs, f"synthetic scenario ({hours:g} h, seed {args.seed})", None
    trace_format = args.trace_format or detect_trace_format(args.trace)
    scale = 1.0 if args.time_scale is None else args.time_scale
    qos_map = parse_qos_map(args.qos_map) if args.qos_map is not None else None
    if trace_format == "openb" and qos_map is None:
        qos_map = parse_qos_map(None)
    load = load_trace(args.trace, trace_format, time_scale=scale, qos_map=qos_map)
    jobs = starting_at_first_arrival(load.jobs) if args.epoch else load.jobs
    if load.skipped:
        notes.append(f"skipped: {load.skipped_text()}")
    source = f"{args.trace} ({trace_format}, time scale {scale:g})"
    if not args.skip_infeasible:
        # Without --skip-infeasible no job is dropped later, so the span can be checked now,
        # before the cluster file's models are built.
        check_span(jobs, source)
    return jobs, source, load


def _feasible(
    args: argparse.Namespace, jobs: list[Any], source: str, pools: Any, notes: list[str]
) -> tuple[list[Any], list[Any]]:
    """The trace's jobs, checked: every job fits some node (or is skipped with
    --skip-infeasible) and the simulated span is bounded; and the skipped ones
    (``sim.config.Infeasible``)."""
    from hybridgpu.sim.config import feasible_jobs
    from hybridgpu.sim.traces import check_span

    if not args.trace:
        return jobs, []
    jobs, infeasible = feasible_jobs(jobs, pools, args.trace, skip=args.skip_infeasible)
    if infeasible:
        names = ", ".join(b.job.name for b in infeasible[:5])
        more = f" and {len(infeasible) - 5} more" if len(infeasible) > 5 else ""
        notes.append(
            f"skipped {len(infeasible)} job(s) no node can run (--skip-infeasible): "
            f"{names}{more}; {infeasible[0].reason}"
        )
    check_span(jobs, source)
    return jobs, infeasible


def _skipped_json(load: Any, infeasible: list[Any]) -> dict[str, Any]:
    """``skipped`` of `simulate --json`: the jobs of the trace left out, by reason (every
    reason of SKIP_REASONS, 0 when none), and each job skipped by --skip-infeasible."""
    from hybridgpu.sim.traces import skipped_counts

    counts = skipped_counts(load.skipped if load is not None else {}, len(infeasible))
    return {
        "total": sum(counts.values()),
        "by_reason": counts,
        "infeasible_jobs": [{"name": b.job.name, "reason": b.reason} for b in infeasible],
    }


def run(args: argparse.Namespace) -> int:
    from hybridgpu.sim.spot import load_availability_trace, load_correlated_trace
    from hybridgpu.sim.traces import load_spot_trace

    _check_flags(args)
    if not args.no_png:
        _check_png(args.png or DEFAULT_PNG)
    notes: list[str] = []
    # The trace before the cluster file: a malformed trace is reported without building the
    # pydantic models (a quarter of a CPU second: seconds on a loaded machine).
    jobs, source, load = _read_trace(args, notes)
    from hybridgpu.sim.config import load_cluster

    if args.cluster:
        config = load_cluster(args.cluster)
    else:
        bundled = resources.files("hybridgpu.sim").joinpath("scenarios/default-cluster.yaml")
        with resources.as_file(bundled) as path:
            config = load_cluster(path)
    jobs, infeasible = _feasible(args, jobs, source, config.pools, notes)
    if not jobs:
        # Say why: every row may have been left out (no GPU, never scheduled, 0 s).
        why = f" ({'; '.join(notes)})" if notes else ""
        raise UserError(f"{args.trace or 'trace'}: no GPU jobs to simulate{why}")
    spot_trace = load_spot_trace(args.spot_trace) if args.spot_trace else None
    from hybridgpu.sim.prices import load_spot_prices

    spot_prices = load_spot_prices(args.spot_prices) if args.spot_prices else None
    if spot_prices is not None:
        spot_prices.check_pools(
            (p.name for p in config.pools if p.spec.tier == "spot"), args.spot_prices
        )
    from hybridgpu.sim.engine import SimSettings

    settings = SimSettings(
        provisioning_delay_seconds=args.provisioning_delay,
        boot_seconds_by_pool=config.boot_seconds,
        restart_overhead_seconds=args.restart_overhead,
        checkpoint_interval_seconds=args.checkpoint_interval,
        billing_minimum_seconds=args.billing_minimum,
        spot_hazard_per_hour=0.05 if args.spot_hazard is None else args.spot_hazard,
        spot_trace=spot_trace,
        spot_availability=(
            load_availability_trace(
                args.spot_availability, counts=args.availability_counts or "unavailable"
            )
            if args.spot_availability
            else None
        ),
        spot_correlated=(
            load_correlated_trace(args.spot_correlated) if args.spot_correlated else None
        ),
        spot_prices=spot_prices,
        seed=args.seed,
    )
    from hybridgpu.sim.compare import BOUND, HEADLINE_PEER, WaitSLO, compare
    from hybridgpu.sim.report import (
        LEGEND,
        annotations_summary,
        explain_gap,
        explain_table,
        headline,
        table,
        write_png,
    )

    slo = WaitSLO(firm_seconds=args.firm_slo, preemptible_seconds=args.preemptible_slo)
    progress: _ProgressBar | _ProgressLines | None = None
    if not sys.stderr.isatty():
        progress = _ProgressLines()  # logs and CI: a line now and then on long runs
    elif not args.json:
        progress = _ProgressBar()
    from hybridgpu.sim.parallel import usable_cpus

    try:
        results = compare(
            config.pools,
            config.policy.spec,
            jobs,
            settings,
            slo=slo,
            progress=progress,
            failed=None if progress is None else progress.failed,
            workers=usable_cpus() if args.workers is None else args.workers,
        )
    finally:
        if progress is not None:
            progress.close()
    png = None if args.no_png else write_png(results, args.png or DEFAULT_PNG)
    if args.json:
        out = {
            "source": source,
            "jobs": len(jobs),
            "skipped": _skipped_json(load, infeasible),
            "notes": notes,
            "headline_peer": HEADLINE_PEER if HEADLINE_PEER in results else "on_demand",
            "wait_slo_seconds": {
                "firm": slo.firm_seconds,
                "preemptible": slo.preemptible_seconds,
            },
            "policies": {
                name: {
                    **r.to_json(),
                    "work_gpu_hours": round(r.work_gpu_hours, 1),
                    "meets_slo": name == BOUND or slo.met_by(r),
                }
                for name, r in results.items()
            },
        }
        if args.explain:
            out["explain"] = {
                name: {k: round(v, 2) for k, v in explain_gap(r, results[BOUND]).items()}
                for name, r in results.items()
                if name not in (BOUND, "owned_only")
            }
        if png is not None:
            out["png"] = str(png)
        print(json.dumps(out, indent=2))
        return 0
    print(f"hybridgpu simulate: {len(jobs)} job{'' if len(jobs) == 1 else 's'} from {source}")
    for note in notes:
        print(f"  {note}")
    print(table(results, slo))
    print(f"\n{LEGEND}")
    print(f"\n{headline(results)}")
    for line in annotations_summary(results):
        print(line)
    if args.explain:
        print(f"\n{explain_table(results)}")
    if png is not None:
        print(f"chart: {png}")
    return 0


class _ProgressLines:
    """Progress as plain lines on stderr (not a terminal): silent for the first
    ``quiet_seconds``, then one line every ``every_seconds`` of wall time, naming each policy
    still being simulated (several with --workers)."""

    def __init__(self, *, quiet_seconds: float = 10.0, every_seconds: float = 30.0) -> None:
        self.started = time.monotonic()
        self.quiet_seconds = quiet_seconds
        self.next_line = self.started + quiet_seconds
        self.every_seconds = every_seconds
        self.going: dict[str, float] = {}
        """The fraction simulated of each run going (a finished one, at 1.0, is dropped)."""

    def __call__(self, name: str, fraction: float) -> None:
        if fraction >= 1.0:
            self.going.pop(name, None)
            return
        self.going[name] = fraction
        now = time.monotonic()
        if now < self.next_line:
            return
        self.next_line = now + self.every_seconds
        runs = ", ".join(f"{n} {f:.0%}" for n, f in self.going.items())
        print(
            f"hybridgpu simulate: {runs} of the trace simulated "
            f"({now - self.started:,.0f} s elapsed)",
            file=sys.stderr,
            flush=True,
        )

    def failed(self, name: str, error: Exception, left: int) -> None:
        """A run failed while ``left`` others go on or wait: said at once past the quiet start
        (a short run's error is printed soon anyway, once, at the end)."""
        self.going.pop(name, None)
        if left and time.monotonic() >= self.started + self.quiet_seconds:
            print(_failed_line(name, error, left), file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def _failed_line(name: str, error: Exception, left: int) -> str:
    """What a user is told the moment a run fails while ``left`` others go on or wait."""
    others = "the other run goes" if left == 1 else f"the {left} other runs go"
    return (
        f"hybridgpu simulate: {name} failed: {one_line(error)}; {others} on and every error "
        "is printed at their end (Ctrl-C stops them)"
    )


class _ProgressBar:
    """tqdm bars on stderr, one per policy being simulated (one at a time with --workers 1):
    a finished policy's bar is reset for the next."""

    def __init__(self) -> None:
        from tqdm import tqdm

        # No monitor thread: the workers of --workers are forked from this process while
        # the bars run, and a fork copies no thread but may copy a lock one holds.
        tqdm.monitor_interval = 0
        self.tqdm = tqdm
        self.bars: list[Any] = []
        self.shown: list[str] = []
        """The policy each bar shows."""
        self.finished: set[str] = set()

    def __call__(self, name: str, fraction: float) -> None:
        if name in self.shown:
            bar = self.bars[self.shown.index(name)]
        else:
            row = next((i for i, n in enumerate(self.shown) if n in self.finished), None)
            if row is None:
                row = len(self.bars)
                self.bars.append(
                    self.tqdm(
                        total=1000,
                        file=sys.stderr,
                        leave=False,
                        position=row,
                        bar_format="{desc} {bar} {percentage:3.0f}%",
                    )
                )
                self.shown.append(name)
            else:
                self.shown[row] = name
            bar = self.bars[row]
            bar.set_description(f"simulating {name:<10}")
            bar.reset(total=1000)
        if fraction >= 1.0:
            self.finished.add(name)
        bar.n = int(fraction * 1000)
        bar.refresh()

    def failed(self, name: str, error: Exception, left: int) -> None:
        """A run failed while ``left`` others go on or wait: a line above the bars at once,
        and its bar is free for the next run."""
        self.finished.add(name)
        if left:
            self.tqdm.write(_failed_line(name, error, left), file=sys.stderr)

    def close(self) -> None:
        for bar in reversed(self.bars):
            bar.close()
